//! Backward substitution (CROWN's linear bound propagation) with its floating-point rounding
//! bounded (docs/soundness.md "Local bounds").
//!
//! For target rows `C` over layer `k`'s output, the substitution keeps a linear form
//! `Lambda z_l + const` that is below `C z_k(x)` for every `x` in the ball, up to an error bound
//! `err`. Every matrix product is an ordinary float64 GEMM; what it rounds away is bounded a
//! posteriori by `gamma_n |Lambda| |W| |h|max`, a matrix-vector product of absolute values, so the
//! coefficients carried back are exact floating-point numbers and the identity they satisfy holds
//! up to the recorded error.

use ndarray::{Array1, Array2, ArrayView1, Axis};

use super::interval::{nonneg_sum_up, underflow_slack, Bounds};
use super::relax::{gamma_up, UnitRelaxation, UNIT_ROUNDOFF};
use super::LocalNet;
use crate::arith::sound::{add_down, add_up, mul_up, sqrt_up, sub_down};

/// What the substitution carries per target row besides the coefficients.
struct Carried {
    /// The constant term (float64 sums; their rounding is in `err`).
    cst: Vec<f64>,
    /// Upper bounds of the rounding errors so far, summed in float64 (inflated at the end).
    err: Vec<f64>,
    /// How many terms `err` sums.
    terms: usize,
}

impl Carried {
    /// `cst_r += v_r`, recording the addition's rounding (at most `u` times the exact sum,
    /// below `2 u |fl(sum)|`).
    fn add_constant(&mut self, v: &[f64]) {
        for (r, &t) in v.iter().enumerate() {
            self.cst[r] += t;
            self.err[r] += mul_up(2.0 * UNIT_ROUNDOFF, self.cst[r].abs());
        }
        self.terms += 1;
    }

    /// `err_r += v_r` (each an upper bound of a nonnegative error).
    fn add_error(&mut self, v: impl Iterator<Item = f64>) {
        for (e, t) in self.err.iter_mut().zip(v) {
            *e += t;
        }
        self.terms += 1;
    }
}

/// Lower bounds on the rows of `C z_k(x)` for every `x` with `||x - x0||_2 <= eps`, given
/// bounds `pre[l]` on the pre-activations of the hidden layers `l < k` over the ball and their
/// relaxations `relax[l]`. For the deployed execution, `errors[l]` (`l <= k`) bounds its rounding
/// error `e_l` componentwise and each row over `z_l` picks up `-|Lambda| errors[l]`
/// ([`super::deployed`]); the real network has none. Each result rounds down; NaN where a
/// value was not finite.
pub(super) fn lower_bounds(
    net: &LocalNet,
    k: usize,
    c: Array2<f64>,
    (pre, relax, errors): (&[Bounds], &[Vec<UnitRelaxation>], &[Vec<f64>]),
    x0: ArrayView1<f64>,
    eps: f64,
) -> Vec<f64> {
    let rows = c.nrows();
    let mut lam = c;
    let mut carried = Carried {
        cst: vec![0.0; rows],
        err: vec![0.0; rows],
        terms: 0,
    };
    for l in (0..=k).rev() {
        let layer = &net.layers[l];
        if let Some(e) = errors.get(l).filter(|e| !e.is_empty()) {
            add_unit_errors(&lam, e, &mut carried);
        }
        // the inputs of layer l are bounded in magnitude by |x0| + eps or by max(hi, 0)
        let input_mag: Array1<f64> = if l == 0 {
            x0.mapv(|v| add_up(v.abs(), eps))
        } else {
            pre[l - 1].hi.iter().map(|h| h.max(0.0)).collect()
        };
        if l == 0 {
            return concretise(net, &lam, carried, x0, eps);
        }
        let m = substitute_layer(layer, &lam, &input_mag, &mut carried);
        lam = relax_rows(&m, &relax[l - 1], &pre[l - 1].magnitude(), &mut carried);
    }
    unreachable!("the loop returns at layer 0")
}

/// `Lambda e_l >= -|Lambda| eps_l` for the deployed execution's rounding errors
/// `|e_l| <= eps_l`: the error grows by `|Lambda| eps_l`, a sum of `m_l` nonnegative products
/// bounded above as computed.
fn add_unit_errors(lam: &Array2<f64>, eps_l: &[f64], carried: &mut Carried) {
    let m = eps_l.len();
    let weighted = lam.mapv(f64::abs).dot(&ArrayView1::from(eps_l));
    carried.add_error(weighted.iter().map(|&v| {
        let up = nonneg_sum_up(v, m);
        if up.is_nan() {
            f64::INFINITY
        } else {
            up
        }
    }));
}

/// `Lambda z_l = (Lambda W_l) h_{l-1} + Lambda b_l`: returns `M = fl(Lambda W_l)` and adds
/// `fl(Lambda b_l)` to the constant. Each entry of `M` is within
/// `gamma_{m_l} (|Lambda| |W_l|)_rj + m_l eta` of the exact product and each of `fl(Lambda b_l)`
/// within `gamma_{m_l} (|Lambda| |b_l|)_r + m_l eta`, so the error grows by
/// `gamma (|Lambda| (|W_l| |h|max) + |Lambda| |b_l|) + m_l eta sum_j |h_j|max` (plus the
/// underflow of the absolute-value products themselves).
fn substitute_layer(
    layer: &super::LocalLayer,
    lam: &Array2<f64>,
    input_mag: &Array1<f64>,
    carried: &mut Carried,
) -> Array2<f64> {
    let (m_l, n_l) = layer.w.dim();
    let abs_lam = lam.mapv(f64::abs);
    let bias = lam.dot(&layer.b);
    let bias_mag = abs_lam.dot(&layer.abs_b);
    let w_mag = layer.abs_w.dot(input_mag);
    let lam_w_mag = abs_lam.dot(&w_mag);
    let lam_sums = abs_lam.sum_axis(Axis(1));
    let input_sum = nonneg_sum_up(input_mag.sum(), n_l);
    let g = gamma_up(m_l.max(n_l) + 1);
    let slack = underflow_slack(m_l + n_l + 2);
    carried.add_constant(bias.as_slice().expect("a new array is contiguous"));
    carried.add_error((0..lam.nrows()).map(|r| {
        // |Lambda| (|W| |h|max) from two float64 products of nonnegative terms: the exact value
        // is at most (fl + m eta) / (1 - gamma)^2 + n eta sum|Lambda_r| / (1 - gamma), below
        // 4 (fl + m eta) + 2 n eta sum|Lambda_r|
        let two_level = nonneg_sum_up(nonneg_sum_up(lam_w_mag[r], m_l), n_l);
        let lam_mass = nonneg_sum_up(lam_sums[r], m_l);
        let rounding = mul_up(g, add_up(two_level, nonneg_sum_up(bias_mag[r], m_l)));
        let underflow = mul_up(slack, add_up(mul_up(4.0, add_up(1.0, lam_mass)), input_sum));
        add_up(rounding, underflow)
    }));
    lam.dot(layer.w)
}

/// Replaces `M h_{l-1}` by a linear form in `z_{l-1}` through each unit's relaxation: the
/// lower line where `M_rj >= 0`, the upper line `s z + t` where `M_rj < 0` (its offsets go to
/// the constant). A coefficient `fl(M_rj s_j)` differs from `M_rj s_j` by at most
/// `u |M_rj| s_j + eta/2`, which the error records times `|z_j|max` (`mag`).
fn relax_rows(
    m: &Array2<f64>,
    relax: &[UnitRelaxation],
    mag: &[f64],
    carried: &mut Carried,
) -> Array2<f64> {
    let (rows, n) = m.dim();
    let mut next = Array2::zeros((rows, n));
    let mut offsets = vec![0.0; rows];
    let mut offsets_mag = vec![0.0; rows];
    let mut products_mag = vec![0.0; rows];
    for r in 0..rows {
        for (j, unit) in relax.iter().enumerate() {
            let v = m[[r, j]];
            next[[r, j]] = match *unit {
                UnitRelaxation::Inactive => 0.0,
                UnitRelaxation::Active => v,
                UnitRelaxation::Unstable { lower, .. } if v >= 0.0 => lower * v,
                UnitRelaxation::Unstable { slope, offset, .. } => {
                    offsets[r] += v * offset;
                    offsets_mag[r] += -v * offset;
                    products_mag[r] += -v * slope * mag[j];
                    v * slope
                }
            };
        }
    }
    let mag_sum = nonneg_sum_up(mag.iter().sum(), n);
    let g = gamma_up(n + 1);
    carried.add_constant(&offsets);
    carried.add_error((0..rows).map(|r| {
        add_up(
            add_up(
                mul_up(g, nonneg_sum_up(offsets_mag[r], n)),
                mul_up(UNIT_ROUNDOFF, nonneg_sum_up(products_mag[r], n)),
            ),
            mul_up(underflow_slack(n), add_up(1.0, mag_sum)),
        )
    }));
    next
}

/// At the input, for `Lambda z_1(x) = M x + Lambda b_1` with `M = Lambda W_1` (never formed):
/// `min over ||x - x0|| <= eps of M x = M x0 - eps ||M_r||_2` (Cauchy-Schwarz, attained). With
/// `c = fl(W_1 x0)` (within `e = gamma_n |W_1| |x0| + n eta` of `W_1 x0`), `M x0` is within
/// `gamma_m |Lambda| |c| + |Lambda| e + m eta` of `fl(Lambda c)`; and
/// `||M_r||^2 = Lambda_r G Lambda_r^T` with `G = W_1 W_1^T`, whose float64 value `G_hat` is within
/// `gamma_n |W_1| |W_1|^T + n eta` of it, so with the quadratic form's own rounding
/// `||M_r||^2 <= fl(Lambda_r G_hat Lambda_r^T) + (gamma_n + 2 gamma_{2m}) 2 ||W_1||_F^2 ||Lambda_r||^2`
/// (`|Lambda_r| |W_1| |W_1|^T |Lambda_r|^T = || |W_1|^T |Lambda_r| ||^2 <= ||W_1||_F^2 ||Lambda_r||^2`)
/// plus the underflow slack. The result is `cst + fl(Lambda c) - (eps + D_0) ||M_r||_up - err`:
/// a deployed input flushed to zero is within `D_0` of `x` (0 for the real network).
fn concretise(
    net: &LocalNet,
    lam: &Array2<f64>,
    mut carried: Carried,
    x0: ArrayView1<f64>,
    eps: f64,
) -> Vec<f64> {
    let layer = &net.layers[0];
    let (m, n) = layer.w.dim();
    let abs_lam = lam.mapv(f64::abs);
    let c = layer.w.dot(&x0);
    let c_err: Array1<f64> = layer
        .abs_w
        .dot(&x0.mapv(f64::abs))
        .mapv(|v| add_up(mul_up(gamma_up(n), nonneg_sum_up(v, n)), underflow_slack(n)));
    let bias = lam.dot(&layer.b);
    let centre = lam.dot(&c);
    let centre_mag = abs_lam.dot(&c.mapv(f64::abs));
    let from_c = abs_lam.dot(&c_err);
    let bias_mag = abs_lam.dot(&layer.abs_b);
    let lam_sums = abs_lam.sum_axis(Axis(1));
    let quad = (lam.dot(&net.input_gram) * lam).sum_axis(Axis(1));
    let g = gamma_up(m + 1);
    let g_quad = mul_up(2.0, add_up(gamma_up(n), mul_up(2.0, gamma_up(2 * m + 1))));
    carried.add_constant(bias.as_slice().expect("a new array is contiguous"));
    let slack = underflow_slack(m + n + 2);
    carried.add_error((0..lam.nrows()).map(|r| {
        let rounding = mul_up(
            g,
            add_up(
                nonneg_sum_up(centre_mag[r], m),
                nonneg_sum_up(bias_mag[r], m),
            ),
        );
        let lam_mass = nonneg_sum_up(lam_sums[r], m);
        add_up(
            add_up(rounding, nonneg_sum_up(from_c[r], m)),
            mul_up(slack, mul_up(4.0, add_up(1.0, lam_mass))),
        )
    }));
    let terms = carried.terms;
    let reach = add_up(eps, net.d0);
    (0..lam.nrows())
        .map(|r| {
            let lam_sq = nonneg_sum_up(lam.row(r).iter().map(|v| v * v).sum(), m);
            let lam_mass = nonneg_sum_up(lam_sums[r], m);
            let quad_err = add_up(
                mul_up(g_quad, mul_up(net.input_frob2, lam_sq)),
                mul_up(slack, mul_up(4.0, add_up(1.0, mul_up(lam_mass, lam_mass)))),
            );
            let norm = sqrt_up(add_up(quad[r].max(0.0), quad_err));
            let err = nonneg_sum_up(carried.err[r], terms);
            let value = add_down(carried.cst[r], centre[r]);
            sub_down(sub_down(value, mul_up(reach, norm)), err)
        })
        .map(|v| if v.is_nan() { f64::NEG_INFINITY } else { v })
        .collect()
}
