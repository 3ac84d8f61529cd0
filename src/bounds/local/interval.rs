//! Componentwise bounds of a dense layer's output over a box of its inputs, with the rounding of
//! the float64 products bounded (docs/soundness.md "Local bounds"): used for the centre's
//! pre-activations and for interval bound propagation over the ball.

use ndarray::{Array1, ArrayView1};

use super::local_net::LocalLayer;
use super::relax::gamma_up;
use crate::arith::sound::{add_up, div_up, mul_up, sub_down};

/// Componentwise bounds `lo <= v <= hi` of a vector over the ball.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    /// Lower bounds.
    pub lo: Vec<f64>,
    /// Upper bounds.
    pub hi: Vec<f64>,
}

impl Bounds {
    /// The tighter of two sound bounds, componentwise.
    pub fn intersect(&self, other: &Bounds) -> Bounds {
        Bounds {
            lo: self
                .lo
                .iter()
                .zip(&other.lo)
                .map(|(a, b)| a.max(*b))
                .collect(),
            hi: self
                .hi
                .iter()
                .zip(&other.hi)
                .map(|(a, b)| a.min(*b))
                .collect(),
        }
    }

    /// The bounds of `max(v, 0)`.
    pub fn relu(&self) -> Bounds {
        Bounds {
            lo: self.lo.iter().map(|v| v.max(0.0)).collect(),
            hi: self.hi.iter().map(|v| v.max(0.0)).collect(),
        }
    }

    /// The bounds widened by `w_k` on each side (no change for an empty `w`).
    pub fn widen(&self, w: &[f64]) -> Bounds {
        if w.is_empty() {
            return self.clone();
        }
        Bounds {
            lo: self
                .lo
                .iter()
                .zip(w)
                .map(|(v, d)| nan_low(sub_down(*v, *d)))
                .collect(),
            hi: self
                .hi
                .iter()
                .zip(w)
                .map(|(v, d)| nan_high(add_up(*v, *d)))
                .collect(),
        }
    }

    /// Largest magnitude per component, `max(|lo|, |hi|)`.
    pub fn magnitude(&self) -> Vec<f64> {
        self.lo
            .iter()
            .zip(&self.hi)
            .map(|(l, h)| l.abs().max(h.abs()))
            .collect()
    }
}

/// `2^-1074`, the spacing of the float64 subnormals.
pub const ETA: f64 = f64::from_bits(1);

/// An upper bound on the exact value of a sum of `n` nonnegative terms whose float64 evaluation
/// (any order) returned `fl`: `fl >= (1 - gamma_n) exact - n eta / 2` (products that underflow
/// lose at most `eta / 2` each, additions near zero are exact), so
/// `exact <= (fl + n eta) / (1 - gamma_n)` (infinite when `gamma_n` is).
pub fn nonneg_sum_up(fl: f64, n: usize) -> f64 {
    NonnegSum::new(n).up(fl)
}

/// [`nonneg_sum_up`] for one length `n`, its constants computed once (for loops over rows).
#[derive(Clone, Copy, Debug)]
pub struct NonnegSum {
    /// `n eta`, rounded up.
    slack: f64,
    /// `1 / (1 - gamma_n)`, rounded up (infinite when `gamma_n >= 1`).
    inv_keep: f64,
}

impl NonnegSum {
    /// The bound for sums of `n` terms.
    pub fn new(n: usize) -> Self {
        let keep = sub_down(1.0, gamma_up(n));
        NonnegSum {
            slack: underflow_slack(n),
            inv_keep: if keep > 0.0 {
                div_up(1.0, keep)
            } else {
                f64::INFINITY
            },
        }
    }

    /// An upper bound on the exact sum whose float64 evaluation returned `fl`:
    /// `(fl + n eta) / (1 - gamma_n)`, rounded up.
    pub fn up(&self, fl: f64) -> f64 {
        mul_up(add_up(fl, self.slack), self.inv_keep)
    }
}

/// `n eta` rounded up: the absolute error underflow can add to a dot product of length `n`.
pub fn underflow_slack(n: usize) -> f64 {
    mul_up(n as f64 + 1.0, ETA)
}

/// Bounds on `W h + b` for every `h` with `lo <= h <= hi`. With `mid = (lo + hi) / 2` and
/// `rad >= max(hi - mid, mid - lo)` (float64, `rad` rounded up), `W h + b` lies within
/// `|W| rad` of `W mid + b`, and the float64 value `c = fl(W mid + b)` within
/// `gamma_{n+1} (|W| |mid| + |b|) + (n + 1) eta` of it (one more addition for the bias).
pub fn layer_box(layer: &LocalLayer, input: &Bounds) -> Bounds {
    let n = layer.w.ncols();
    let mid: Array1<f64> = input
        .lo
        .iter()
        .zip(&input.hi)
        .map(|(l, h)| 0.5 * l + 0.5 * h)
        .collect();
    let rad: Array1<f64> = input
        .lo
        .iter()
        .zip(&input.hi)
        .zip(&mid)
        .map(|((l, h), m)| add_up(*h, -m).max(add_up(*m, -l)).max(0.0))
        .collect();
    let centre = layer.w.dot(&mid);
    let spread = layer.abs_w.dot(&rad);
    let magnitude = layer.abs_w.dot(&mid.mapv(f64::abs));
    let g = gamma_up(n + 1);
    let mut out = Bounds {
        lo: Vec::with_capacity(layer.b.len()),
        hi: Vec::with_capacity(layer.b.len()),
    };
    let (sum_n, sum_n1) = (NonnegSum::new(n), NonnegSum::new(n + 1));
    for (k, &b) in layer.b.iter().enumerate() {
        let c = centre[k] + b;
        let rounding = mul_up(g, sum_n1.up(add_up(magnitude[k], b.abs())));
        let r = add_up(sum_n.up(spread[k]), rounding);
        out.lo.push(nan_low(sub_down(c, r)));
        out.hi.push(nan_high(add_up(c, r)));
    }
    out
}

/// Bounds of the point `x` itself.
pub fn point(x: ArrayView1<f64>) -> Bounds {
    Bounds {
        lo: x.to_vec(),
        hi: x.to_vec(),
    }
}

/// A lower bound that is NaN becomes `-inf` (no information).
pub fn nan_low(v: f64) -> f64 {
    if v.is_nan() {
        f64::NEG_INFINITY
    } else {
        v
    }
}

/// An upper bound that is NaN becomes `+inf`.
pub fn nan_high(v: f64) -> f64 {
    if v.is_nan() {
        f64::INFINITY
    } else {
        v
    }
}
