//! The `local` certificate (beyond the paper; docs/soundness.md "Local bounds"): local lower
//! bounds on the real margins over the ball ([`crate::bounds::local`]) minus a bound on the
//! deployed execution's deviation over the ball.
//!
//! Two ball deviations are sound and the smaller is used per class pair: the standard one
//! (deterministic radii from `||x|| + eps`) and a componentwise one driven by the local bounds
//! themselves. Over the ball every real activation satisfies `|h_l(x')| <= a_l` componentwise
//! (`a_l = max(hi_l, 0)`, the local pre-activation upper bounds), so the rounding term of
//! layer `l` is `rel_w || |W_l| |z_hat_{l-1}| || <= rel_w || |W_l| a_{l-1} || + rel_w |||W_l||| D_{l-1}`
//! (the second part is in `alpha_l`), and at the input
//! `|| |W_1| |x'| || <= || |W_1| |x| || + |||W_1||| eps`:
//! `D_l = alpha_l D_{l-1} + rel_w || |W_l| a_{l-1} || + beta_l`, with overflow excluded by the same
//! checks as every chain, at radii `||a_l||` (and `||x|| + eps` at the input).

use super::modes::{nan_safe_min, verdict_of, BallBound};
use super::quantities::overflow_free;
use super::{Centre, Certifier, ModelBounds, PointResult, Refusal};
use crate::arith::sound::{add_up, mul_up, sub_down};

/// What the local-bounds pass measured at a point, for the radius `eps`.
#[derive(Clone, Copy, Debug)]
pub struct LocalMargins<'a> {
    /// The radius (upper bound) they hold for.
    pub eps: f64,
    /// Per class `j`, a lower bound on the real margin `m_ij(x') = z_i(x') - z_j(x')` over the
    /// ball, for the predicted class `i` (`+inf` at `i`).
    pub lower: &'a [f64],
    /// Per hidden layer `l = 1..L-1`, an upper bound on `||a_l||`.
    pub radii: &'a [f64],
    /// Per layer, an upper bound on `|| |W_l| a_{l-1} ||` with `a_0 = |x|` (execution-model weights,
    /// as [`super::componentwise::AbsWeights`] measures them).
    pub abs_norms: &'a [f64],
    /// Upper bounds on `|W_L| a_{L-1}`, one per class.
    pub abs_last: &'a [f64],
}

/// The componentwise ball deviation `D_{L-1}` driven by the local bounds (module docs), or the
/// layer whose overflow it could not exclude.
pub fn local_ball_deviation(
    fmt: &ModelBounds,
    local: &LocalMargins<'_>,
    x_norm: f64,
) -> Result<f64, Refusal> {
    let depth = fmt.layers.len();
    let mut d = fmt.d0;
    for (l, lb) in fmt.layers.iter().enumerate() {
        let r = if l == 0 {
            add_up(x_norm, local.eps)
        } else {
            local.radii.get(l - 1).copied().unwrap_or(f64::INFINITY)
        };
        if !overflow_free(&lb.overflow, r, d) {
            return Err(Refusal::Overflow(l + 1));
        }
        if l + 1 == depth {
            break;
        }
        let (Some(rel_w), Some(&u)) = (lb.rel_w, local.abs_norms.get(l)) else {
            return Err(Refusal::Model);
        };
        let mut own = mul_up(rel_w, u);
        if l == 0 {
            own = add_up(own, mul_up(lb.kappa_abs, local.eps));
        }
        d = add_up(add_up(mul_up(lb.alpha, d), own), lb.beta_const);
    }
    Ok(d)
}

/// The local bounds as a source of `best`: the margin lower bounds over the ball and, where its
/// chain excludes overflow, the componentwise ball deviation they drive.
pub(super) struct LocalSource<'a> {
    pub(super) lower: &'a [f64],
    pub(super) ball: Option<BallBound<'a>>,
}

impl Certifier<'_> {
    /// The local bounds at `c` for radius `eps`, when computed there, as a source of `best`.
    pub(super) fn local_source<'c>(&self, c: &Centre<'c>, eps: f64) -> Option<LocalSource<'c>> {
        let local = c.local.filter(|l| l.eps.to_bits() == eps.to_bits())?;
        let ball = local_ball_deviation(self.fmt, &local, c.x_norm)
            .ok()
            .map(|d| BallBound {
                cw: Some(local.abs_last),
                d,
                r: d,
            });
        Some(LocalSource {
            lower: local.lower,
            ball,
        })
    }

    /// The local certificate: for every `j != i`, `lower_j - b_j - g > 0` with `b_j` the smaller
    /// of the standard and the local ball deviation (module docs): then at every `x'` of the ball
    /// `m_hat_ij(x') >= m_ij(x') - b_j >= lower_j - b_j > g`. Refused (`no_local`) where the
    /// bounds were not computed for this `eps`.
    pub(super) fn local(&self, c: &Centre<'_>, i: usize, eps: f64) -> PointResult {
        let Some(local) = c.local.filter(|l| l.eps.to_bits() == eps.to_bits()) else {
            return PointResult::refused(Refusal::NoLocal);
        };
        let fmt = self.fmt;
        let standard = fmt
            .hidden_chain(add_up(c.x_norm, eps))
            .map(|(r, d)| BallBound { cw: None, d, r });
        let componentwise = local_ball_deviation(fmt, &local, c.x_norm).map(|d| BallBound {
            cw: Some(local.abs_last),
            d,
            r: d,
        });
        let first_refusal = standard.err().or(componentwise.err());
        let balls: Vec<BallBound<'_>> = [standard, componentwise]
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        if balls.is_empty() {
            return PointResult::refused(first_refusal.unwrap_or(Refusal::Model));
        }
        let mut slack = f64::INFINITY;
        for j in (0..fmt.classes).filter(|&j| j != i) {
            let lower = local.lower.get(j).copied().unwrap_or(f64::NAN);
            let ball = balls
                .iter()
                .map(|b| b.error(fmt, i, j))
                .fold(f64::INFINITY, f64::min);
            let s = sub_down(sub_down(lower, ball), fmt.head_margin);
            slack = nan_safe_min(slack, s);
        }
        PointResult {
            verdict: verdict_of(slack),
            slack: Some(slack),
            degradation: None,
        }
    }
}
