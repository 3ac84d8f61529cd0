//! Exact-rational pins of the per-point bounds of every sound mode.
//!
//! `tests/bounds/bounds_exact.rs` pins the model-level constants and the `standard`/`real` slack. This
//! file pins what the pre-deployment modes add per point — `hybrid`, `measured`,
//! `float64-centre` and `best` (with its componentwise sources, src/bounds/certify/componentwise.rs) —
//! and `standard` again on real points: at several points of three small networks (2-3 layers;
//! one with a Softmax head, whose logit margin `g` is recomputed from its closed form), in
//! float32 and float16, with and without flush-to-zero, the test runs its own executions (the
//! deployed one: float32 products and sums, bias last, one rounding to the storage format; the
//! float64 reference: native `f64`, bias last), derives from them the inputs the production code
//! measures at a point (`||x||`, `||z_hi_l||`, the penultimate gap, `|| |W_l| |c_{l-1}| ||` and
//! `|W_L| |c_{L-1}|`, each an `f64` upper bound of the exact value), and recomputes in rug
//! `Rational`s, from docs/soundness.md ("Pre-deployment modes", "Componentwise bounds") and the
//! paper, without calling lipfp's bound functions: the deterministic radii and deviations, the
//! float64 deviation profile `D^hi_l(x, 0)` with float64 constants, the measured radii
//! `r^meas_l(x, e) = ||z_hi_l|| + prefix_l e + D^hi_l`, the deviation recursion driven by them,
//! the componentwise chain, every centre bound `c_j` and ball bound `b_j`, their max/min per
//! competing class, and `min_j (c_j - L_ij eps - b_j - g)`. Overflow refusals (deployment or
//! reference) are decided exactly and must match lipfp's reason and layer.
//!
//! **Tolerance.** lipfp's slack (`PointResult::slack`, through `Certifier::certify`) must be
//! at most the exact slack's lower enclosure (safe side), and at most
//! `2^-40 * scale + 2^-1060` below its upper enclosure, `scale` being the largest magnitude of
//! the terms the slack is a difference of (`|y_i| + |y_j|`, the centre bound, `L_ij eps`, the
//! ball bound, `g`). Only directed rounding explains a gap: every step is one `f64` operation
//! rounded to nearest and moved one ulp outwards (at most `2^-51` relative to a term of at most
//! `scale`), the deepest composition here has fewer than 100 such steps, and `2^-40` allows
//! 2048. The format constants lipfp computes at 128 bits add less. The absolute part covers the
//! float64 `a_mul = 2^-1075` terms. Verdicts must agree wherever the exact slack is farther
//! than that tolerance from 0, and lipfp's own verdict must be `slack > 0`.
//!
//! The pieces `best` composes are also pinned one by one on lipfp's own inputs
//! (`componentwise::chain`, `componentwise::pair_error`, `AbsWeights::measure` over a block of
//! several rows, the float64 profile, `rel_w`, the head margin) with `tests/bounds/bounds_exact.rs`'s
//! tolerance for upper bounds (`got >= exact`, `got <= exact (1 + 1e-12) + 2^-1060`); a norm of
//! `AbsWeights` products may exceed its exact value by `2^-520` more, the `2^-1074` it adds per
//! product for products below the normal range, whose squares underflow in `l2_norm_up`.
//!
//! `PointResult` reports neither the predicted nor the competing class: both enter through the
//! slack, which is pinned against the exact minimum over the competing classes `j` of the class
//! `i` the test's own argmax (the first maximum, lipfp's rule) picks from the deployed logits.
//!
//! Not covered here: affine steps (their `(e, f)` recursion is not recomputed exactly anywhere;
//! `tests/oracles/affine_steps.rs` checks executions against it in exact rationals; in `best` a step
//! takes the fallback path that `Cw::Unbounded` pins for a dense layer), declared accumulation
//! formats, casts and runtimes beyond IEEE (the model-level constants of those are pinned in
//! `tests/bounds/bounds_exact.rs` and `src/bounds/certify/tensor_core.rs`; the per-point composition does not
//! depend on them), and `best` without the reference (`tests/bounds/lazy_reference.rs`).

use crate::common::exact_bounds::*;
use crate::common::exact_points::*;
use lipfp::arith::format::Format;
use lipfp::bounds::certify::componentwise::{self, AbsWeights};
use lipfp::bounds::certify::{Mode, PointResult, Refusal};
use lipfp::onnx::model::DenseNet;
use ndarray::Array2;
use rug::Rational;

// ---------------------------------------------------------------------------------------------
// The exact per-point certificate
// ---------------------------------------------------------------------------------------------

/// How the componentwise sources of `best` enter the exact reference.
#[derive(Clone, Copy, PartialEq)]
enum Cw {
    /// As measured.
    On,
    /// Left out (to show that they decide some points).
    Off,
    /// Layer `l`'s product is unbounded (lipfp is given `inf` or NaN there): the paper's term
    /// `kappa_l ||c_{l-1}||` takes its place.
    Unbounded(usize),
}

/// One certificate recomputed exactly.
struct Exact {
    /// `min_j (c_j - L_ij eps - b_j - g)`.
    slack: Iv,
    /// The largest magnitude of the terms of any `j`.
    scale: Rational,
    /// `sum_j (m_hat_ij - c_j + b_j)` and `sum_j L_ij eps`.
    degradation: Iv,
    leps: Iv,
}

/// `E = alpha^{ij} D + beta^{ij}(r)` (Lemma "Final-layer pairwise deviation").
fn pair_err(p: &PairRef, d: &Iv, r: &Iv) -> Iv {
    p.alpha.mul(d).add(&p.kappa_abs.mul(r)).add(&p.beta_const)
}

/// `||W_{L,i} - W_{L,j}||`.
fn diff_norm(net: &DenseNet, i: usize, j: usize) -> Iv {
    let w = &net.layers[net.layers.len() - 1].w;
    let (wi, wj) = (w.row(i), w.row(j));
    let d = wi.iter().zip(wj.iter()).map(|(&a, &b)| q(a) - q(b));
    Iv::exact(sum_sq_q(d)).sqrt()
}

/// The componentwise chain over the ball of radius `eps` (docs/soundness.md "Componentwise
/// bounds"): `D_l = alpha_l D_{l-1} + rel_w u_l + kappa_l (prefix_{l-1} eps + D^hi_{l-1}) +
/// beta_l`, and `rho = D_{L-1} + prefix_{L-1} eps + D^hi_{L-1}`; `abs_norms` are the `u_l` given
/// to lipfp, `dh` the float64 profile.
fn cw_chain(c: &PCase, p: &Point, abs_norms: &[f64], dh: &[Iv], eps: f64, cw: Cw) -> (Iv, Iv) {
    let (nr, depth) = (&c.nr, c.nr.layers.len());
    let mut d = nr.d0.clone();
    for (l, lb) in nr.layers[..depth - 1].iter().enumerate() {
        let norm_c = if l == 0 { p.x_norm } else { p.hi_norms[l - 1] };
        let spread = nr.lip_prefix[l].scale(&q(eps)).add(&dh[l]);
        let own = if cw == Cw::Unbounded(l) {
            lb.kappa_abs.scale(&q(norm_c))
        } else {
            Iv::exact(Rational::from(&c.rel_w[l] * &q(abs_norms[l])))
        };
        d = lb
            .alpha
            .mul(&d)
            .add(&own)
            .add(&lb.kappa_abs.mul(&spread))
            .add(&lb.beta_const);
    }
    let rho = d
        .add(&nr.lip_prefix[depth - 1].scale(&q(eps)))
        .add(&dh[depth - 1]);
    (d, rho)
}

/// The componentwise pair error `||w_i - w_j|| d + rel_w (v_i + v_j) + kappa^{ij} rho + beta^{ij}`.
fn cw_pair(c: &PCase, p: &Point, (i, j): (usize, usize), d: &Iv, rho: &Iv) -> Iv {
    let pr = c.nr.pair(i, j);
    let v = q(p.abs_last[i]) + q(p.abs_last[j]);
    let rel_w = &c.rel_w[c.rel_w.len() - 1];
    diff_norm(&c.net, i, j)
        .mul(d)
        .add(&Iv::exact(Rational::from(rel_w * &v)))
        .add(&pr.kappa_abs.mul(rho))
        .add(&pr.beta_const)
}

/// Per competing class `k` (`k = i` unused), a centre lower bound `c_k` or a ball bound `b_k`.
type PerClass = Vec<Iv>;
type Source = Result<PerClass, Refusal>;

/// The exact certificate of `mode` at `p` and radius `eps` (docs/soundness.md "Pre-deployment
/// modes"), or the refusal lipfp must give.
fn exact(c: &PCase, p: &Point, mode: Mode, eps: f64, cw: Cw) -> Result<Exact, Refusal> {
    let (nr, nh) = (&c.nr, &c.nh);
    let (classes, top) = (nr.classes, nr.layers.len() - 1);
    let i = argmax(&p.logits);
    let per = |f: &dyn Fn(usize) -> Iv| -> PerClass {
        (0..classes)
            .map(|j| if j == i { Iv::zero() } else { f(j) })
            .collect()
    };
    let m = |j: usize| Iv::exact(q(p.logits[i]) - q(p.logits[j]));
    let overflow = Refusal::Overflow;
    let std_ctr = nr.chain(&Iv::of(p.x_norm)).map_err(overflow);
    let std_ball = nr.chain(&Iv::exact(q(p.x_norm) + q(eps))).map_err(overflow);
    let (mut centres, mut balls): (Vec<Source>, Vec<Source>) = (Vec::new(), Vec::new());
    if matches!(mode, Mode::Standard | Mode::Best) {
        centres.push(
            std_ctr
                .as_ref()
                .map_err(|e| *e)
                .map(|(rc, dc)| per(&|j| m(j).sub(&pair_err(nr.pair(i, j), &dc[top], &rc[top])))),
        );
    }
    if matches!(mode, Mode::Standard | Mode::Hybrid | Mode::Best) {
        balls.push(
            std_ball
                .as_ref()
                .map_err(|e| *e)
                .map(|(rb, db)| per(&|j| pair_err(nr.pair(i, j), &db[top], &rb[top]))),
        );
    }
    if mode != Mode::Standard {
        // the float64 profile D^hi_l(x, 0): deterministic radii from ||x||, float64 constants
        match nh.chain(&Iv::of(p.x_norm)) {
            Err(l) if mode != Mode::Best => return Err(Refusal::ReferenceOverflow(l)),
            Err(l) => centres.push(Err(Refusal::ReferenceOverflow(l))),
            Ok((rh, dh)) => {
                let d_hybrid = Iv::of(p.gap).add(&dh[top]);
                if matches!(mode, Mode::Hybrid | Mode::Best) {
                    centres.push(std_ctr.as_ref().map_err(|e| *e).map(|(rc, _)| {
                        per(&|j| m(j).sub(&pair_err(nr.pair(i, j), &d_hybrid, &rc[top])))
                    }));
                }
                // r^meas_l(x, e) = ||z_hi_l|| + prefix_l e + D^hi_l, ||z_hi_0|| = ||x||
                let measured = |e: f64| -> Vec<Iv> {
                    (0..=top)
                        .map(|l| {
                            let norm = if l == 0 { p.x_norm } else { p.hi_norms[l - 1] };
                            Iv::of(norm).add(&nr.lip_prefix[l].scale(&q(e))).add(&dh[l])
                        })
                        .collect()
                };
                let (mut ball_ok, mut centre_ok) = (false, false);
                if matches!(mode, Mode::Measured | Mode::Float64Centre | Mode::Best) {
                    let r = measured(eps);
                    let ball = nr.chain_with_radii(&r).map_err(overflow);
                    ball_ok = ball.is_ok();
                    balls.push(ball.map(|d| per(&|j| pair_err(nr.pair(i, j), &d, &r[top]))));
                }
                if matches!(mode, Mode::Measured | Mode::Best) {
                    let r = measured(0.0);
                    let centre = nr.chain_with_radii(&r).map_err(overflow);
                    centre_ok = centre.is_ok();
                    centres.push(
                        centre.map(|_| {
                            per(&|j| m(j).sub(&pair_err(nr.pair(i, j), &d_hybrid, &r[top])))
                        }),
                    );
                }
                if matches!(mode, Mode::Float64Centre | Mode::Best) {
                    // m_hi(x) - E^hi_ctr with the float64 pair constants and profile
                    let mhi = |j: usize| Iv::exact(q(p.hi_logits[i]) - q(p.hi_logits[j]));
                    centres.push(Ok(per(&|j| {
                        mhi(j).sub(&pair_err(nh.pair(i, j), &dh[top], &rh[top]))
                    })));
                }
                if mode == Mode::Best && cw != Cw::Off {
                    if ball_ok {
                        let (d, rho) = cw_chain(c, p, &p.abs_norms, &dh, eps, cw);
                        balls.push(Ok(per(&|j| cw_pair(c, p, (i, j), &d, &rho))));
                    }
                    if centre_ok {
                        let d = Iv::of(p.gap).add(&dh[top]);
                        let gap = Iv::of(p.gap);
                        centres.push(Ok(per(&|j| m(j).sub(&cw_pair(c, p, (i, j), &d, &gap)))));
                    }
                }
            }
        }
    }
    let first_err = |v: &[Source]| v.iter().find_map(|s| s.as_ref().err().copied());
    let ok = |v: &[Source]| -> Vec<PerClass> { v.iter().filter_map(|s| s.clone().ok()).collect() };
    let (ok_c, ok_b) = (ok(&centres), ok(&balls));
    if ok_b.is_empty() {
        return Err(first_err(&balls).unwrap_or(Refusal::Model));
    }
    if ok_c.is_empty() {
        return Err(first_err(&centres).unwrap_or(Refusal::Model));
    }
    let mut out: Option<Exact> = None;
    for j in (0..classes).filter(|&j| j != i) {
        let lower = ok_c.iter().map(|s| s[j].clone()).reduce(|a, b| a.max(&b));
        let ball = ok_b.iter().map(|s| s[j].clone()).reduce(|a, b| a.min(&b));
        let (lower, ball) = (lower.unwrap(), ball.unwrap());
        let leps = nr.pair(i, j).lip.scale(&q(eps));
        let s = lower.sub(&leps).sub(&ball).sub(&c.g);
        let scale = [
            q(p.logits[i]).abs() + q(p.logits[j]).abs(),
            lower.lo.clone().abs().max(lower.hi.clone().abs()),
            leps.hi.clone(),
            ball.hi.clone(),
            c.g.hi.clone(),
        ]
        .into_iter()
        .fold(Rational::new(), Rational::max);
        let deg = m(j).sub(&lower).add(&ball);
        out = Some(match out {
            None => Exact {
                slack: s,
                scale,
                degradation: deg,
                leps,
            },
            Some(a) => Exact {
                slack: a.slack.min(&s),
                scale: a.scale.max(scale),
                degradation: a.degradation.add(&deg),
                leps: a.leps.add(&leps),
            },
        });
    }
    Ok(out.unwrap())
}

/// The tolerance of the file's doc comment.
fn tol(scale: &Rational) -> Rational {
    Rational::from(scale * &pow2(-40)) + pow2(-1060)
}

/// lipfp's result against the exact one: the same refusal, or a slack on the safe side within
/// the tolerance, the verdict `slack > 0` and agreeing with the exact sign beyond the tolerance,
/// and the reported degradation and `sum L eps`.
#[track_caller]
fn compare(what: &str, got: &PointResult, ex: &Result<Exact, Refusal>, classes: usize) {
    let ex = match ex {
        Err(r) => {
            assert_eq!(got.verdict, Err(*r), "{what}");
            assert_eq!(got.slack, None, "{what}");
            return;
        }
        Ok(e) => e,
    };
    let slack = got
        .slack
        .unwrap_or_else(|| panic!("{what}: refused {:?}", got.verdict));
    assert!(!slack.is_nan(), "{what}: NaN slack");
    let g = q(slack);
    assert!(
        g <= ex.slack.lo,
        "{what}: lipfp slack {slack:e} above the exact {:e} (unsafe)",
        ex.slack.lo.to_f64()
    );
    let gap = Rational::from(&ex.slack.hi - &g);
    assert!(
        gap <= tol(&ex.scale),
        "{what}: lipfp slack {slack:e} not tight: exact {:e}, gap {:e}, scale {:e}",
        ex.slack.hi.to_f64(),
        gap.to_f64(),
        ex.scale.to_f64()
    );
    assert_eq!(got.verdict.is_ok(), slack > 0.0, "{what}");
    let t = tol(&ex.scale);
    if ex.slack.lo > t {
        assert_eq!(got.verdict, Ok(()), "{what}");
    }
    if Rational::from(-&ex.slack.hi) > t {
        assert_eq!(got.verdict, Err(Refusal::Margin), "{what}");
    }
    // the statistics are plain f64 sums: within the tolerance per class
    let (deg, leps) = got.degradation.unwrap();
    let close = |a: f64, b: &Iv| (q(a) - &b.hi).abs() <= t.clone() * int(2 * classes as u64);
    assert!(close(deg, &ex.degradation), "{what}: degradation {deg:e}");
    assert!(close(leps, &ex.leps), "{what}: sum L eps {leps:e}");
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Radii at a point: fractions of the real-arithmetic boundary `min_j m_ij / L_ij`, and one far
/// past it (overflow over the ball in float16).
fn radii(c: &PCase, p: &Point) -> Vec<f64> {
    let i = argmax(&p.logits);
    let e_real = (0..c.nr.classes)
        .filter(|&j| j != i)
        .map(|j| (p.logits[i] - p.logits[j]) / c.nr.pair(i, j).lip.hi.to_f64())
        .fold(f64::INFINITY, f64::min);
    let mut v: Vec<f64> = [0.0, 0.02, 0.2, 0.5, 0.8, 0.95, 1.05]
        .iter()
        .map(|f| f * e_real)
        .collect();
    v.push(5e3);
    v
}

/// Every case, point and radius of `mode` against the exact certificate; at the first point of
/// each case, also the adjacent `f64` radii around the exact boundary. Returns how many points
/// were certified, refused for the margin, and refused for overflow.
fn pin_mode(mode: Mode) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for c in cases() {
        for (k, p) in points(&c.net).iter().enumerate() {
            let at = |eps: f64| {
                let what = format!("{} point {k} {mode} eps={eps:e}", c.label);
                let ex = exact(&c, p, mode, eps, Cw::On);
                let got = certify(&c, p, mode, eps, &p.abs_norms);
                compare(&what, &got, &ex, c.nr.classes);
                (ex, got)
            };
            for eps in radii(&c, p) {
                match at(eps).1.verdict {
                    Ok(()) => counts.0 += 1,
                    Err(Refusal::Margin) => counts.1 += 1,
                    Err(_) => counts.2 += 1,
                }
            }
            let positive = |eps: f64| exact(&c, p, mode, eps, Cw::On).is_ok_and(|e| e.slack.lo > 0);
            let clearly = |eps: f64| {
                exact(&c, p, mode, eps, Cw::On).is_ok_and(|e| e.slack.lo > tol(&e.scale))
            };
            if k > 0 || !positive(0.0) {
                continue;
            }
            let mut hi = 1e-3;
            while positive(hi) {
                hi *= 2.0;
            }
            let (e_pos, e_neg) = bisect(0.0, hi, |e| !positive(e));
            // at the first radius whose exact slack is not positive lipfp refuses; just inside
            // (beyond the tolerance) it certifies
            let (ex, got) = at(e_neg);
            assert!(
                got.verdict.is_err(),
                "{} {mode}: certified past the boundary",
                c.label
            );
            if let Ok(ex) = ex {
                assert!(ex.slack.lo <= 0);
            }
            let inside = e_pos * (1.0 - 1e-6);
            if clearly(inside) {
                assert_eq!(at(inside).1.verdict, Ok(()), "{} {mode}", c.label);
            }
        }
    }
    assert!(counts.0 > 0 && counts.1 > 0, "{mode}: {counts:?}");
    counts
}

#[test]
fn standard_slack_is_pinned_at_every_point() {
    let (_, _, overflow) = pin_mode(Mode::Standard);
    assert!(overflow > 0, "no overflow refusal exercised");
}

#[test]
fn hybrid_slack_is_pinned_at_every_point() {
    pin_mode(Mode::Hybrid);
}

#[test]
fn measured_slack_is_pinned_at_every_point() {
    pin_mode(Mode::Measured);
}

#[test]
fn float64_centre_slack_is_pinned_at_every_point() {
    pin_mode(Mode::Float64Centre);
}

/// `best`, with every source; and the componentwise sources must decide the slack (beyond the
/// tolerance) at some points of every format, or the pin would not see them.
#[test]
fn best_slack_is_pinned_at_every_point_and_the_componentwise_sources_count() {
    pin_mode(Mode::Best);
    for format in [Format::Float32, Format::Float16] {
        let mut decisive = 0;
        for c in cases().into_iter().filter(|c| c.format == format) {
            for p in &points(&c.net) {
                for eps in radii(&c, p) {
                    let (Ok(on), Ok(off)) = (
                        exact(&c, p, Mode::Best, eps, Cw::On),
                        exact(&c, p, Mode::Best, eps, Cw::Off),
                    ) else {
                        continue;
                    };
                    if on.slack.lo > Rational::from(&off.slack.hi + &tol(&on.scale)) {
                        decisive += 1;
                    }
                }
            }
        }
        assert!(
            decisive > 0,
            "{format}: the componentwise sources never count"
        );
    }
}

/// A layer product lipfp cannot bound (`inf`, or NaN) falls back to the paper's term
/// `kappa_l ||c_{l-1}||` in the componentwise chain (the other layers keep theirs): the slack is
/// pinned against that exact chain, which still beats the measured ball somewhere.
#[test]
fn best_falls_back_to_the_paper_term_where_a_layer_product_is_unbounded() {
    let mut decisive = 0;
    for c in cases() {
        let hidden = c.net.layers.len() - 1;
        for (k, p) in points(&c.net).iter().enumerate() {
            for l in 0..hidden {
                for bad in [f64::INFINITY, f64::NAN] {
                    let mut abs = p.abs_norms.clone();
                    abs[l] = bad;
                    for eps in radii(&c, p) {
                        let what = format!("{} point {k} layer {l}={bad} eps={eps:e}", c.label);
                        let ex = exact(&c, p, Mode::Best, eps, Cw::Unbounded(l));
                        let got = certify(&c, p, Mode::Best, eps, &abs);
                        compare(&what, &got, &ex, c.nr.classes);
                        let off = exact(&c, p, Mode::Best, eps, Cw::Off);
                        if let (Ok(on), Ok(off)) = (ex, off) {
                            if on.slack.lo > Rational::from(&off.slack.hi + &tol(&on.scale)) {
                                decisive += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(decisive > 0, "the fallback chain never decides a slack");
}

/// The production's absolute weights for the case's (IEEE) deployment execution model.
fn abs_weights(c: &PCase) -> AbsWeights {
    AbsWeights::new(&c.net, &c.mb.execution)
}

/// `AbsWeights::measure` over a block of several rows: every `|| |W_l| |c_{l-1}| ||` and every
/// `(|W_L| |c_{L-1}|)_k` of every row is a tight upper bound of the exact value.
#[test]
fn componentwise_products_are_tight_upper_bounds_over_a_block_of_rows() {
    for c in cases() {
        let pts = points(&c.net);
        let depth = c.net.layers.len();
        let block = |rows: Vec<&Vec<f64>>| {
            Array2::from_shape_fn((rows.len(), rows[0].len()), |(r, k)| rows[r][k])
        };
        let input = block(pts.iter().map(|p| &p.x).collect());
        let hidden: Vec<Array2<f64>> = (0..depth - 1)
            .map(|l| block(pts.iter().map(|p| &p.hi_hidden[l]).collect()))
            .collect();
        let got = abs_weights(&c).measure(input.view(), &hidden);
        let classes = c.nr.classes;
        assert_eq!(got.norms.len(), pts.len() * depth, "{}", c.label);
        assert_eq!(got.last.len(), pts.len() * classes, "{}", c.label);
        for (r, p) in pts.iter().enumerate() {
            for (l, layer) in c.net.layers.iter().enumerate() {
                let cin = if l == 0 { &p.x } else { &p.hi_hidden[l - 1] };
                let u = abs_products(&layer.w, cin);
                let norm = Iv::exact(sum_sq_q(u.iter().cloned())).sqrt();
                let w = format!("{} row {r} layer {}", c.label, l + 1);
                // the norm of upper bounds that may carry `2^-1074` per product: their squares
                // underflow and the upward steps leave up to `sqrt(m 2^-1074)` (`2^-520` here)
                let got_norm = got.norms[r * depth + l];
                assert!(
                    q(got_norm) >= norm.hi,
                    "{w}: {got_norm:e} below the exact norm"
                );
                let limit =
                    Rational::from(&norm.hi * &(Rational::from(1) + rel_tol())) + pow2(-520);
                assert!(q(got_norm) <= limit, "{w}: {got_norm:e} not tight");
                if l + 1 == depth {
                    for (k, v) in u.into_iter().enumerate() {
                        let what = format!("{w} (|W||c|)_{k}");
                        check_upper(&what, got.last[r * classes + k], &Iv::exact(v));
                    }
                }
            }
        }
    }
}

/// The pieces `best` composes, each against its exact formula on lipfp's own inputs: the float64
/// profile `D^hi_l(x, 0)`, each layer's `rel_w`, `componentwise::chain`'s `(D_{L-1}, rho)` and
/// `componentwise::pair_error` for every class pair.
#[test]
fn componentwise_chain_and_pair_error_are_tight_upper_bounds() {
    for c in cases() {
        let depth = c.net.layers.len();
        for (l, lb) in c.mb.layers.iter().enumerate() {
            let what = format!("{} rel_w layer {}", c.label, l + 1);
            check_upper(
                &what,
                lb.rounding.unwrap().rel_w,
                &Iv::exact(c.rel_w[l].clone()),
            );
        }
        for (k, p) in points(&c.net).iter().enumerate() {
            let (radii_hi, dhi) = c.hb.deviation_profile(p.x_norm).unwrap();
            let (rh, dh) = c.nh.chain(&Iv::of(p.x_norm)).unwrap();
            for l in 0..depth {
                let w = format!("{} point {k} float64 profile {l}", c.label);
                check_upper(&format!("{w} r"), radii_hi[l], &rh[l]);
                check_upper(&format!("{w} D"), dhi[l], &dh[l]);
            }
            let dhi_iv: Vec<Iv> = dhi.iter().map(|&d| Iv::of(d)).collect();
            let hi = p.hi();
            for eps in radii(&c, p) {
                let w = format!("{} point {k} eps={eps:e}", c.label);
                let (d, rho) = componentwise::chain(&c.mb, p.x_norm, &hi, &dhi, eps);
                let (ed, erho) = cw_chain(&c, p, &p.abs_norms, &dhi_iv, eps, Cw::On);
                check_upper(&format!("{w} chain D"), d, &ed);
                check_upper(&format!("{w} chain rho"), rho, &erho);
                let rel_w = c.mb.layers[depth - 1].rounding.unwrap().rel_w;
                for i in 0..c.nr.classes {
                    for j in (0..c.nr.classes).filter(|&j| j != i) {
                        let got = componentwise::pair_error(
                            c.mb.pair(i, j),
                            rel_w,
                            &p.abs_last,
                            (i, j),
                            d,
                            rho,
                        );
                        let ex = cw_pair(&c, p, (i, j), &Iv::of(d), &Iv::of(rho));
                        check_upper(&format!("{w} pair ({i},{j})"), got, &ex);
                    }
                }
            }
        }
    }
}

/// `ModelBounds::margin_deviation` (the centre bound the conformance tests compare executions
/// with) against the exact centre chain: `E_ctr^{ij}` from `r_0 = ||x||`, or the same refusal.
#[test]
fn margin_deviation_is_the_exact_centre_bound() {
    for c in cases() {
        let top = c.nr.layers.len() - 1;
        for (k, p) in points(&c.net).iter().enumerate() {
            let exact = c.nr.chain(&Iv::of(p.x_norm));
            for i in 0..c.nr.classes {
                for j in (0..c.nr.classes).filter(|&j| j != i) {
                    let got = c.mb.margin_deviation(p.x_norm, i, j);
                    let what = format!("{} point {k} pair ({i},{j})", c.label);
                    match &exact {
                        Ok((r, d)) => {
                            let e = pair_err(c.nr.pair(i, j), &d[top], &r[top]);
                            check_upper(&what, got.expect("no overflow"), &e);
                        }
                        Err(l) => assert_eq!(got, Err(Refusal::Overflow(*l)), "{what}"),
                    }
                }
            }
        }
    }
}

/// The Softmax head's margin against its closed form.
#[test]
fn softmax_head_margin_is_a_tight_upper_bound() {
    for c in cases().into_iter().filter(|c| !c.net.head.is_empty()) {
        check_upper(&format!("{} g", c.label), c.mb.head_margin, &c.g);
    }
}

/// The lazy plan's refutation test (`modes::refuted`: no sound mode can certify the point)
/// against its exact counterpart `min_j (m_hat_ij + E_ij(D, r) - L_ij eps - g) <= 0`, with `D`
/// and `r` from the deterministic chain at `||x||`. On the Softmax-head network each point is
/// tested at the radius where the exact value for a competing class is `-g/2`: there lipfp must
/// refute, and it must not wherever the exact value is positive. Both are tested only where the
/// exact value is farther than the tolerance from 0; the radii are chosen so that `g` decides
/// them (the value with `+g` in place of `-g` would be positive).
#[test]
fn refutation_is_exact_at_the_head_margin() {
    use lipfp::bounds::certify::modes::refuted;
    let (mut refuted_at_g, mut kept) = (0, 0);
    for c in cases().into_iter().filter(|c| !c.net.head.is_empty()) {
        let top = c.nr.layers.len() - 1;
        let half_g = Rational::from(&c.g.lo / 2u32);
        for (k, p) in points(&c.net).iter().enumerate() {
            let i = argmax(&p.logits);
            let (Ok((rc, dc)), Ok(rd)) =
                (c.nr.chain(&Iv::of(p.x_norm)), c.mb.hidden_chain(p.x_norm))
            else {
                continue;
            };
            let (r, d) = rd;
            // m_hat_ij + E_ij per competing class, exact
            let reach = |j: usize| {
                Iv::exact(q(p.logits[i]) - q(p.logits[j])).add(&pair_err(
                    c.nr.pair(i, j),
                    &dc[top],
                    &rc[top],
                ))
            };
            let upper = |eps: f64| {
                let per = (0..c.nr.classes).filter(|&j| j != i).map(|j| {
                    let pr = c.nr.pair(i, j);
                    let v = reach(j).sub(&pr.lip.scale(&q(eps))).sub(&c.g);
                    let scale = reach(j).hi.clone().abs() + Rational::from(&pr.lip.hi * &q(eps));
                    (v, scale + c.g.hi.clone())
                });
                per.fold(None::<(Iv, Rational)>, |acc, (v, s)| match acc {
                    None => Some((v, s)),
                    Some((a, t)) => Some((a.min(&v), t.max(s))),
                })
                .expect("at least two classes")
            };
            for j in (0..c.nr.classes).filter(|&j| j != i) {
                // L_ij eps = m_hat_ij + E_ij - g/2 (exact value -g/2) or - 2g (exact value g)
                for below in [half_g.clone(), Rational::from(&c.g.lo * 2u32)] {
                    let target =
                        Rational::from(&reach(j).lo - &below) / c.nr.pair(i, j).lip.lo.clone();
                    let eps = target.to_f64();
                    if eps.is_nan() || eps <= 0.0 {
                        continue;
                    }
                    let (v, scale) = upper(eps);
                    let got = refuted(&c.mb, &p.logits, i, eps, (d, r));
                    let what = format!("{} point {k} class {i} vs {j}, eps {eps:e}", c.label);
                    if v.lo > tol(&scale) {
                        assert!(!got, "{what}: refuted although the exact bound is positive");
                        kept += 1;
                    } else if v.hi < -tol(&scale) {
                        assert!(
                            got,
                            "{what}: not refuted although the exact bound is negative"
                        );
                        // with +g the value would be positive: g decided this point
                        let flipped = Rational::from(&v.lo + &c.g.lo) + c.g.lo.clone();
                        if flipped > tol(&scale) {
                            refuted_at_g += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("refuted by the head margin: {refuted_at_g}, kept: {kept}");
    assert!(refuted_at_g > 0, "no point was decided by the head margin");
    assert!(kept > 0, "no point kept beside the head margin");
}
