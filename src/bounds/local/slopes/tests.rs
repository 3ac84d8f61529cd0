//! Unit tests of the slope and multiplier search: its stopping rules, Adam's steps and the
//! gradients against finite differences.

use super::*;
use crate::bounds::local::region::Region;
use crate::bounds::local::seeded_net::seeded_net;
use crate::bounds::local::split::Phase;
use crate::bounds::local::InputSet;
use crate::onnx::model::DenseNet;

/// The search's stopping rules, pinned at values where each operand matters: the excess over
/// the sound bound, the prediction, the "safely above" margin of a tenth of the excess, and
/// the generous extrapolation `p + max(p - s, 0) 2 (iterations - step) / step` (= 7 here).
#[test]
fn the_stopping_rules_are_the_documented_formulas() {
    assert_eq!(excess_over_sound(3.0, 1.0), 2.0);
    assert_eq!(excess_over_sound(1.0, 3.0), 0.0);
    assert_eq!(predicted_sound(3.0, 1.0), 2.0);
    assert!(safely_above(2.0, 1.0, 1.85) && !safely_above(2.0, 1.0, 1.95));
    // strictly above, and the margin is a tenth of the excess (2 here: 0.2, not 0.05)
    assert!(!safely_above(2.0, 0.0, 2.0) && !safely_above(2.0, 2.0, 1.85));
    assert!(!cannot_reach((1.0, 0.0), 7.0, (5, 20)));
    assert!(cannot_reach((1.0, 0.0), 7.5, (5, 20)));
    // no progress yet: only the prediction itself counts
    assert!(!cannot_reach((1.0, 2.0), 1.0, (5, 20)) && cannot_reach((1.0, 2.0), 1.5, (5, 20)));
    assert!(cannot_reach((f64::NAN, 0.0), 0.0, (5, 20)));
}

/// Three Adam steps on one slope (gradients 1, -0.5, 0.25 from 0.5), against the textbook
/// update `a += STEP m_hat / (sqrt(v_hat) + 1e-12)` with bias-corrected moments, computed
/// apart (Python floats): the slope, first and second moments after each step.
#[test]
fn adam_takes_the_textbook_steps() {
    let want = [
        (0.5999999999999, 0.09999999999999998, 0.0010000000000000009),
        (
            0.6266337039659063,
            0.039999999999999994,
            0.0012490000000000012,
        ),
        (
            0.660676618786776,
            0.06099999999999999,
            0.0013102510000000012,
        ),
    ];
    let (mut a, mut m, mut v) = (
        Array2::from_elem((1, 1), 0.5),
        Array2::zeros((1, 1)),
        Array2::zeros((1, 1)),
    );
    for (step, (g, (wa, wm, wv))) in [1.0, -0.5, 0.25].into_iter().zip(want).enumerate() {
        adam_ascent(
            &mut a,
            &Array2::from_elem((1, 1), g),
            (&mut m, &mut v),
            step + 1,
            1.0,
        );
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * y.abs();
        assert!(close(a[[0, 0]], wa) && close(m[[0, 0]], wm) && close(v[[0, 0]], wv));
    }
}

/// Adam's safeguard against a zero second moment adds to the denominator: a tiny gradient
/// still steps along its sign (a subtracted safeguard would reverse it).
#[test]
fn a_tiny_gradient_steps_along_its_sign() {
    let (mut a, mut m, mut v) = (
        Array2::from_elem((1, 1), 0.5),
        Array2::zeros((1, 1)),
        Array2::zeros((1, 1)),
    );
    adam_ascent(
        &mut a,
        &Array2::from_elem((1, 1), 1e-20),
        (&mut m, &mut v),
        1,
        1.0,
    );
    assert!(a[[0, 0]] > 0.5 && a[[0, 0]] < 0.5 + 1e-8, "{}", a[[0, 0]]);
}

/// The search starts from CROWN's adaptive lower slopes: the unit's own lower slope.
#[test]
fn the_search_starts_from_crowns_slopes() {
    let unit = |lower| UnitRelaxation::Unstable {
        lower,
        slope: 0.5,
        offset: 0.5,
    };
    assert_eq!(crown_slope(&unit(1.0)), 1.0);
    assert_eq!(crown_slope(&unit(0.0)), 0.0);
}

/// A 3-5-4-3 ReLU network with fixed pseudo-random weights.
fn net() -> DenseNet {
    seeded_net(7, &[3, 5, 4, 3])
}

/// A batch of one block over `(lines, c, centre, reach)` at slopes `s` and multipliers `b`.
fn one_block<'a>(
    (lines, c, centre, reach): (&'a [Lines], &'a Array2<f64>, &'a Array1<f64>, Reach<'a>),
    (s, b, splits): (&'a [Array2<f64>], &'a [Array2<f64>], &'a Splits),
) -> Vec<Block<'a>> {
    vec![Block {
        lines,
        c,
        centre,
        reach,
        slopes: s,
        betas: b,
        splits,
    }]
}

/// Every entry of `grads` against central differences of `bound(k, r, j, delta)` (row `r`'s
/// bound with entry `(k, r, j)` moved by `delta`); how many entries are nonzero.
fn finite_differences(
    grads: &[Array2<f64>],
    bound: impl Fn(usize, usize, usize, f64) -> f64,
) -> usize {
    let h = 1e-6;
    let mut read = 0;
    for (k, g) in grads.iter().enumerate() {
        for ((r, j), &d) in g.indexed_iter() {
            let numeric = (bound(k, r, j, h) - bound(k, r, j, -h)) / (2.0 * h);
            assert!(
                (numeric - d).abs() <= 1e-6 * (1.0 + d.abs()),
                "layer {k} row {r} unit {j}: {d} vs {numeric}"
            );
            read += usize::from(d != 0.0);
        }
    }
    read
}

/// The slopes' and the split multipliers' derivatives over `set` with `splits` (relaxations
/// from the split bounds), checked against finite differences at slopes inside `[0, 1]` and
/// multipliers away from zero; how many of each are nonzero.
fn check_gradients(set: InputSet<'_>, splits: &Splits) -> (usize, usize) {
    let dense = net();
    let local = LocalNet::new(&dense, None, None).unwrap();
    let region = Region::new(set, 3).unwrap();
    let Ok(hidden) = local.hidden_over(&region, &[], splits, None) else {
        panic!("the subdomain is feasible at this point")
    };
    let c = ndarray::array![[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]];
    let fill = |base: f64, step: usize| -> Vec<Array2<f64>> {
        (hidden.relax.iter())
            .map(|units| {
                Array2::from_shape_fn((2, units.len()), |(r, j)| {
                    base + 0.1 * (r + step * j) as f64
                })
            })
            .collect()
    };
    let (slopes, betas) = (fill(0.3, 1), fill(0.2, 2));
    let reach = match &region.boxed {
        Some(b) => Reach::Box(&b.half),
        None => Reach::Ball(region.eps),
    };
    let centre = dense.layers[0].w.dot(&region.centre);
    let lines: Vec<Lines> = hidden.relax.iter().map(|u| Lines::of(u)).collect();
    let fixed = (&lines[..], &c, &centre, reach);
    let run = |s: &[Array2<f64>], b: &[Array2<f64>]| {
        let mut passes = relaxed::backward(&local, &one_block(fixed, (s, b, splits)));
        passes.pop().expect("one block, one pass")
    };
    let pass = run(&slopes, &betas);
    let mut grads = relaxed::gradients(
        &local,
        &one_block(fixed, (&slopes, &betas, splits)),
        &[&pass],
    );
    let (grads, beta_grads) = grads.pop().expect("one block, one pair");
    let moved = |v: &[Array2<f64>], (k, r, j): (usize, usize, usize), delta: f64| {
        let mut v = v.to_vec();
        v[k][[r, j]] += delta;
        v
    };
    let slopes_read = finite_differences(&grads, |k, r, j, d| {
        run(&moved(&slopes, (k, r, j), d), &betas).bound[r]
    });
    let betas_read = finite_differences(&beta_grads, |k, r, j, d| {
        run(&slopes, &moved(&betas, (k, r, j), d)).bound[r]
    });
    (slopes_read, betas_read)
}

/// The derivative `mu_kj v_kj` (module docs) matches central differences of the bound in
/// every slope the substitution reads, over a ball without splits (no multiplier is read).
#[test]
fn gradients_match_finite_differences_of_the_bound() {
    let x0 = [0.2, -0.4, 0.7];
    let (slopes, betas) = check_gradients(InputSet::Ball { x0: &x0, eps: 0.5 }, &Splits::none());
    assert!(slopes >= 2, "{slopes} slopes read");
    assert_eq!(betas, 0);
}

/// A subdomain fixing one unit of each layer active and one inactive.
fn four_splits() -> Splits {
    Splits::none()
        .with(0, 0, Phase::Active)
        .with(0, 1, Phase::Inactive)
        .with(1, 0, Phase::Inactive)
        .with(1, 1, Phase::Active)
}

/// The split multipliers' derivative `-s v_kj` against finite differences of the bound, over a
/// ball: every split unit of every row has a multiplier that moves the bound.
#[test]
fn beta_gradients_match_finite_differences_of_the_bound() {
    let x0 = [0.2, -0.4, 0.7];
    let (_, betas) = check_gradients(InputSet::Ball { x0: &x0, eps: 0.5 }, &four_splits());
    assert_eq!(betas, 8, "{betas} multipliers read");
}

/// The same over a box (the minimiser a vertex, `x* = x0 - half sign(M_r)`), slopes and
/// multipliers.
#[test]
fn gradients_over_a_box_match_finite_differences_of_the_bound() {
    let (lo, hi) = ([-0.3, -0.9, 0.2], [0.7, 0.1, 1.2]);
    let set = InputSet::Box { lo: &lo, hi: &hi };
    let (slopes, betas) = check_gradients(set, &four_splits());
    assert!(slopes >= 1, "{slopes} slopes read");
    assert_eq!(betas, 8, "{betas} multipliers read");
    let (slopes, _) = check_gradients(set, &Splits::none());
    assert!(slopes >= 2, "{slopes} slopes read");
}

/// The passes of a batch are each block's own: blocks over a ball and a box, with and without
/// splits, and one relaxing only the first hidden layer (rows over the second layer's
/// pre-activations), stacked into one product per layer, give every block's bounds, coefficients
/// and derivatives as its pass alone does, up to the products' order of summation.
#[test]
fn a_batch_of_blocks_passes_as_each_block_alone() {
    let dense = net();
    let local = LocalNet::new(&dense, None, None).unwrap();
    let x0 = [0.2, -0.4, 0.7];
    let (lo, hi) = ([-0.3, -0.9, 0.2], [0.7, 0.1, 1.2]);
    let ball = Region::new(InputSet::Ball { x0: &x0, eps: 0.5 }, 3).unwrap();
    let boxed = Region::new(InputSet::Box { lo: &lo, hi: &hi }, 3).unwrap();
    let (none, four) = (Splits::none(), four_splits());
    let cases = [
        (&ball, &none),
        (&boxed, &four),
        (&ball, &four),
        (&boxed, &none),
    ];
    let hidden: Vec<_> = (cases.iter())
        .map(|(r, s)| match local.hidden_over(r, &[], s, None) {
            Ok(h) => h,
            Err(_) => panic!("the subdomain is feasible at this point"),
        })
        .collect();
    let lines: Vec<Vec<Lines>> = (hidden.iter())
        .map(|h| h.relax.iter().map(|u| Lines::of(u)).collect())
        .collect();
    let c_out = ndarray::array![[1.0, -1.0, 0.0], [0.0, 1.0, -1.0], [0.5, 0.0, -2.0]];
    let c_mid = ndarray::array![[1.0, 0.0, -1.0, 0.5]];
    let centres: Vec<Array1<f64>> = (cases.iter())
        .map(|(r, _)| dense.layers[0].w.dot(&r.centre))
        .collect();
    let at = |rows: usize, units: usize, base: f64| {
        Array2::from_shape_fn((rows, units), |(r, j)| {
            (base + 0.13 * (r + 2 * j) as f64) % 1.0
        })
    };
    let points: Vec<Multipliers> = (lines.iter().enumerate())
        .map(|(i, l)| {
            let depth = if i == 3 { 1 } else { l.len() };
            let rows = if i == 3 { 1 } else { 3 };
            let units = |k: usize| hidden[i].relax[k].len();
            let s = (0..depth).map(|k| at(rows, units(k), 0.3)).collect();
            let betas = (0..depth).map(|k| at(rows, units(k), 0.7)).collect();
            Multipliers { slopes: s, betas }
        })
        .collect();
    let blocks: Vec<Block> = (0..cases.len())
        .map(|i| {
            let reach = match &cases[i].0.boxed {
                Some(b) => Reach::Box(&b.half),
                None => Reach::Ball(cases[i].0.eps),
            };
            let depth = points[i].slopes.len();
            Block {
                lines: &lines[i][..depth],
                c: if depth == 1 { &c_mid } else { &c_out },
                centre: &centres[i],
                reach,
                slopes: &points[i].slopes,
                betas: &points[i].betas,
                splits: cases[i].1,
            }
        })
        .collect();
    let together = relaxed::backward(&local, &blocks);
    let refs: Vec<&relaxed::Pass> = together.iter().collect();
    let grads_together = relaxed::gradients(&local, &blocks, &refs);
    let close = |a: &Array2<f64>, b: &Array2<f64>| {
        a.dim() == b.dim()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
    };
    for (i, block) in blocks.iter().enumerate() {
        let alone = relaxed::backward(&local, std::slice::from_ref(block));
        let grads_alone = relaxed::gradients(&local, std::slice::from_ref(block), &[&alone[0]]);
        let (a, t) = (&alone[0], &together[i]);
        assert_eq!(a.bound.len(), t.bound.len());
        for (x, y) in a.bound.iter().zip(&t.bound) {
            assert!(
                (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                "block {i}: {x} vs {y}"
            );
        }
        assert!(close(&a.first, &t.first), "block {i}");
        assert!(
            a.mu.iter().zip(&t.mu).all(|(x, y)| close(x, y)),
            "block {i}"
        );
        let ((g, bg), (tg, tbg)) = (&grads_alone[0], &grads_together[i]);
        assert_eq!((g.len(), bg.len()), (tg.len(), tbg.len()));
        assert!(g.iter().zip(tg).all(|(x, y)| close(x, y)), "block {i}");
        assert!(bg.iter().zip(tbg).all(|(x, y)| close(x, y)), "block {i}");
    }
    // the batch really is one: the blocks' bounds differ from one another
    assert!(together[0].bound[0] != together[1].bound[0]);
}
