//! Unit tests of the backward substitution: the table path against the general one, and the
//! rounding charges pinned in exact rationals.

use super::*;
use crate::bounds::local::relax::relax_unit;

/// `substitute_layer` charges the documented rounding, pinned in exact rationals: the error
/// it records is at least `gamma_{max(m,n)+1} (|Lambda| (|W| h) + |Lambda| |b|)` plus the
/// constant's `2u |fl(Lambda b)|`, and within `1e-12` relative of it (the float sums'
/// allowances; the underflow slack is below `1e-300` here). A smaller `gamma` index, or a
/// magnitude sum that loses terms, falls below.
#[test]
fn a_substitution_charges_the_documented_rounding() {
    use rug::Rational;
    let q = |v: f64| Rational::from_f64(v).unwrap();
    let gamma = |n: u32| {
        let nu = Rational::from(n) * q(UNIT_ROUNDOFF);
        nu.clone() / (Rational::from(1) - nu)
    };
    // m = 5 rows (four interleaved lanes and a tail), n = 4 inputs
    let w = Array2::from_shape_vec(
        (5, 4),
        vec![
            0.5, -1.25, 2.0, 0.75, -0.5, 1.5, 0.25, -2.0, 1.0, 1.0, -0.125, 0.375, 0.3, -0.6, 0.9,
            0.1, -1.7, 0.2, 0.4, -0.8,
        ],
    )
    .unwrap();
    let b = [0.3, -0.7, 1.1, 0.05, -2.5];
    let layer = crate::bounds::local::LocalLayer {
        w: &w,
        w_t: w.t().to_owned(),
        abs_w: w.mapv(f64::abs),
        b: Array1::from(b.to_vec()),
        abs_b: b.iter().map(|v| v.abs()).collect(),
        row_norms: Vec::new(),
        rounding: None,
    };
    let lam = Array2::from_shape_vec(
        (2, 5),
        vec![1.0, -0.5, 0.25, 3.0, -1.5, 0.75, 2.0, -1.5, 0.1, 4.0],
    )
    .unwrap();
    let h = Array1::from(vec![0.5, 1.0, 2.0, 0.25]);
    let mut c = Carried {
        cst: vec![0.0; 2],
        err: vec![0.0; 2],
        terms: 0,
    };
    substitute_layer(&layer, &lam, &h, &mut c);
    for r in 0..2 {
        let mut mag = Rational::new();
        for k in 0..5 {
            let wh: Rational = (0..4).map(|j| q(w[[k, j]].abs()) * q(h[j])).sum();
            mag += q(lam[[r, k]].abs()) * (wh + q(b[k].abs()));
        }
        let constant = q(2.0 * UNIT_ROUNDOFF) * q(c.cst[r].abs());
        let want = gamma(6) * mag + constant;
        let got = q(c.err[r]);
        assert!(got >= want, "row {r}: {} below {}", c.err[r], want.to_f64());
        let tight = want.clone() * q(1.0 + 1e-12) + q(1e-300);
        assert!(
            got <= tight,
            "row {r}: {} above {}",
            c.err[r],
            want.to_f64()
        );
    }
}

/// `Carried` counts every sum it records: the final error bound's allowance for summing
/// `err` in float64 (`NonnegSum::new(terms)`) depends on the count.
#[test]
fn carried_counts_every_term_it_sums() {
    let mut c = Carried {
        cst: vec![0.0; 2],
        err: vec![0.0; 2],
        terms: 0,
    };
    c.add_constant(&[1.0, -2.0]);
    c.add_error([0.5, 0.25].into_iter());
    c.add_constant(&[3.0, 0.0]);
    assert_eq!(c.terms, 3);
    assert_eq!(c.cst, vec![4.0, -2.0]);
    let two_u = 2.0 * UNIT_ROUNDOFF;
    assert_eq!(c.err[0], two_u * 1.0 + 0.5 + two_u * 4.0);
    assert_eq!(c.err[1], two_u * 2.0 + 0.25 + two_u * 2.0);
}

/// The table path of `relax_rows` (CROWN's slopes) gives the coefficients, constants and
/// error bounds of the general path given the same slopes explicitly.
#[test]
fn line_table_matches_the_general_relaxation() {
    let bounds = [
        (-1.0, 2.0),
        (-3.0, 0.5),
        (0.2, 1.0),
        (-2.0, -0.1),
        (-0.7, 0.7),
        (-1e-3, 4.0),
    ];
    let relax: Vec<UnitRelaxation> = bounds
        .iter()
        .map(|&(l, u)| relax_unit(l, u).unwrap())
        .collect();
    let mag: Vec<f64> = bounds
        .iter()
        .map(|&(l, u): &(f64, f64)| l.abs().max(u.abs()))
        .collect();
    let m = Array2::from_shape_fn((5, relax.len()), |(r, j)| {
        ((r * 7 + j * 3) % 11) as f64 / 3.0 - 1.7
    });
    let crown = Array2::from_shape_fn(m.dim(), |(_, j)| match relax[j] {
        UnitRelaxation::Unstable { lower, .. } => lower,
        _ => 0.0,
    });
    let run = |slopes: Option<&Array2<f64>>| {
        let mut carried = Carried {
            cst: vec![0.0; m.nrows()],
            err: vec![0.0; m.nrows()],
            terms: 0,
        };
        let next = relax_rows(&m, (&relax, slopes), &mag, &mut carried);
        (next, carried.cst, carried.err)
    };
    let (table, general) = (run(None), run(Some(&crown)));
    assert_eq!(table.0, general.0);
    for (a, b) in table
        .1
        .iter()
        .zip(&general.1)
        .chain(table.2.iter().zip(&general.2))
    {
        assert!((a - b).abs() <= 1e-15 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert!(table.1.iter().any(|c| *c != 0.0), "no upper line was used");
    // a given slope outside [0, 1], or NaN, is no lower line: CROWN's is read instead
    let bad = Array2::from_shape_fn(m.dim(), |(r, _)| [1.5, -0.25, f64::NAN, 2.0, -1.0][r]);
    let invalid = run(Some(&bad));
    assert_eq!(invalid.0, general.0);
    assert_eq!((invalid.1, invalid.2), (general.1, general.2));
}

/// beta-CROWN's shift moves a split unit's coefficient against the split's sign by its
/// multiplier (active: down, inactive: up), and leaves it alone for a multiplier that is not
/// positive or not finite, for a unit without a split, or for another layer.
#[test]
fn the_split_shift_moves_only_split_units_against_their_sign() {
    use crate::bounds::local::{Phase, Splits};
    let splits = Splits::none()
        .with(1, 0, Phase::Active)
        .with(1, 1, Phase::Inactive)
        .with(1, 3, Phase::Active)
        .with(0, 2, Phase::Active);
    let mu = vec![
        Array2::from_elem((2, 4), 9.0),
        ndarray::array![[0.5, 0.25, 7.0, -1.0], [f64::NAN, 0.0, 7.0, f64::INFINITY]],
    ];
    let mut lam = ndarray::array![[1.0, -2.0, 3.0, 4.0], [1.0, -2.0, 3.0, 4.0]];
    super::shift_split_units(&mut lam, 1, &mu, &splits);
    assert_eq!(
        lam,
        ndarray::array![[0.5, -1.75, 3.0, 4.0], [1.0, -2.0, 3.0, 4.0]]
    );
    // a layer without multipliers is left alone
    super::shift_split_units(&mut lam, 2, &mu, &splits);
    assert_eq!(lam[[0, 0]], 0.5);
    // the side is checked on the difference: a negative coefficient of an active unit moves
    // further down, a positive one of an inactive unit further up
    let mut neg = ndarray::array![[-1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]];
    super::shift_split_units(&mut neg, 1, &mu, &splits);
    assert_eq!(neg.row(0).to_vec(), vec![-1.5, 2.25, 0.0, 0.0]);
}
