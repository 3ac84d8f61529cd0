//! The `local` certificate (beyond the paper; docs/soundness.md "Local bounds"): local lower
//! bounds on the deployed execution's margins over the ball ([`crate::bounds::local`] with the
//! model's [`crate::bounds::local::Deployment`]), certified where every one is above the head's
//! margin and no value the execution forms over the ball can overflow.
//!
//! The local bounds assume every layer's rounding model, which holds only without overflow. Over
//! the ball the deployed inputs of layer `l >= 2` satisfy `0 <= h_hat_{l-1} <= a_{l-1}`
//! componentwise (`a = max(hi, 0)` from the bounds of the layer below, valid by induction), so
//! `||h_hat_{l-1}|| <= ||a_{l-1}||`, and the first layer's inputs have norm at most `||x|| + r`
//! with `r` the l2 radius covering the set ([`crate::bounds::ball::Cover`]; `r = eps` for an l2
//! ball), within `D_0` under flush-to-zero: the model's overflow checks at these radii exclude overflow
//! at every layer.

use super::centre::{Centre, PointResult};
use super::model_bounds::ModelBounds;
use super::modes::Certifier;
use super::modes::{nan_safe_min, verdict_of};
use super::quantities::overflow_free;
use super::refusal::Refusal;
use crate::arith::sound::{add_up, sub_down};

/// What the local-bounds pass measured at a point, for the radius `eps`.
#[derive(Clone, Copy, Debug)]
pub struct LocalMargins<'a> {
    /// The radius (upper bound) they hold for.
    pub eps: f64,
    /// Per class `j`, a lower bound on the deployed margin `m_hat_ij(x')` over the ball, for the
    /// predicted class `i` (`+inf` at `i`).
    pub lower: &'a [f64],
    /// Per hidden layer `l = 1..L-1`, an upper bound on `||a_l||`.
    pub radii: &'a [f64],
}

/// The overflow checks of every layer over the set at the radii the local bounds give (module
/// docs), or the first layer that fails them; `reach` bounds the l2 distance of the set's points
/// from the centre.
pub fn local_overflow(
    fmt: &ModelBounds,
    local: &LocalMargins<'_>,
    (x_norm, reach): (f64, f64),
) -> Result<(), Refusal> {
    for (l, lb) in fmt.layers.iter().enumerate() {
        let (r, d) = match l.checked_sub(1) {
            None => (add_up(x_norm, reach), fmt.d0),
            Some(p) => (local.radii.get(p).copied().unwrap_or(f64::INFINITY), 0.0),
        };
        if !overflow_free(&lb.overflow, r, d) {
            return Err(Refusal::Overflow(l + 1));
        }
    }
    Ok(())
}

/// The local bounds as a source of `best`: lower bounds on the deployed margins over the ball.
pub(super) struct LocalSource<'a> {
    pub(super) lower: &'a [f64],
}

impl Certifier<'_> {
    /// The local bounds at `c` for radius `eps`, when computed there and free of overflow, as a
    /// source of `best`.
    pub(super) fn local_source<'c>(&self, c: &Centre<'c>, eps: f64) -> Option<LocalSource<'c>> {
        let local = c.local.filter(|l| l.eps.to_bits() == eps.to_bits())?;
        local_overflow(self.fmt, &local, (c.x_norm, c.cover.l2_radius(eps))).ok()?;
        Some(LocalSource { lower: local.lower })
    }

    /// The local certificate: for every `j != i`, `lower_j - g > 0`: then at every `x'` of the
    /// ball `m_hat_ij(x') >= lower_j > g`. Refused (`no_local`) where the bounds were not
    /// computed for this `eps`, and where overflow over the ball is not excluded.
    pub(super) fn local(&self, c: &Centre<'_>, i: usize, eps: f64) -> PointResult {
        let Some(local) = c.local.filter(|l| l.eps.to_bits() == eps.to_bits()) else {
            return PointResult::refused(Refusal::NoLocal);
        };
        let fmt = self.fmt;
        if let Err(why) = local_overflow(fmt, &local, (c.x_norm, c.cover.l2_radius(eps))) {
            return PointResult::refused(why);
        }
        let mut slack = f64::INFINITY;
        for j in (0..fmt.classes).filter(|&j| j != i) {
            let lower = local.lower.get(j).copied().unwrap_or(f64::NAN);
            slack = nan_safe_min(slack, sub_down(lower, fmt.head_margin));
        }
        PointResult {
            verdict: verdict_of(slack),
            slack: Some(slack),
            degradation: None,
        }
    }
}
