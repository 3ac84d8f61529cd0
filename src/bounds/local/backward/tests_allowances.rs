//! The allowance terms of the backward substitution pinned in exact rationals: the underflow
//! slacks, the gamma indices and the magnitude sums they multiply. Each is far below the
//! tolerance of the bound-level tests (`tests/bounds/local_exact.rs`), so each test picks a scale at
//! which the pinned term is the recorded error (or a fixed share of it), recomputes the
//! documented charge with `rug::Rational`, and requires the recorded value to be at least it and
//! within `1e-12` relative of it. An underflow slack `k eta` is a subnormal that `underflow_slack`
//! rounds up by whole multiples of `eta`: where it is the pinned term, the recorded value lies
//! between the charge with `k eta` and the charge with `underflow_slack(k)`'s value.

use rug::Rational;

use super::carried::lane_sums;
use super::concretise::ball_spread;
use super::*;
use crate::arith::format::Format;
use crate::bounds::local::interval::ETA;
use crate::bounds::local::InputSet;
use crate::onnx::model::{Activation, Dense, DenseNet};

fn q(v: f64) -> Rational {
    Rational::from_f64(v).unwrap()
}

fn int(n: usize) -> Rational {
    Rational::from(n as u64)
}

/// `gamma_n = n u / (1 - n u)`, exact.
fn gamma(n: usize) -> Rational {
    let nu = int(n) * q(UNIT_ROUNDOFF);
    nu.clone() / (Rational::from(1) - nu)
}

/// The documented underflow slack of a length-`k` dot product, `k eta`.
fn slack(k: usize) -> Rational {
    int(k) * q(ETA)
}

/// `k eta` rounded up as the code rounds it ([`underflow_slack`]): the upper end of what a
/// charge with slack `k` may record.
fn slack_up(k: usize) -> Rational {
    q(underflow_slack(k))
}

/// `got` is at least the exact charge `want` and within `1e-12` relative of it (plus `1e-300`,
/// far below every charge pinned here and far above the subnormal steps of the terms that the
/// chosen scale makes negligible).
fn assert_pinned(what: &str, got: f64, want: &Rational) {
    let g = q(got);
    assert!(g >= *want, "{what}: {got:e} below {:e}", want.to_f64());
    let tight = want.clone() * q(1.0 + 1e-12) + q(1e-300);
    assert!(g <= tight, "{what}: {got:e} above {:e}", want.to_f64());
}

/// `got` (or `got^2` with `squared`) is at least the charge `lo` (the documented slacks `k eta`)
/// and at most the charge `hi` (the slacks as [`underflow_slack`] rounds them up) within `1e-12`.
fn assert_between(what: &str, (got, squared): (f64, bool), lo: &Rational, hi: &Rational) {
    let g = if squared { q(got) * q(got) } else { q(got) };
    assert!(g >= *lo, "{what}: {got:e} below {:e}", lo.to_f64());
    let tight = hi.clone() * q(1.0 + 1e-12) + q(1e-300);
    assert!(g <= tight, "{what}: {got:e} above {:e}", hi.to_f64());
}

fn fresh(rows: usize) -> Carried {
    Carried {
        cst: vec![0.0; rows],
        err: vec![0.0; rows],
        terms: 0,
    }
}

/// A network of one layer `W x + b` (no hidden layer), as `LocalNet::new` prepares it.
fn one_layer(w: Array2<f64>, b: Vec<f64>) -> DenseNet {
    let layer = Dense {
        w,
        b,
        act: Activation::Identity,
        nodes: vec![],
        ops: vec![],
        casts: vec![],
        affine: None,
    };
    DenseNet::of_layers(vec![layer], Format::Float64)
}

/// `lane_sums` returns the five row sums the charges read: `sum |Lambda|` (every underflow
/// slack's `lam_mass`) and `sum Lambda^2` (the ball's Gram term) included, whose errors no
/// bound-level test resolves. Dyadic entries with few bits make every product and partial sum
/// exact, so each sum must equal its exact rational value; seven terms cover the four
/// interleaved lanes and the three-term tail.
#[test]
fn lane_sums_are_the_exact_row_sums() {
    let l = [1.25, -0.5, 2.0, -3.75, 0.375, -1.5, 2.5];
    let b = [-0.25, 1.5, 0.75, -2.0, 3.0, 0.5, -1.25];
    let ab: Vec<f64> = b.iter().map(|v: &f64| v.abs() + 0.125).collect();
    let v = [0.5, 2.25, 1.0, 0.125, 4.0, 1.75, 0.625];
    for n in [7, 3] {
        let got = lane_sums(&l[..n], &b[..n], &ab[..n], &v[..n]);
        let sum = |f: &dyn Fn(usize) -> Rational| (0..n).map(f).sum::<Rational>();
        let want = [
            sum(&|k| q(l[k]) * q(b[k])),
            sum(&|k| q(l[k].abs()) * q(ab[k])),
            sum(&|k| q(l[k].abs()) * q(v[k])),
            sum(&|k| q(l[k].abs())),
            sum(&|k| q(l[k]) * q(l[k])),
        ];
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(q(*g), *w, "sum {i} of {n} terms: {g}");
        }
    }
}

/// `substitute_layer` charges the underflow slack `(m + n + 2) eta` (rounded up,
/// `underflow_slack(m + n + 2)`) times `4 (1 + sum |Lambda_r|) + sum_j h_j`. With `W = 0` and
/// `b = 0` the gamma term is subnormal (a few `eta`) and the constant is 0, and with `|Lambda|`
/// and `h` near `2^500` the slack term is a normal number (about `2^-570`): the recorded error
/// is the slack term alone. A smaller index (`m + n - 2`, `m - n + 2`) falls below the charge
/// with `k eta`, a larger one (`m + 2n`, `m n + 2`) above the charge with `underflow_slack(k)`
/// (`n != 2`, so that `m + 2n != m + n + 2`).
#[test]
fn a_substitution_charges_the_underflow_slack() {
    let big = 2f64.powi(500);
    let (m, n) = (5, 3);
    let w = Array2::zeros((m, n));
    let layer = crate::bounds::local::LocalLayer {
        w: &w,
        w_t: w.t().to_owned(),
        abs_w: Array2::zeros((m, n)),
        b: Array1::zeros(m),
        abs_b: Array1::zeros(m),
        row_norms: Vec::new(),
        rounding: None,
    };
    let lam = Array2::from_shape_vec(
        (2, m),
        vec![1.0, -0.5, 0.25, 3.0, -1.5, -0.75, 2.0, 0.0, 0.125, 4.0],
    )
    .unwrap()
        * big;
    let h = Array1::from(vec![0.5, 1.0, 2.0]) * big;
    let mut c = fresh(2);
    substitute_layer(&layer, &lam, &h, &mut c);
    let h_sum: Rational = h.iter().map(|v| q(*v)).sum();
    for r in 0..2 {
        let lam_mass: Rational = lam.row(r).iter().map(|v| q(v.abs())).sum();
        let times = int(4) * (Rational::from(1) + lam_mass) + h_sum.clone();
        let (lo, hi) = (slack(m + n + 2) * &times, slack_up(m + n + 2) * &times);
        assert_between(&format!("row {r}"), (c.err[r], false), &lo, &hi);
    }
}

/// Seven units, four of them unstable (three in the tail past the four lanes): upper lines
/// with dyadic slopes and offsets (valid for the bounds noted), so that every product is exact.
fn units() -> (Vec<UnitRelaxation>, Vec<f64>) {
    let unstable = |lower, slope, offset| UnitRelaxation::Unstable {
        lower,
        slope,
        offset,
    };
    let relax = vec![
        unstable(1.0, 0.75, 0.75), // [-1, 3]
        UnitRelaxation::Active,
        unstable(0.0, 0.25, 0.75), // [-3, 1]
        UnitRelaxation::Inactive,
        unstable(1.0, 0.75, 0.375), // [-0.5, 1.5]
        unstable(0.0, 0.5, 1.0),    // [-2, 2]
        unstable(0.0, 0.25, 0.375), // [-1.5, 0.5]
    ];
    let mag = vec![3.0, 2.0, 3.0, 1.0, 1.5, 2.0, 1.5];
    (relax, mag)
}

/// Rows of `M` with each unstable unit both ways (`M_rj >= 0`: the lower line, `< 0`: the
/// upper one), in the lanes and in the tail.
fn relaxed_rows() -> Array2<f64> {
    Array2::from_shape_vec(
        (3, 7),
        vec![
            1.25, -0.5, -2.5, 0.75, 0.5, -1.5, 3.0, //
            -0.75, 2.0, 1.5, -1.0, -1.25, 0.25, -0.5, //
            2.0, 1.0, -0.25, 0.5, 1.75, -3.0, 0.0,
        ],
    )
    .unwrap()
}

/// The charge `relax_rows` documents for one row, in exact rationals:
/// `gamma_{n+1} sum |M_rj| t_j` over the upper lines (the offsets' products and sum),
/// `u (sum |M_rj| s_j |z_j|max + sum M_rj a_j |z_j|max)` over the upper lines and the lower lines
/// with a fractional slope `a_j` (the rounding of the new coefficients), the floor
/// `(n + 1) eta (1 + sum |z_j|max)`, and the constant's `2u |fl(offsets)|`.
fn relax_charge(
    row: &[f64],
    (relax, slopes): (&[UnitRelaxation], Option<&[f64]>),
    mag: &[f64],
    cst: f64,
) -> Rational {
    let n = row.len();
    let (mut offsets_mag, mut products) = (Rational::new(), Rational::new());
    for (j, (&v, unit)) in row.iter().zip(relax).enumerate() {
        let UnitRelaxation::Unstable {
            lower,
            slope,
            offset,
        } = *unit
        else {
            continue;
        };
        if v < 0.0 {
            offsets_mag += q(-v) * q(offset);
            products += q(-v) * q(slope) * q(mag[j]);
        } else {
            let a = slopes.map_or(lower, |s| s[j]);
            if a != 0.0 && a != 1.0 {
                products += q(v) * q(a) * q(mag[j]);
            }
        }
    }
    let mag_sum: Rational = mag.iter().map(|v| q(*v)).sum();
    gamma(n + 1) * offsets_mag
        + q(UNIT_ROUNDOFF) * products
        + slack(n) * (Rational::from(1) + mag_sum)
        + q(2.0 * UNIT_ROUNDOFF) * q(cst.abs())
}

/// `relax_rows` with searched slopes (the general path) charges the documented rounding
/// exactly: the index of `gamma_{n+1}` on the offsets, and the products `M_rj a_j |z_j|max` of
/// the fractional lower slopes (`a = 0` and `a = 1` are exact and not charged: the slopes here
/// include both) and `|M_rj| s_j |z_j|max` of the upper lines. At unit scale both terms are
/// about `1e-16` and comparable, the floor is subnormal, and the bound-level tests' tolerance
/// (`2^-40`) is far wider than either; here a changed index or product moves the error far
/// past the `1e-12` tolerance.
#[test]
fn a_searched_relaxation_charges_the_documented_rounding() {
    let (relax, mag) = units();
    let m = relaxed_rows();
    let slopes = Array2::from_shape_vec(
        (3, 7),
        vec![
            0.375, 0.5, 0.5, 0.5, 1.0, 0.5, 0.625, //
            0.5, 0.5, 1.0, 0.5, 0.5, 0.875, 0.5, //
            1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25,
        ],
    )
    .unwrap();
    let mut c = fresh(3);
    relax_rows(&m, (&relax, Some(&slopes)), &mag, &mut c);
    for r in 0..3 {
        let (row, s) = (m.row(r).to_vec(), slopes.row(r).to_vec());
        let want = relax_charge(&row, (&relax, Some(&s)), &mag, c.cst[r]);
        assert_pinned(&format!("row {r}"), c.err[r], &want);
    }
}

/// The table path of `relax_rows` (CROWN's slopes, `LineTable::apply`) charges the same
/// documented rounding: `gamma_{n+1}` times the upper lines' `sum |M_rj| t_j` and `u` times
/// their `sum |M_rj| s_j |z_j|max` (the lower slopes are 0 or 1, exact), both summed in the four
/// lanes and the tail. Unit scale as in the general path: a lost, negated or added term (a
/// lower line's `s_j |z_j|max`, a stable unit's `|M_rj|`) moves the error far past the `1e-12`
/// tolerance.
#[test]
fn a_crown_relaxation_charges_the_documented_rounding() {
    let (relax, mag) = units();
    let m = relaxed_rows();
    let mut c = fresh(3);
    relax_rows(&m, (&relax, None), &mag, &mut c);
    for r in 0..3 {
        let row = m.row(r).to_vec();
        let want = relax_charge(&row, (&relax, None), &mag, c.cst[r]);
        assert_pinned(&format!("row {r}"), c.err[r], &want);
    }
    assert!(c.cst.iter().all(|v| *v < 0.0), "an upper line was not used");
}

/// `concretise` charges `gamma_{m+1} |Lambda| |fl(W x0)|` for the product with the centre. With
/// `b = 0` and `Lambda fl(W x0) = 0` exactly (dyadic entries) and `eps = 0`, the bound is minus
/// the recorded error, which is that term plus `|Lambda| (gamma_n |W| |x0|)` (the centre's own
/// rounding, a fixed share) and a subnormal floor; `gamma_m` or `gamma_{m-1}` instead moves it by
/// more than a tenth.
#[test]
fn concretising_charges_the_centre_product_rounding() {
    let (m, n) = (3, 2);
    let w = Array2::from_shape_vec((m, n), vec![1.0, 0.5, 0.5, -1.0, -0.75, 2.0]).unwrap();
    let x0 = [1.0, 1.0];
    let dense = one_layer(w.clone(), vec![0.0; m]);
    let net = LocalNet::new(&dense, None, None).unwrap();
    let region = Region::new(InputSet::Ball { x0: &x0, eps: 0.0 }, n).unwrap();
    // W x0 = (1.5, -0.5, 1.25): both rows are orthogonal to it
    let lam = Array2::from_shape_vec((2, m), vec![1.0, 5.5, 1.0, -2.0, -11.0, -2.0]).unwrap();
    let got = concretise(&net, &lam, fresh(2), &region).0;
    for r in 0..2 {
        let mut want = Rational::new();
        for i in 0..m {
            let lam_i = q(lam[[r, i]].abs());
            let centre: Rational = (0..n).map(|j| q(w[[i, j]]) * q(x0[j])).sum();
            let centre_mag: Rational = (0..n).map(|j| q(w[[i, j]].abs()) * q(x0[j].abs())).sum();
            want += lam_i.clone() * gamma(m + 1) * centre.abs();
            want += lam_i.clone() * (gamma(n) * centre_mag + slack(n));
            want += lam_i * int(4) * slack(m + n + 2);
        }
        want += int(4) * slack(m + n + 2);
        assert_pinned(&format!("row {r}"), -got[r], &want);
    }
}

/// `concretise` charges the underflow slack `(m + n + 2) eta` (rounded up,
/// `underflow_slack(m + n + 2)`) times `4 (1 + sum |Lambda_r|)`. At the centre `x0 = 0` with
/// `b = 0` and `eps = 0`, the bound is minus the recorded error, which is that term plus the
/// centre's `|Lambda| n eta` (`fl(W x0)`'s underflow, a fixed share, which rounds up to
/// `(n + 4) eta`); with `|Lambda|` near `2^500` both are normal numbers (about `2^-570`). A
/// smaller index (`m + n - 2`, `m - n + 2`) falls below the charge with `k eta`, a larger one
/// (`m + 2n`, `m n + 2`) above the charge with `underflow_slack(k)` (`n != 2`, so that
/// `m + 2n != m + n + 2`).
#[test]
fn concretising_charges_the_underflow_slack() {
    let big = 2f64.powi(500);
    let (m, n) = (3, 3);
    let w = Array2::from_shape_fn((m, n), |(i, j)| [1.0, 0.5, -0.75][(i + 2 * j) % 3]);
    let x0 = [0.0; 3];
    let dense = one_layer(w, vec![0.0; m]);
    let net = LocalNet::new(&dense, None, None).unwrap();
    let region = Region::new(InputSet::Ball { x0: &x0, eps: 0.0 }, n).unwrap();
    let lam = Array2::from_shape_vec((2, m), vec![1.0, -5.5, 0.25, 0.0, 3.0, -1.0]).unwrap() * big;
    let bounds = concretise(&net, &lam, fresh(2), &region).0;
    for (r, (row, &got)) in lam.rows().into_iter().zip(&bounds).enumerate() {
        let lam_mass: Rational = row.iter().map(|v| q(v.abs())).sum();
        let charge = |slack: &dyn Fn(usize) -> Rational, centre: Rational| {
            lam_mass.clone() * centre
                + int(4) * slack(m + n + 2) * (Rational::from(1) + lam_mass.clone())
        };
        // the centre's error at x0 = 0: n eta, and as rounded up its slack plus the zero gamma
        // term's rounding (the product and the sum each step up by one eta)
        let lo = charge(&slack, slack(n));
        let hi = charge(&slack_up, slack_up(n) + int(2) * q(ETA));
        assert_between(&format!("row {r}"), (-got, false), &lo, &hi);
    }
}

/// `ball_spread`'s Gram term: `||M_r||^2` is charged
/// `2 (gamma_n + 2 gamma_{2m+1}) ||W_1||_F^2 ||Lambda_r||^2`. With two equal rows of `W_1` and
/// `Lambda_r` their difference's multiples, `Lambda_r fl(W_1 W_1^T) = 0` exactly, so the spread
/// (`reach = 1`) is the square root of the charge plus a subnormal slack; another index of the
/// second gamma (`2m - 1`, `2m`, `m + 3`, `2/m + 1`; `m = 3` so that `2m + 1 != m + 3`) moves the
/// squared spread by a tenth or more.
#[test]
fn a_ball_spread_charges_the_gram_rounding() {
    let (m, n) = (3, 2);
    let w = Array2::from_shape_vec((m, n), vec![1.0, 0.5, 1.0, 0.5, 0.5, -1.0]).unwrap();
    let dense = one_layer(w.clone(), vec![0.0; m]);
    let net = LocalNet::new(&dense, None, None).unwrap();
    let lam = Array2::from_shape_vec((2, m), vec![1.0, -1.0, 0.0, -0.75, 0.75, 0.0]).unwrap();
    let squares: Vec<f64> = lam.rows().into_iter().map(|r| r.dot(&r)).collect();
    let sums: Vec<f64> = (lam.rows().into_iter())
        .map(|r| r.iter().map(|v| v.abs()).sum())
        .collect();
    let spread = ball_spread(&net, &lam, 1.0, (&squares, &sums));
    let frob2: Rational = w.iter().map(|v| q(*v) * q(*v)).sum();
    for (r, (row, &got)) in lam.rows().into_iter().zip(&spread).enumerate() {
        let lam_sq: Rational = row.iter().map(|v| q(*v) * q(*v)).sum();
        let lam_mass: Rational = row.iter().map(|v| q(v.abs())).sum();
        let g_quad = int(2) * (gamma(n) + int(2) * gamma(2 * m + 1));
        let want = g_quad * frob2.clone() * lam_sq
            + int(4) * slack(m + n + 2) * (Rational::from(1) + lam_mass.clone() * lam_mass);
        assert_between(&format!("row {r}"), (got, true), &want, &want);
    }
}

/// `ball_spread`'s underflow slack: `||M_r||^2` is charged `(m + n + 2) eta` (rounded up,
/// `underflow_slack(m + n + 2)`) times `4 (1 + (sum |Lambda_r|)^2)`. With `W_1 = 0` the Gram
/// term vanishes and with `|Lambda|` near `2^500` the slack term is a normal number (about
/// `2^-66`): the squared spread (`reach = 1`) is that term alone. A smaller index (`m + n - 2`,
/// `m - n + 2`) falls below the charge with `k eta`, a larger one (`m + 2n`, `m n + 2`) above
/// the charge with `underflow_slack(k)` (`n != 2`, so that `m + 2n != m + n + 2`).
#[test]
fn a_ball_spread_charges_the_underflow_slack() {
    let big = 2f64.powi(500);
    let (m, n) = (3, 3);
    let dense = one_layer(Array2::zeros((m, n)), vec![0.0; m]);
    let net = LocalNet::new(&dense, None, None).unwrap();
    let lam = Array2::from_shape_vec((2, m), vec![1.0, -0.5, 0.25, 0.0, 3.0, -1.0]).unwrap() * big;
    let squares: Vec<f64> = lam.rows().into_iter().map(|r| r.dot(&r)).collect();
    let sums: Vec<f64> = (lam.rows().into_iter())
        .map(|r| r.iter().map(|v| v.abs()).sum())
        .collect();
    let spread = ball_spread(&net, &lam, 1.0, (&squares, &sums));
    for (r, (row, &got)) in lam.rows().into_iter().zip(&spread).enumerate() {
        let lam_mass: Rational = row.iter().map(|v| q(v.abs())).sum();
        let times = int(4) * (Rational::from(1) + lam_mass.clone() * lam_mass);
        let (lo, hi) = (slack(m + n + 2) * &times, slack_up(m + n + 2) * &times);
        assert_between(&format!("row {r}"), (got, true), &lo, &hi);
    }
}
