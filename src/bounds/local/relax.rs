//! The ReLU relaxations of linear bound propagation and the rounding constants their
//! floating-point evaluation needs (docs/soundness.md "Local bounds").
//!
//! For a hidden unit with pre-activation bounds `l <= z <= u` over the ball, CROWN (Zhang et al.
//! 2018) bounds `h = max(z, 0)` by two lines: `a z <= h` for any `a` in `[0, 1]` (exact: `a` is
//! 0 or 1 here) and `h <= s z + t`. lipfp chooses the slope `s = u / (u - l)` in floating point
//! and then the smallest offset that makes the line valid for *that* `s`: a line lies above the
//! convex `max(z, 0)` on `[l, u]` exactly when it does at both ends, so
//! `t = max(-s l, u - s u)`, rounded up, is valid whatever rounding `s` carries.

use crate::arith::sound::{add_up, div_up, mul_up, sub_down};

/// The unit roundoff of float64, `u = 2^-53`.
pub const UNIT_ROUNDOFF: f64 = 1.0 / 9_007_199_254_740_992.0;

/// An upper bound on `gamma_n = n u / (1 - n u)` (Higham, *Accuracy and Stability of Numerical
/// Algorithms*, Lemma 3.1): the relative error bound of a float64 dot product of length `n`,
/// in any summation order, with or without fused multiply-adds, before underflow.
/// Infinite when `n u >= 1/2`.
pub fn gamma_up(n: usize) -> f64 {
    // n u is exact for n < 2^53 (an integer times a power of two)
    let nu = n as f64 * UNIT_ROUNDOFF;
    if nu >= 0.5 {
        return f64::INFINITY;
    }
    div_up(nu, sub_down(1.0, nu))
}

/// How a hidden unit enters the backward substitution, from its pre-activation bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnitRelaxation {
    /// `u <= 0`: the unit outputs 0 over the ball.
    Inactive,
    /// `l >= 0`: the unit is the identity over the ball.
    Active,
    /// `l < 0 < u`: `lower z <= h` (`lower` is 0 or 1) and `h <= slope z + offset`.
    Unstable {
        /// Slope of the lower line, 0 or 1 (CROWN's adaptive choice: 1 when `u > -l`).
        lower: f64,
        /// Slope of the upper line, `u / (u - l)` in floating point.
        slope: f64,
        /// Offset of the upper line, `max(-slope l, u - slope u)` rounded up.
        offset: f64,
    },
}

/// The relaxation of a unit with pre-activation bounds `l <= z <= u` (both finite, `l <= u`).
/// `None` when a bound is not finite: the backward substitution then has no valid line.
pub fn relax_unit(l: f64, u: f64) -> Option<UnitRelaxation> {
    if !(l.is_finite() && u.is_finite()) {
        return None;
    }
    if u <= 0.0 {
        return Some(UnitRelaxation::Inactive);
    }
    if l >= 0.0 {
        return Some(UnitRelaxation::Active);
    }
    let slope = (u / (u - l)).clamp(0.0, 1.0);
    let offset = upper_line_offset(slope, l, u);
    let lower = if u > -l { 1.0 } else { 0.0 };
    Some(UnitRelaxation::Unstable {
        lower,
        slope,
        offset,
    })
}

/// The offset `t >= max(-s l, u - s u)` (rounded up) that makes `h <= s z + t` hold at both
/// ends of `[l, u]` (`l < 0 < u`, `0 <= s <= 1`), hence on the whole interval.
pub fn upper_line_offset(s: f64, l: f64, u: f64) -> f64 {
    let at_lower = mul_up(s, -l);
    let at_upper = add_up(u, mul_up(-s, u));
    at_lower.max(at_upper).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Rational;

    fn q(x: f64) -> Rational {
        Rational::from_f64(x).unwrap()
    }

    /// The upper line's offset is `max(-s l, u - s u)` rounded up, and within a few ulps of it:
    /// at CROWN's slope `s = u / (u - l)` both ends give the same value, elsewhere one dominates.
    #[test]
    fn the_upper_offset_is_the_larger_end_value() {
        for (s, l, u) in [
            (0.5, -1.0, 1.0),
            (0.25, -3.0, 1.0),
            (0.9, -0.1, 2.0),
            (1.0, -2.0, 0.5),
        ] {
            let exact = (-q(s) * q(l)).max(q(u) - q(s) * q(u));
            let t = upper_line_offset(s, l, u);
            assert!(q(t) >= exact, "{s} {l} {u}");
            assert!(
                q(t) <= exact * q(1.0 + 8.0 * f64::EPSILON),
                "{s} {l} {u}: {t}"
            );
        }
    }

    #[test]
    fn gamma_bounds_the_exact_value() {
        for n in [1usize, 2, 3, 784, 1 << 20, (1 << 40) + 7] {
            let nu = Rational::from(n) * q(UNIT_ROUNDOFF);
            let exact = nu.clone() / (Rational::from(1) - nu);
            let got = gamma_up(n);
            assert!(q(got) >= exact, "n = {n}");
            assert!(q(got) <= exact * q(1.0 + 1e-15), "n = {n} loose");
        }
        assert_eq!(gamma_up(1 << 52), f64::INFINITY);
    }

    /// The upper line lies above `max(z, 0)` at both ends (hence everywhere on `[l, u]`), in
    /// exact rationals, and the offset is the smallest such up to rounding (a few ulps of the
    /// larger end, from `u - s u`).
    #[test]
    fn upper_lines_are_valid_in_exact_rationals() {
        let cases = [
            (-1.0, 1.0),
            (-0.3, 2.7),
            (-5.5, 1e-3),
            (-1e-300, 1e300),
            (-3.0, 0.1),
            (-1e-3, 7.0),
            (-0.1, 0.1 + f64::EPSILON),
        ];
        for (l, u) in cases {
            let Some(UnitRelaxation::Unstable {
                lower,
                slope,
                offset,
            }) = relax_unit(l, u)
            else {
                panic!("({l}, {u}) is unstable");
            };
            assert!(lower == 0.0 || lower == 1.0);
            assert_eq!(lower == 1.0, u > -l);
            let line = |z: f64| q(slope) * q(z) + q(offset);
            assert!(line(l) >= 0, "({l}, {u}) at l");
            assert!(line(u) >= q(u), "({l}, {u}) at u");
            let needed = (-q(slope) * q(l)).max(q(u) - q(slope) * q(u));
            let rounding = q(u.max(-l) * 1e-15) + q(1e-300);
            assert!(q(offset) <= needed + rounding, "({l}, {u})");
        }
    }

    #[test]
    fn stable_units_and_non_finite_bounds() {
        assert_eq!(relax_unit(-2.0, 0.0), Some(UnitRelaxation::Inactive));
        assert_eq!(relax_unit(0.0, 3.0), Some(UnitRelaxation::Active));
        assert_eq!(relax_unit(1.0, 3.0), Some(UnitRelaxation::Active));
        assert_eq!(relax_unit(f64::NEG_INFINITY, 3.0), None);
        assert_eq!(relax_unit(-1.0, f64::NAN), None);
    }
}
