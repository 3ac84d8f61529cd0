//! Backward substitution (CROWN's linear bound propagation) with its floating-point rounding
//! bounded (docs/soundness.md "Local bounds").
//!
//! For target rows `C` over layer `k`'s output, the substitution keeps a linear form
//! `Lambda z_l + const` that is below `C z_k(x)` for every `x` in the ball, up to an error bound
//! `err`. Every matrix product is an ordinary float64 GEMM; what it rounds away is bounded a
//! posteriori by `gamma_n |Lambda| |W| |h|max`, a matrix-vector product of absolute values, so the
//! coefficients carried back are exact floating-point numbers and the identity they satisfy holds
//! up to the recorded error.

mod carried;
mod concretise;

use ndarray::{Array1, Array2, Axis, Zip};

use super::deployed::LayerErrorModel;
use super::interval::{nonneg_sum_up, underflow_slack, Bounds, NonnegSum};
use super::local_net::LocalNet;
use super::region::Region;
use super::relax::{gamma_up, UnitRelaxation, UNIT_ROUNDOFF};
use super::rows::rows_times;
use crate::arith::sound::{add_up, div_up, mul_up, sub_down};
use carried::{Carried, RowSums};
use concretise::concretise;

/// The coefficients a substitution carried, in float64 and without their rounding bounds: what
/// branch and bound reads to choose a split and a candidate point, never a bound.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Per hidden layer `l`, the rows' coefficients on its ReLU outputs `h_l`.
    pub hidden: Vec<Array2<f64>>,
    /// The rows' coefficients on the input, `Lambda W_1`.
    pub input: Array2<f64>,
}

impl Trace {
    /// An empty trace for `hidden` hidden layers.
    pub(super) fn new(hidden: usize) -> Trace {
        Trace {
            hidden: vec![Array2::zeros((0, 0)); hidden],
            input: Array2::zeros((0, 0)),
        }
    }
}

/// Lower bounds on the rows of `C z_k(x)` for every `x` of the region, given
/// bounds `pre[l]` on the pre-activations of the hidden layers `l < k` over the ball and their
/// relaxations `relax[l]` (with per-row lower slopes `slopes[l]` where given). For the deployed
/// execution, every layer `l <= k` has its rounding error `e_l` charged exactly once: the first
/// layer's (its input is the ball) always as `-|Lambda| eps_1` with `eps_1` recomputed over the
/// ball ([`LayerErrorModel::input_errors`]), so that a network without a hidden layer (`k = 0`,
/// the first layer also the last) is charged too; a layer `1 <= l <= k` either as
/// `-|Lambda| errors[l]` ([`super::deployed`]) or, with `linear`, as a linear term in its inputs
/// ([`substitute_deployed`]: tighter, one more matrix product per layer). A layer above the first
/// without `errors[l]` and without `linear` gets no bound (NaN). The real network has none. Each
/// result rounds down; NaN where a value was not finite. With a `trace`, the coefficients the
/// substitution carried are recorded in it ([`Trace`]). With a `shift` (multipliers `mu >= 0`
/// per hidden layer, rows x units, and the splits fixing units' phases), each row's coefficient
/// on a split unit's pre-activation moves by its multiplier against the split's sign
/// ([`shift_split_units`], beta-CROWN): the form stays below the row over every execution of
/// the subdomain.
pub(super) fn lower_bounds(
    net: &LocalNet,
    k: usize,
    c: Array2<f64>,
    (pre, relax, errors): (&[Bounds], &[Vec<UnitRelaxation>], &[Vec<f64>]),
    (slopes, linear, shift): (Option<&[Array2<f64>]>, bool, Option<Shift<'_>>),
    region: &Region,
    mut trace: Option<&mut Trace>,
) -> Vec<f64> {
    let rows = c.nrows();
    let mut lam = c;
    let mut carried = Carried {
        cst: vec![0.0; rows],
        err: vec![0.0; rows],
        terms: 0,
    };
    for l in (1..=k).rev() {
        let layer = &net.layers[l];
        // the inputs of layer l are ReLU outputs, bounded by max(hi, 0)
        let input_mag: Array1<f64> = pre[l - 1].hi.iter().map(|h| h.max(0.0)).collect();
        let m = match (&layer.rounding, linear) {
            (Some(model), true) => {
                substitute_deployed(layer, model, &lam, &input_mag, &mut carried)
            }
            (Some(_), false) => {
                // a deployed layer's rounding must be charged: without its bound, no bound
                let Some(e) = errors.get(l).filter(|e| e.len() == layer.w.nrows()) else {
                    return vec![f64::NAN; rows];
                };
                add_unit_errors(&lam, e, &mut carried);
                substitute_layer(layer, &lam, &input_mag, &mut carried)
            }
            (None, _) => substitute_layer(layer, &lam, &input_mag, &mut carried),
        };
        if let Some(t) = trace.as_deref_mut() {
            t.hidden[l - 1] = m.clone();
        }
        let lines = (&relax[l - 1][..], slopes.map(|s| &s[l - 1]));
        lam = relax_rows(&m, lines, &pre[l - 1].magnitude(), &mut carried);
        if let Some((mu, splits)) = shift {
            shift_split_units(&mut lam, l - 1, mu, splits);
        }
    }
    if let Some(errors) = &concretise::first_layer_at_centre(net, region).errors {
        // the first layer's rounding over the ball, charged here for every `k`: with no hidden
        // layer (`k = 0`) the loop above is empty and this is the only layer's rounding
        add_unit_errors(&lam, errors, &mut carried);
    }
    let (lower, m_hat) = concretise(net, &lam, carried, region);
    if let Some(t) = trace {
        // over a box the concretisation formed `Lambda W_1` already
        t.input = m_hat.unwrap_or_else(|| rows_times(&lam, net.layers[0].w.view()));
    }
    lower
}

/// Multipliers of split constraints: per hidden layer, `mu >= 0` per row and unit (read only at
/// the units the splits fix), and the splits.
pub(super) type Shift<'a> = (&'a [Array2<f64>], &'a super::Splits);

/// beta-CROWN's Lagrangian term (Wang et al. 2021), for the rows' coefficients `lam` on hidden
/// layer `h`'s pre-activations `z_hat`: for a unit the splits fix active (`z_hat_j >= 0`,
/// `s = 1`) or inactive (`z_hat_j <= 0`, `s = -1`), `s z_hat_j >= 0` over the subdomain, so
/// `Lambda z_hat >= Lambda' z_hat` for any `Lambda'_j` with `(Lambda_j - Lambda'_j) s >= 0`.
/// `Lambda'_j = fl(Lambda_j - s mu_j)` is one for `mu_j >= 0` (rounding is monotone, so the
/// rounded difference stays on the same side of `Lambda_j`); the side is checked all the same,
/// and a value that fails it, or is not finite, leaves the coefficient as it was. No rounding
/// error arises: `Lambda'` is exact as the form's new coefficient.
pub(super) fn shift_split_units(
    lam: &mut Array2<f64>,
    h: usize,
    mu: &[Array2<f64>],
    splits: &super::Splits,
) {
    let Some(mu) = mu.get(h) else {
        return;
    };
    for &(_, j, phase) in splits.iter().filter(|(l, _, _)| *l == h) {
        let s = match phase {
            super::Phase::Active => 1.0,
            super::Phase::Inactive => -1.0,
        };
        if j >= lam.ncols() {
            continue;
        }
        for r in 0..lam.nrows() {
            let m = mu.get((r, j)).copied().unwrap_or(0.0);
            let old = lam[[r, j]];
            let new = old - s * m;
            if m > 0.0 && new.is_finite() && (old - new) * s >= 0.0 {
                lam[[r, j]] = new;
            }
        }
    }
}

/// `Lambda e_l >= -|Lambda| eps_l` for the deployed execution's rounding errors
/// `|e_l| <= eps_l`: the error grows by `|Lambda| eps_l`, a sum of `m_l` nonnegative products
/// bounded above as computed.
fn add_unit_errors(lam: &Array2<f64>, eps_l: &[f64], carried: &mut Carried) {
    let m = eps_l.len();
    let sum_m = NonnegSum::new(m);
    let eps_l = Array1::from(eps_l.to_vec());
    let weighted = RowSums::of(lam, (&eps_l, &eps_l), &eps_l).abs_v;
    carried.add_error(weighted.iter().map(|&v| {
        let up = sum_m.up(v);
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
    layer: &super::local_net::LocalLayer,
    lam: &Array2<f64>,
    input_mag: &Array1<f64>,
    carried: &mut Carried,
) -> Array2<f64> {
    let (m_l, n_l) = layer.w.dim();
    if let Some(units) = signed_units(lam) {
        // rows +-e_j (a hidden unit's bounds): the products are signed rows of W_l and entries
        // of b_l, exact
        let bias: Vec<f64> = units.iter().map(|&(j, s)| s * layer.b[j]).collect();
        carried.add_constant(&bias);
        let mut m = Array2::zeros((units.len(), n_l));
        for (mut row, &(j, s)) in m.rows_mut().into_iter().zip(&units) {
            row.zip_mut_with(&layer.w.row(j), |v, &w| *v = s * w);
        }
        return m;
    }
    let w_mag = layer.abs_w.dot(input_mag);
    let sums = RowSums::of(lam, (&layer.b, &layer.abs_b), &w_mag);
    let (bias, bias_mag, lam_w_mag, lam_sums) = (sums.signed, sums.abs_b, sums.abs_v, sums.abs_lam);
    let input_sum = nonneg_sum_up(input_mag.sum(), n_l);
    let g = gamma_up(m_l.max(n_l) + 1);
    let slack = underflow_slack(m_l + n_l + 2);
    let (sum_m, sum_n) = (NonnegSum::new(m_l), NonnegSum::new(n_l));
    carried.add_constant(&bias);
    carried.add_error((0..lam.nrows()).map(|r| {
        // |Lambda| (|W| |h|max) from two float64 products of nonnegative terms: the exact value
        // is at most (fl + m eta) / (1 - gamma)^2 + n eta sum|Lambda_r| / (1 - gamma), below
        // 4 (fl + m eta) + 2 n eta sum|Lambda_r|
        let two_level = sum_n.up(sum_m.up(lam_w_mag[r]));
        let lam_mass = sum_m.up(lam_sums[r]);
        let rounding = mul_up(g, add_up(two_level, sum_m.up(bias_mag[r])));
        let underflow = mul_up(slack, add_up(mul_up(4.0, add_up(1.0, lam_mass)), input_sum));
        add_up(rounding, underflow)
    }));
    rows_times(lam, layer.w.view())
}

/// `Lambda z_hat_l` of the deployed execution, for a layer whose inputs `h = h_hat_{l-1}` are
/// ReLU outputs (`0 <= h <= a`): with `z_hat_l = W_l h + b_l + e_l` and
/// `|e_l| <= r_w A h + r_b |b_l| + abs` (`A >= |W_l|`, [`super::deployed`]), and `h >= 0`,
/// `Lambda z_hat_l >= (M - c Q) h + Lambda b_l - r_b |Lambda| |b_l| - abs sum|Lambda| - m eta sum a`
/// where `M = fl(Lambda W_l)` (within `gamma_m |Lambda| A + m eta` of the exact product),
/// `Q >= |Lambda| A` bounds `fl(|Lambda| A)` above and `c = gamma_m + r_w`: the rounding error and
/// the product's own rounding become a linear term in `h`, carried back through the relaxations
/// instead of being bounded at `h = a`. Returns the coefficients `fl(M - c Q)` rounded down (a
/// smaller coefficient of a nonnegative `h` keeps the form below) and adds `fl(Lambda b_l)` to
/// the constant and the rest to the error.
fn substitute_deployed(
    layer: &super::local_net::LocalLayer,
    model: &LayerErrorModel,
    lam: &Array2<f64>,
    input_mag: &Array1<f64>,
    carried: &mut Carried,
) -> Array2<f64> {
    let (m_l, n_l) = layer.w.dim();
    let r = model.rounding();
    let abs_lam = lam.mapv(f64::abs);
    let bias = lam.dot(&layer.b);
    let bias_mag = abs_lam.dot(&layer.abs_b);
    let lam_sums = abs_lam.sum_axis(Axis(1));
    let input_sum = nonneg_sum_up(input_mag.sum(), n_l);
    let g = gamma_up(m_l);
    let keep = sub_down(1.0, g);
    // c Q <= cq (fl(|Lambda| A) + (m + 1) eta) with cq >= (gamma_m + r_w) / (1 - gamma_m)
    let cq = if keep > 0.0 {
        div_up(add_up(g, r.rel_w), keep)
    } else {
        f64::INFINITY
    };
    let slack = underflow_slack(m_l);
    let sum_m = NonnegSum::new(m_l);
    let mut coef = rows_times(lam, layer.w.view());
    let mag = rows_times(&abs_lam, model.abs_w().view());
    Zip::from(&mut coef)
        .and(&mag)
        .for_each(|c, &p| *c = sub_down(*c, mul_up(cq, add_up(p, slack))));
    carried.add_constant(bias.as_slice().expect("a new array is contiguous"));
    carried.add_error((0..lam.nrows()).map(|row| {
        let bias_err = mul_up(add_up(g, r.rel_b), sum_m.up(bias_mag[row]));
        let lam_mass = sum_m.up(lam_sums[row]);
        let floor = add_up(
            mul_up(r.abs, lam_mass),
            add_up(slack, mul_up(slack, input_sum)),
        );
        add_up(bias_err, floor)
    }));
    coef
}

/// `(j, s)` per row when every row of `lam` is `s e_j` with `s = +-1`.
fn signed_units(lam: &Array2<f64>) -> Option<Vec<(usize, f64)>> {
    lam.rows()
        .into_iter()
        .map(|row| {
            let mut nonzero = row.iter().enumerate().filter(|(_, v)| **v != 0.0);
            match (nonzero.next(), nonzero.next()) {
                (Some((j, &s)), None) if s.abs() == 1.0 => Some((j, s)),
                _ => None,
            }
        })
        .collect()
}

/// Replaces `M h_{l-1}` by a linear form in `z_{l-1}` through each unit's relaxation: the
/// lower line where `M_rj >= 0`, the upper line `s z + t` where `M_rj < 0` (its offsets go to
/// the constant). The lower line's slope is `slopes[r, j]` where given (any value in `[0, 1]` is
/// valid), CROWN's adaptive 0 or 1 otherwise. A coefficient `fl(M_rj s_j)` differs from
/// `M_rj s_j` by at most `u |M_rj| s_j + eta/2`, which the error records times `|z_j|max`
/// (`mag`); so does a fractional lower slope's.
fn relax_rows(
    m: &Array2<f64>,
    (relax, slopes): (&[UnitRelaxation], Option<&Array2<f64>>),
    mag: &[f64],
    carried: &mut Carried,
) -> Array2<f64> {
    let (rows, n) = m.dim();
    let mut next = Array2::zeros((rows, n));
    let mut offsets = vec![0.0; rows];
    let mut offsets_mag = vec![0.0; rows];
    let mut products_mag = vec![0.0; rows];
    let table = LineTable::new(relax, mag);
    let mut lines = RowLines::default();
    for (r, (m_row, mut out)) in m.rows().into_iter().zip(next.rows_mut()).enumerate() {
        let given = slopes.map(|s| s.row(r));
        let lower = table.lower_lines(given, mag, &mut lines);
        let sums = match (m_row.as_slice(), out.as_slice_mut()) {
            (Some(m_row), Some(out)) => table.apply(m_row, lower, out),
            _ => {
                let mut row = vec![0.0; n];
                let sums = table.apply(&m_row.to_vec(), lower, &mut row);
                out.assign(&Array1::from(row));
                sums
            }
        };
        [offsets[r], offsets_mag[r], products_mag[r]] = sums;
    }
    let mag_sum = nonneg_sum_up(mag.iter().sum(), n);
    let g = gamma_up(n + 1);
    let sum_n = NonnegSum::new(n);
    let floor = mul_up(underflow_slack(n), add_up(1.0, mag_sum));
    carried.add_constant(&offsets);
    carried.add_error((0..rows).map(|r| {
        add_up(
            add_up(
                mul_up(g, sum_n.up(offsets_mag[r])),
                mul_up(UNIT_ROUNDOFF, sum_n.up(products_mag[r])),
            ),
            floor,
        )
    }));
    next
}

/// Every unit's lines as arrays ([`relax_rows`]): per unit CROWN's lower slope and the upper
/// slope, the upper offset, the fractional upper slope times `|z_j|max` (0 where the product is
/// exact: stable units), and whether the unit is unstable (only then may a given lower slope
/// replace CROWN's).
struct LineTable {
    lower: Vec<f64>,
    upper: Vec<f64>,
    offset: Vec<f64>,
    inexact: Vec<f64>,
    unstable: Vec<bool>,
    /// CROWN's lower slope times `|z_j|max` where it is fractional, else 0 (CROWN's adaptive
    /// slopes are 0 or 1, exact products; kept general so the charge never rests on that).
    lower_inexact: Vec<f64>,
}

/// One row's lower lines when it has its own slopes: the slope per unit and, where it is
/// fractional, the slope times `|z_j|max` (the new coefficient's rounding), else 0.
#[derive(Default)]
struct RowLines {
    slope: Vec<f64>,
    inexact: Vec<f64>,
}

impl LineTable {
    fn new(relax: &[UnitRelaxation], mag: &[f64]) -> Self {
        let n = relax.len();
        let mut t = LineTable {
            lower: Vec::with_capacity(n),
            upper: Vec::with_capacity(n),
            offset: Vec::with_capacity(n),
            inexact: Vec::with_capacity(n),
            unstable: Vec::with_capacity(n),
            lower_inexact: Vec::with_capacity(n),
        };
        for (unit, &z_mag) in relax.iter().zip(mag) {
            let (lo, up, off, inexact) = match *unit {
                UnitRelaxation::Inactive => (0.0, 0.0, 0.0, 0.0),
                UnitRelaxation::Active => (1.0, 1.0, 0.0, 0.0),
                UnitRelaxation::Unstable {
                    lower,
                    slope,
                    offset,
                } => (lower, slope, offset, slope * z_mag),
            };
            t.lower.push(lo);
            t.upper.push(up);
            t.offset.push(off);
            t.inexact.push(inexact);
            t.unstable
                .push(matches!(unit, UnitRelaxation::Unstable { .. }));
            let fractional = lo != 0.0 && lo != 1.0;
            t.lower_inexact
                .push(if fractional { lo * z_mag } else { 0.0 });
        }
        t
    }

    /// The lower lines of a row: CROWN's without `given` slopes; with them, each unstable
    /// unit's given slope where it lies in `[0, 1]` (any such slope is a lower line, L5) and
    /// CROWN's otherwise (NaN included), written into `lines`.
    fn lower_lines<'a>(
        &'a self,
        given: Option<ndarray::ArrayView1<'_, f64>>,
        mag: &[f64],
        lines: &'a mut RowLines,
    ) -> (&'a [f64], &'a [f64]) {
        let Some(given) = given else {
            return (&self.lower, &self.lower_inexact);
        };
        let n = self.lower.len();
        lines.slope.resize(n, 0.0);
        lines.inexact.resize(n, 0.0);
        let owned: Vec<f64>;
        let given = match given.as_slice() {
            Some(g) => g,
            None => {
                owned = given.to_vec();
                &owned
            }
        };
        let units = (self.lower.iter().zip(&self.unstable)).zip(given.iter().zip(mag));
        let out = lines.slope.iter_mut().zip(lines.inexact.iter_mut());
        for ((slope, inexact), ((&crown, &unstable), (&a, &z_mag))) in out.zip(units) {
            // written as selects, so that the loop vectorises
            let own = unstable & (0.0..=1.0).contains(&a);
            *slope = if own { a } else { crown };
            let fractional = (*slope != 0.0) & (*slope != 1.0);
            *inexact = if fractional { *slope * z_mag } else { 0.0 };
        }
        (&lines.slope, &lines.inexact)
    }

    /// Relaxes one row `m` into `out`: the lower slope `lower.0` where `m_j >= 0`, the upper
    /// line where `m_j < 0`; returns `[sum m_j t_j, sum |m_j| t_j, sum |m_j| s_j |z_j|max]` over
    /// the upper lines, the last plus `sum m_j a_j |z_j|max` over the fractional lower slopes
    /// (`lower.1`; float64 sums in four interleaved partial sums, any order being covered).
    fn apply(&self, m: &[f64], lower: (&[f64], &[f64]), out: &mut [f64]) -> [f64; 3] {
        const LANES: usize = 4;
        let n = (m.len().min(out.len()).min(self.upper.len()))
            .min(lower.0.len())
            .min(lower.1.len());
        let (m, out) = (&m[..n], &mut out[..n]);
        let (lower, lower_inexact) = (&lower.0[..n], &lower.1[..n]);
        let (upper, offset, inexact) = (&self.upper[..n], &self.offset[..n], &self.inexact[..n]);
        let mut acc = [[0.0; LANES]; 3];
        let line = |v: f64, k: usize| {
            let neg = v < 0.0;
            let slope = if neg { upper[k] } else { lower[k] };
            let (back, ahead) = if neg { (-v, 0.0) } else { (0.0, v) };
            // one of the two products is an exact zero: the sum adds no rounding
            let charge = back * inexact[k] + ahead * lower_inexact[k];
            (v * slope, back * offset[k], charge)
        };
        let whole = n - n % LANES;
        for (c, (m, out)) in (m[..whole].chunks_exact(LANES))
            .zip(out[..whole].chunks_exact_mut(LANES))
            .enumerate()
        {
            for t in 0..LANES {
                let (value, off, inx) = line(m[t], c * LANES + t);
                out[t] = value;
                acc[0][t] -= off;
                acc[1][t] += off;
                acc[2][t] += inx;
            }
        }
        let mut sums = acc.map(|lanes| lanes.iter().sum::<f64>());
        for k in whole..n {
            let (value, off, inx) = line(m[k], k);
            out[k] = value;
            sums[0] -= off;
            sums[1] += off;
            sums[2] += inx;
        }
        sums
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_allowances;
