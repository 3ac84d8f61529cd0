//! What the backward pass carries beside the rows: the rounding it has accumulated ([`Carried`])
//! and the row sums every substitution and the concretisation compute with their error
//! ([`RowSums`]).

use ndarray::{Array1, Array2};

use crate::arith::sound::mul_up;
use crate::bounds::local::relax::UNIT_ROUNDOFF;

/// What the substitution carries per target row besides the coefficients.
pub(super) struct Carried {
    /// The constant term (float64 sums; their rounding is in `err`).
    pub(super) cst: Vec<f64>,
    /// Upper bounds of the rounding errors so far, summed in float64 (inflated at the end).
    pub(super) err: Vec<f64>,
    /// How many terms `err` sums.
    pub(super) terms: usize,
}

impl Carried {
    /// `cst_r += v_r`, recording the addition's rounding (at most `u` times the exact sum,
    /// below `2 u |fl(sum)|`).
    pub(super) fn add_constant(&mut self, v: &[f64]) {
        for (r, &t) in v.iter().enumerate() {
            self.cst[r] += t;
            self.err[r] += mul_up(2.0 * UNIT_ROUNDOFF, self.cst[r].abs());
        }
        self.terms += 1;
    }

    /// `err_r += v_r` (each an upper bound of a nonnegative error).
    pub(super) fn add_error(&mut self, v: impl Iterator<Item = f64>) {
        for (e, t) in self.err.iter_mut().zip(v) {
            *e += t;
        }
        self.terms += 1;
    }
}

/// Per row of `Lambda`, the sums the substitution's constants and error bounds need, in one pass
/// (each a float64 sum of `m` terms in some order, bounded as such).
pub(super) struct RowSums {
    /// `Lambda b`.
    pub(super) signed: Vec<f64>,
    /// `|Lambda| |b|`.
    pub(super) abs_b: Vec<f64>,
    /// `|Lambda| v`.
    pub(super) abs_v: Vec<f64>,
    /// `sum |Lambda|`.
    pub(super) abs_lam: Vec<f64>,
    /// `sum Lambda^2`.
    pub(super) squares: Vec<f64>,
}

impl RowSums {
    /// The sums for `Lambda`, `(b, |b|)` and `v`.
    pub(super) fn of(
        lam: &Array2<f64>,
        (b, abs_b): (&Array1<f64>, &Array1<f64>),
        v: &Array1<f64>,
    ) -> Self {
        let rows = lam.nrows();
        let mut out = RowSums {
            signed: Vec::with_capacity(rows),
            abs_b: Vec::with_capacity(rows),
            abs_v: Vec::with_capacity(rows),
            abs_lam: Vec::with_capacity(rows),
            squares: Vec::with_capacity(rows),
        };
        for row in lam.rows() {
            let [s, sb, sv, sl, sq] =
                match (row.as_slice(), b.as_slice(), abs_b.as_slice(), v.as_slice()) {
                    (Some(l), Some(b), Some(ab), Some(v)) => lane_sums(l, b, ab, v),
                    _ => lane_sums(&row.to_vec(), &b.to_vec(), &abs_b.to_vec(), &v.to_vec()),
                };
            out.signed.push(s);
            out.abs_b.push(sb);
            out.abs_v.push(sv);
            out.abs_lam.push(sl);
            out.squares.push(sq);
        }
        out
    }
}

/// `[sum l b, sum |l| |b|, sum |l| v, sum |l|, sum l^2]` over equal-length slices, in four
/// interleaved partial sums per quantity (any order is covered by the bounds) so that the loop
/// vectorises.
pub(super) fn lane_sums(l: &[f64], b: &[f64], ab: &[f64], v: &[f64]) -> [f64; 5] {
    const LANES: usize = 4;
    let mut acc = [[0.0; LANES]; 5];
    let n = l.len().min(b.len()).min(ab.len()).min(v.len());
    let whole = n - n % LANES;
    for k in (0..whole).step_by(LANES) {
        for t in 0..LANES {
            let (x, a) = (l[k + t], l[k + t].abs());
            acc[0][t] += x * b[k + t];
            acc[1][t] += a * ab[k + t];
            acc[2][t] += a * v[k + t];
            acc[3][t] += a;
            acc[4][t] += x * x;
        }
    }
    let mut out = acc.map(|lanes| lanes.iter().sum::<f64>());
    for k in whole..n {
        let (x, a) = (l[k], l[k].abs());
        out[0] += x * b[k];
        out[1] += a * ab[k];
        out[2] += a * v[k];
        out[3] += a;
        out[4] += x * x;
    }
    out
}
