//! What a certificate knows at one point: its centre ([`Centre`], with the float64 reference's
//! measurements, [`HiCentre`]) and what it concluded ([`PointResult`], [`Decided`]).

use crate::bounds::ball::Cover;

use super::model_bounds::Verdict;
use super::refusal::Refusal;

/// What the float64 reference execution measured at a centre.
#[derive(Clone, Copy, Debug)]
pub struct HiCentre<'a> {
    /// Float64 logits `y_hi(x)`.
    pub logits: &'a [f64],
    /// Upper bound on `||z_hat_{L-1}(x) - z_hi_{L-1}(x)||_2` (deployment vs float64 penultimate).
    pub gap: f64,
    /// Upper bounds on `||z_hi_l(x)||_2` for the hidden layers `l = 1..L-1`.
    pub norms: &'a [f64],
    /// Per layer `l = 1..L`, an upper bound on `|| |W_l| |c_{l-1}| ||_2` with `c_0 = x` and
    /// `c_l = z_hi_l(x)` (NaN for an affine step; [`crate::bounds::certify::componentwise`]).
    pub abs_norms: &'a [f64],
    /// Upper bounds on `|W_L| |c_{L-1}|`, one per class.
    pub abs_last: &'a [f64],
}

/// Everything measured at one test point.
#[derive(Clone, Copy, Debug)]
pub struct Centre<'a> {
    /// Deployed logits `y_hat(x)` (exact format values).
    pub logits: &'a [f64],
    /// Upper bound on `||x||_2`.
    pub x_norm: f64,
    /// Float64 reference measurements (pre-deployment modes).
    pub hi: Option<HiCentre<'a>>,
    /// Where the forward passes skipped the reference, `best`'s verdict as they decided it.
    pub decided: Option<Decided>,
    /// Local bounds on the deployed margins over the ball, where they were computed.
    pub local: Option<super::local_certificate::LocalMargins<'a>>,
    /// The l2 ball around the point that covers the set of a radius (the l2 ball itself, or the
    /// one around an l_inf ball): the Lipschitz certificates check it.
    pub cover: Cover,
}

/// `best`'s verdict at a point, decided at radius `eps` without the float64 reference
/// (`Certifier::best_without_reference`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decided {
    /// The radius (upper bound) it was decided at.
    pub eps: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// Outcome of one mode at one point, with the statistics the report needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PointResult {
    /// Certified, or why not.
    pub verdict: Verdict,
    /// `min_j (c_j - L_{ij} eps - b_j)` (rounded down) when the bounds could be computed.
    pub slack: Option<f64>,
    /// `sum_j (m_hat_{ij}(x) - c_j + b_j)`: the floating-point degradation summed over the
    /// competing classes (0 for `real`), and `sum_j L_{ij} eps` — for the conservatism ratio.
    pub degradation: Option<(f64, f64)>,
}

impl PointResult {
    pub(super) fn refused(r: Refusal) -> Self {
        PointResult {
            verdict: Err(r),
            slack: None,
            degradation: None,
        }
    }
}
