//! The deployed execution inside linear bound propagation (docs/soundness.md "Local bounds",
//! L3): each layer of the deployed execution computes `z_hat_l = W_l h_hat_{l-1} + b_l + e_l` with
//! the rounding error bounded componentwise by the execution model,
//! `|e_l| <= rel_w |W_l| |h_hat_{l-1}| + rel_b |b_l| + abs` (`|W_l|` with the tensor cores'
//! alignment weights). The errors `e_l` enter the backward substitution as extra bounded inputs:
//! a row `Lambda` over `z_hat_l` picks up `Lambda e_l >= -|Lambda| eps_l`, so the margin bound is
//! one of the deployed network itself, with no global deviation chain.

use ndarray::{Array1, Array2, ArrayView1};

use super::interval::NonnegSum;
use super::region::Region;
use crate::arith::sound::{add_up, l2_norm_up, mul_up};

/// A layer's componentwise rounding model (f64 upper bounds of the execution model's
/// `LayerError`): `|e_i| <= rel_w (|w_i| . |h|) + rel_b |b_i| + abs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerRounding {
    /// Relative coefficient of `|w_i| . |h|`.
    pub rel_w: f64,
    /// Relative coefficient of `|b_i|`.
    pub rel_b: f64,
    /// Absolute term per output.
    pub abs: f64,
}

/// What the deployed execution adds to the real network: every layer's rounding model with the
/// absolute weights it multiplies, and `D_0`, a bound on `||x_hat - x||` for inputs flushed to
/// zero.
#[derive(Clone, Debug)]
pub struct Deployment {
    /// One per layer: its rounding model and `|W_l|` as the execution model counts it (the
    /// tensor cores' alignment weights for subnormal weights).
    pub layers: Vec<(LayerRounding, Array2<f64>)>,
    /// `D_0`: 0, or `lambda sqrt(n_1)` under flush-to-zero.
    pub d0: f64,
}

/// One layer's rounding model with the absolute weights it multiplies.
pub(super) struct LayerErrorModel {
    rounding: LayerRounding,
    /// `|W_l|` with alignment weights.
    abs_w: Array2<f64>,
    /// `|| |W_{l,k}| ||_2` per row, rounded up.
    row_norms: Vec<f64>,
    /// `|b_l|`.
    abs_b: Array1<f64>,
}

impl LayerErrorModel {
    /// The model of a layer with absolute weights `abs_w` and bias `b`.
    pub(super) fn new(rounding: LayerRounding, abs_w: Array2<f64>, b: &[f64]) -> Self {
        let row_norms = abs_w
            .rows()
            .into_iter()
            .map(|r| l2_norm_up(r.iter().copied()))
            .collect();
        LayerErrorModel {
            rounding,
            abs_w,
            row_norms,
            abs_b: b.iter().map(|v| v.abs()).collect(),
        }
    }

    /// The rounding model's coefficients.
    pub(super) fn rounding(&self) -> LayerRounding {
        self.rounding
    }

    /// The absolute weights the model multiplies (at least `|W_l|`).
    pub(super) fn abs_w(&self) -> &Array2<f64> {
        &self.abs_w
    }

    /// `eps_l` for inputs with `|h_j| <= mag_j` (every entry an upper bound).
    pub(super) fn unit_errors(&self, mag: ArrayView1<f64>) -> Vec<f64> {
        let n = self.abs_w.ncols();
        let sums = self.abs_w.dot(&mag);
        let sum_n = NonnegSum::new(n);
        self.combine(sums.iter().map(|&s| sum_n.up(s)))
    }

    /// `eps_1` over the ball `||x' - x0|| <= eps`: `(|W_1| |x'|)_k <= (|W_1| |x0|)_k +
    /// eps || |W_{1,k}| ||` (Cauchy-Schwarz on each row). A flushed input only shrinks `|x'|`.
    pub(super) fn input_errors(&self, x0: ArrayView1<f64>, eps: f64) -> Vec<f64> {
        let n = self.abs_w.ncols();
        let sums = self.abs_w.dot(&x0.mapv(f64::abs));
        let sum_n = NonnegSum::new(n);
        self.combine(
            (sums.iter().zip(&self.row_norms)).map(|(&s, &r)| add_up(sum_n.up(s), mul_up(eps, r))),
        )
    }

    /// `eps_1` over the region: over a ball, [`LayerErrorModel::input_errors`]; over a box,
    /// [`LayerErrorModel::unit_errors`] of `|x'_i| <= max(|lo_i|, |hi_i|)`.
    pub(super) fn region_errors(&self, region: &Region) -> Vec<f64> {
        match &region.boxed {
            None => self.input_errors(region.centre.view(), region.eps),
            Some(b) => {
                let mag: Array1<f64> = (b.lo.iter().zip(&b.hi))
                    .map(|(l, h)| l.abs().max(h.abs()))
                    .collect();
                self.unit_errors(mag.view())
            }
        }
    }

    /// `rel_w s_k + rel_b |b_k| + abs`, rounded up, from upper bounds `s_k` on `|w_k| . |h|`.
    fn combine(&self, sums: impl Iterator<Item = f64>) -> Vec<f64> {
        let r = self.rounding;
        sums.zip(&self.abs_b)
            .map(|(s, &b)| add_up(add_up(mul_up(r.rel_w, s), mul_up(r.rel_b, b)), r.abs))
            .map(|v| if v.is_nan() { f64::INFINITY } else { v })
            .collect()
    }
}
