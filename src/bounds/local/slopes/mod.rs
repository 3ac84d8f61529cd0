//! Optimised lower slopes for the final margins (alpha-CROWN, Xu et al. 2021): every lower line
//! `a z <= max(z, 0)` with `a` in `[0, 1]` is valid, so the slopes of each margin's unstable units
//! may be chosen to maximise that margin's bound. The search runs in plain float64 (projected
//! gradient ascent with Adam) on the real network's relaxation; only its result, slopes in
//! `[0, 1]`, enters the rigorous substitution ([`super::backward::lower_bounds`]), so the search's
//! own rounding cannot make a bound unsound (docs/soundness.md "Local bounds", L5).
//!
//! For fixed slopes and a fixed sign pattern the bound is
//! `B = cst + Lambda_1 (W_1 x0 + b_1) - eps ||W_1^T Lambda_1^T||`, a minimum over the ball of a
//! linear function of `x`; its derivative in the slope `a_kj` of hidden unit `j` of layer `k` is
//! `mu_kj v_kj`, where `mu_k` is the row's coefficient over `h_k` and `v_k` the value of `z_k`
//! in the relaxed network (lines in place of ReLUs) at the minimiser
//! `x* = x0 - eps W_1^T Lambda_1^T / ||W_1^T Lambda_1^T||`: one forward pass per step.
//!
//! In a subdomain of branch and bound, the split constraints' multipliers `beta >= 0`
//! (beta-CROWN, Wang et al. 2021) are searched with the slopes: the row's coefficient on a split
//! unit's pre-activation moves by `-s beta` (`s = 1` active, `-1` inactive), so the bound's
//! derivative in `beta_kj` is `-s v_kj`. Only the multipliers found enter the rigorous
//! substitution, which checks their sign ([`super::backward`]).

use std::cmp::Ordering;

use ndarray::{Array1, Array2, ArrayView1, Axis};

use super::local_net::LocalNet;
use super::relax::UnitRelaxation;
use super::rows::rows_times;
use super::split::{Phase, Splits};
pub use multipliers::Multipliers;
pub use stored::StoredMultipliers;
pub use unit_slopes::UnitSlopes;

/// Adam's step size on the slopes.
const STEP: f64 = 0.1;
/// Adam's decay rates of the first and second moments.
const DECAY: (f64, f64) = (0.9, 0.999);

/// The set the search's plain bound is a minimum over: the l2 ball of radius `eps` around the
/// centre, or the box of half-widths `half` around it (minimum `- sum_i |M_ri| half_i`, at
/// the vertex `x* = x0 - half sign(M_r)`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Reach<'a> {
    /// A ball's radius.
    Ball(f64),
    /// A box's half-widths.
    Box(&'a Array1<f64>),
}

/// The relaxed network's state for a block of margin rows at given slopes.
struct Pass {
    /// Per row, the (float64, unrounded) bound.
    bound: Vec<f64>,
    /// Per hidden layer, the rows' coefficients over its outputs `h_k` (`mu_k`).
    mu: Vec<Array2<f64>>,
    /// The rows' coefficients over the first layer's pre-activations.
    first: Array2<f64>,
    /// Per row, `||W_1^T Lambda_1^T||` (a ball).
    norm: Vec<f64>,
    /// Per row, the minimiser's offset from the centre, `-half sign(Lambda_1 W_1)` (a box).
    offset: Option<Array2<f64>>,
}

/// Per hidden layer, slopes (and multipliers of `splits`) for every row of `c` (rows x units; only entries of unstable units
/// where the row's coefficient is nonnegative are read), found by up to `iterations` steps of
/// projected gradient ascent from CROWN's adaptive slopes: the best slopes seen per row. `relax`
/// are the hidden layers' relaxations, `x0` the centre, `eps` the radius; `start` the rows' sound
/// CROWN bounds and `target` the value they must exceed; `from`, where its shapes match, the
/// point the search starts from instead of CROWN's slopes and zero multipliers (its values are
/// projected onto `[0, 1]` and `[0, inf)`). The search stops early once every row
/// is predicted above the target, and gives up (`None`) once a row's progress, extrapolated
/// generously, cannot reach it (never for an infinite target: then it takes every step); the prediction of a sound bound is the search's own bound less
/// its excess over the sound one at CROWN's slopes (the deployment's rounding).
pub(super) fn search(
    net: &LocalNet,
    relax: &[Vec<UnitRelaxation>],
    (c, x0, eps): (&Array2<f64>, ArrayView1<f64>, Reach<'_>),
    (start, target): (&[f64], f64),
    (iterations, splits): (usize, &Splits),
    from: Option<&Multipliers>,
) -> Option<Multipliers> {
    let rows = c.nrows();
    if start.iter().any(|s| !s.is_finite()) {
        return None;
    }
    let mut slopes: Vec<Array2<f64>> = relax
        .iter()
        .map(|units| {
            let lower: Array1<f64> = units.iter().map(crown_slope).collect();
            let mut a = Array2::zeros((rows, units.len()));
            a.rows_mut().into_iter().for_each(|mut r| r.assign(&lower));
            a
        })
        .collect();
    let mut betas: Vec<Array2<f64>> = slopes.iter().map(|a| Array2::zeros(a.dim())).collect();
    if let Some(w) = from {
        let same = |a: &[Array2<f64>], b: &[Array2<f64>]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.dim() == y.dim())
        };
        if same(&w.slopes, &slopes) && same(&w.betas, &betas) {
            slopes = (w.slopes.iter())
                .map(|a| a.mapv(|v| v.clamp(0.0, 1.0)))
                .collect();
            betas = (w.betas.iter()).map(|a| a.mapv(|v| v.max(0.0))).collect();
        }
    }
    let mut beta_moments: Vec<(Array2<f64>, Array2<f64>)> = (betas.iter())
        .map(|a| (Array2::zeros(a.dim()), Array2::zeros(a.dim())))
        .collect();
    let mut best = Multipliers {
        slopes: slopes.clone(),
        betas: betas.clone(),
    };
    let mut best_bound = vec![f64::NEG_INFINITY; rows];
    let mut excess = vec![0.0; rows];
    let mut moments: Vec<(Array2<f64>, Array2<f64>)> = slopes
        .iter()
        .map(|a| (Array2::zeros(a.dim()), Array2::zeros(a.dim())))
        .collect();
    let centre = net.layers[0].w.dot(&x0);
    for step in 1..=iterations {
        let pass = backward(net, relax, c, (&slopes, &betas, splits), &centre, eps);
        for r in 0..rows {
            if step == 1 {
                excess[r] = excess_over_sound(pass.bound[r], start[r]);
            }
            if pass.bound[r].partial_cmp(&best_bound[r]) != Some(Ordering::Greater) {
                continue;
            }
            best_bound[r] = pass.bound[r];
            for (b, a) in best.slopes.iter_mut().zip(&slopes) {
                b.row_mut(r).assign(&a.row(r));
            }
            for (b, a) in best.betas.iter_mut().zip(&betas) {
                b.row_mut(r).assign(&a.row(r));
            }
        }
        let predicted: Vec<f64> = (best_bound.iter().zip(&excess))
            .map(|(b, e)| predicted_sound(*b, *e))
            .collect();
        if (predicted.iter().zip(&excess)).all(|(p, e)| safely_above(*p, *e, target)) {
            break;
        }
        let hopeless = (predicted.iter().zip(start))
            .any(|(p, s)| cannot_reach((*p, *s), target, (step, iterations)));
        if step >= 5 && hopeless && target.is_finite() {
            return None;
        }
        if step == iterations {
            break;
        }
        let (grads, beta_grads) = gradients(net, relax, &pass, (&slopes, splits), &centre, eps);
        for ((a, g), (m, v)) in slopes.iter_mut().zip(&grads).zip(&mut moments) {
            adam_ascent(a, g, (m, v), step, 1.0);
        }
        if !splits.is_empty() {
            for ((b, g), (m, v)) in betas.iter_mut().zip(&beta_grads).zip(&mut beta_moments) {
                adam_ascent(b, g, (m, v), step, f64::INFINITY);
            }
        }
    }
    Some(best)
}

/// The search's excess over the sound bound at CROWN's slopes: its own bound there (float64,
/// unrounded, without the deployment's rounding) less the sound one, at least 0. Later bounds of
/// the search less this excess predict the sound bound their slopes give ([`predicted_sound`]).
fn excess_over_sound(own: f64, sound: f64) -> f64 {
    (own - sound).max(0.0)
}

/// The predicted sound bound of the search's bound `own` with excess `excess`: `own - excess`.
/// A prediction only: the sound bound is computed afterwards by the rigorous substitution.
fn predicted_sound(own: f64, excess: f64) -> f64 {
    own - excess
}

/// Whether a row predicted at `p` is safely above `target`: by a tenth of its excess, the room
/// left for the prediction's error (the search stops when every row is).
fn safely_above(p: f64, excess: f64, target: f64) -> bool {
    p > target + 0.1 * excess
}

/// Whether a row predicted at `p` after `step` of `iterations` steps, from its sound start `s`,
/// cannot reach `target` even if it kept improving at twice its average rate so far:
/// `p + max(p - s, 0) 2 (iterations - step) / step < target` (a NaN counts as not reaching). A
/// choice of where to spend time only: giving up keeps CROWN's sound bound.
fn cannot_reach((p, s): (f64, f64), target: f64, (step, iterations): (usize, usize)) -> bool {
    let reach = 2.0 * (iterations - step) as f64 / step as f64;
    let reached = p + (p - s).max(0.0) * reach;
    matches!(reached.partial_cmp(&target), None | Some(Ordering::Less))
}

/// CROWN's adaptive lower slope of a unit (the one the plain substitution uses).
fn crown_slope(unit: &UnitRelaxation) -> f64 {
    match *unit {
        UnitRelaxation::Unstable { lower, .. } => lower,
        _ => 0.0,
    }
}

/// One Adam step of ascent on `a` along `g`, projected onto `[0, top]`.
fn adam_ascent(
    a: &mut Array2<f64>,
    g: &Array2<f64>,
    (m, v): (&mut Array2<f64>, &mut Array2<f64>),
    step: usize,
    top: f64,
) {
    let (b1, b2) = DECAY;
    let c1 = 1.0 - b1.powi(step as i32);
    let c2 = 1.0 - b2.powi(step as i32);
    ndarray::Zip::from(a)
        .and(g)
        .and(m)
        .and(v)
        .for_each(|a, &g, m, v| {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            let update = STEP * (*m / c1) / ((*v / c2).sqrt() + 1e-12);
            *a = (*a + update).clamp(0.0, top);
        });
}

/// The sign `s` of a split: the constraint is `s z >= 0`.
fn split_sign(phase: Phase) -> f64 {
    match phase {
        Phase::Active => 1.0,
        Phase::Inactive => -1.0,
    }
}

/// The backward substitution at the given slopes and multipliers, in plain float64.
fn backward(
    net: &LocalNet,
    relax: &[Vec<UnitRelaxation>],
    c: &Array2<f64>,
    (slopes, betas, splits): (&[Array2<f64>], &[Array2<f64>], &Splits),
    centre: &Array1<f64>,
    eps: Reach<'_>,
) -> Pass {
    // the rows are over the output of layer `top`, the layer above the last relaxed one
    let top = relax.len();
    let mut lam = c.clone();
    let mut cst = Array1::<f64>::zeros(c.nrows());
    let mut mu = vec![Array2::zeros((0, 0)); top];
    for l in (1..=top).rev() {
        let layer = &net.layers[l];
        cst += &lam.dot(&layer.b);
        let m = rows_times(&lam, layer.w.view());
        let mut next = m.clone();
        for ((r, j), v) in next.indexed_iter_mut() {
            *v = match relax[l - 1][j] {
                UnitRelaxation::Inactive => 0.0,
                UnitRelaxation::Active => *v,
                UnitRelaxation::Unstable { .. } if *v >= 0.0 => slopes[l - 1][[r, j]] * *v,
                UnitRelaxation::Unstable { slope, offset, .. } => {
                    cst[r] += *v * offset;
                    slope * *v
                }
            };
        }
        for &(_, j, phase) in splits.iter().filter(|(h, _, _)| *h == l - 1) {
            let s = split_sign(phase);
            for r in 0..next.nrows() {
                next[[r, j]] -= s * betas[l - 1][[r, j]];
            }
        }
        mu[l - 1] = m;
        lam = next;
    }
    let first = &net.layers[0];
    cst += &lam.dot(&(centre + &first.b));
    let (norm, offset, bound) = match eps {
        Reach::Ball(eps) => {
            let quad = (rows_times(&lam, net.input_gram.view()) * &lam).sum_axis(Axis(1));
            let norm: Vec<f64> = quad.iter().map(|q| q.max(0.0).sqrt()).collect();
            let bound = (cst.iter().zip(&norm)).map(|(c, n)| c - eps * n).collect();
            (norm, None, bound)
        }
        Reach::Box(half) => {
            let mut m = rows_times(&lam, first.w.view());
            let mut spread = vec![0.0; m.nrows()];
            for (mut row, s) in m.rows_mut().into_iter().zip(&mut spread) {
                row.zip_mut_with(half, |v, &r| {
                    *s += v.abs() * r;
                    *v = -v.signum() * r;
                });
            }
            let bound = (cst.iter().zip(&spread)).map(|(c, s)| c - s).collect();
            (Vec::new(), Some(m), bound)
        }
    };
    Pass {
        bound,
        mu,
        first: lam,
        norm,
        offset,
    }
}

/// The bound's derivative in every slope (zero where the slope is not read), `mu_kj v_kj`, and
/// in every split's multiplier, `-s v_kj`, with `v` the relaxed network's pre-activations at
/// each row's minimiser (module docs).
fn gradients(
    net: &LocalNet,
    relax: &[Vec<UnitRelaxation>],
    pass: &Pass,
    (slopes, splits): (&[Array2<f64>], &Splits),
    centre: &Array1<f64>,
    eps: Reach<'_>,
) -> (Vec<Array2<f64>>, Vec<Array2<f64>>) {
    // v_1 = W_1 x* + b_1: for a ball, W_1 x0 + b_1 - eps G Lambda_1^T / ||W_1^T Lambda_1^T||;
    // for a box, W_1 x0 + b_1 + W_1 (x* - x0)
    let mut v = match (eps, &pass.offset) {
        (Reach::Box(_), Some(offset)) => rows_times(offset, net.layers[0].w_t.view()),
        (Reach::Ball(eps), _) => {
            let mut v = rows_times(&pass.first, net.input_gram.view());
            for (mut row, &n) in v.rows_mut().into_iter().zip(&pass.norm) {
                let scale = if n > 0.0 { -eps / n } else { 0.0 };
                row.mapv_inplace(|g| g * scale);
            }
            v
        }
        (Reach::Box(_), None) => Array2::zeros(pass.first.dim()),
    };
    for mut row in v.rows_mut() {
        row += centre;
        row += &net.layers[0].b;
    }
    let mut grads = Vec::with_capacity(relax.len());
    let mut beta_grads = Vec::with_capacity(relax.len());
    for (k, units) in relax.iter().enumerate() {
        let mut beta_grad = Array2::zeros(pass.mu[k].dim());
        for &(_, j, phase) in splits.iter().filter(|(h, _, _)| *h == k) {
            for r in 0..beta_grad.nrows() {
                beta_grad[[r, j]] = -split_sign(phase) * v[[r, j]];
            }
        }
        beta_grads.push(beta_grad);
        let mu = &pass.mu[k];
        let mut grad = Array2::zeros(mu.dim());
        let mut h = Array2::zeros(mu.dim());
        for ((r, j), g) in grad.indexed_iter_mut() {
            let (m, z) = (mu[[r, j]], v[[r, j]]);
            h[[r, j]] = match units[j] {
                UnitRelaxation::Inactive => 0.0,
                UnitRelaxation::Active => z,
                UnitRelaxation::Unstable { .. } if m >= 0.0 => {
                    *g = m * z;
                    slopes[k][[r, j]] * z
                }
                UnitRelaxation::Unstable { slope, offset, .. } => slope * z + offset,
            };
        }
        grads.push(grad);
        let next = &net.layers[k + 1];
        v = rows_times(&h, next.w_t.view()) + &next.b;
    }
    (grads, beta_grads)
}

mod multipliers;
mod stored;
#[cfg(test)]
mod tests;
mod unit_slopes;
