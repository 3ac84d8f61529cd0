//! Directed-rounding scalar arithmetic for bounds.
//!
//! Two layers (DESIGN.md soundness rule 1):
//!
//! * **f64 steps with `next_up`/`next_down`** for everything evaluated per instance or per
//!   matrix entry. IEEE-754 round-to-nearest returns the representable value nearest the exact
//!   result, so the exact result lies strictly between the neighbours of the rounded value:
//!   `next_up(RN(v)) >= v` and `next_down(RN(v)) <= v` for every finite `RN(v)` — including
//!   results in the subnormal range, where the error is at most half the spacing `2^-1074`.
//!   An overflow to `+inf` is itself an upper bound; a `NaN` makes every comparison
//!   `lower > upper` false, so a check never passes on one.
//! * **rug** (`Float` with `Round::Up`, exact `Rational`) for the format constants that involve
//!   powers (`gamma_n`), and in tests as the exact reference for the f64 steps.
//!
//! All "up" functions assume their arguments are themselves upper bounds of nonnegative
//! quantities unless stated otherwise; they are monotone, so composing them bounds the
//! composed expression.

use rug::float::Round;
use rug::{Float, Rational};

/// `a + b` rounded up.
#[inline]
pub fn add_up(a: f64, b: f64) -> f64 {
    if a == 0.0 {
        b
    } else if b == 0.0 {
        a
    } else {
        (a + b).next_up()
    }
}

/// `a + b` rounded down.
#[inline]
pub fn add_down(a: f64, b: f64) -> f64 {
    if a == 0.0 {
        b
    } else if b == 0.0 {
        a
    } else {
        (a + b).next_down()
    }
}

/// `a - b` rounded down.
#[inline]
pub fn sub_down(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        a
    } else {
        (a - b).next_down()
    }
}

/// `a * b` rounded up (any signs; the step is one ulp past the nearest value).
#[inline]
pub fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if a == 0.0 || b == 0.0 {
        // exact zero (or NaN when the other factor is infinite or NaN)
        p
    } else if p == 0.0 {
        // underflowed to zero, signed as the exact product (IEEE 754, 6.3): a positive one lies
        // below the smallest subnormal, a negative one below zero
        if p.is_sign_negative() {
            0.0
        } else {
            f64::from_bits(1)
        }
    } else {
        p.next_up()
    }
}

/// `a / b` rounded up, for `b > 0` (a quotient that underflows to zero steps to the smallest
/// subnormal, an upper bound of any exact value below it).
#[inline]
pub fn div_up(a: f64, b: f64) -> f64 {
    (a / b).next_up()
}

/// `sqrt(a)` rounded up, for `a >= 0` (IEEE square root is correctly rounded).
#[inline]
pub fn sqrt_up(a: f64) -> f64 {
    a.sqrt().next_up()
}

/// Upper bound on the Euclidean norm of a vector of exact `f64` values.
pub fn l2_norm_up(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut s = 0.0;
    for x in v {
        s = add_up(s, mul_up(x, x));
    }
    if s == 0.0 {
        0.0
    } else {
        sqrt_up(s)
    }
}

/// Lower bound on the Euclidean norm of a vector of exact `f64` values (each square and each
/// partial sum rounded down, then a square root rounded down).
pub fn l2_norm_down(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut s = 0.0f64;
    for x in v {
        let sq = (x * x).next_down().max(0.0);
        s = add_down(s, sq).max(0.0);
    }
    s.sqrt().next_down().max(0.0)
}

/// Smallest power of two `>= x`, for finite `x > 0` (used as an exact rescaling factor).
pub fn pow2_ceil(x: f64) -> f64 {
    debug_assert!(x > 0.0 && x.is_finite());
    let bits = x.to_bits();
    if x >= f64::MIN_POSITIVE {
        let exp = (bits >> 52) & 0x7ff;
        let mant = bits & ((1u64 << 52) - 1);
        if mant == 0 {
            x
        } else {
            // exponent field 0x7ff with a zero mantissa is +inf: the overflow case needs no branch
            f64::from_bits((exp + 1) << 52)
        }
    } else {
        // subnormal: next power of two of the integer multiple of 2^-1074
        f64::from_bits(bits.next_power_of_two())
    }
}

/// Convert an exact rational to the nearest `f64` at or above it.
pub fn rational_to_f64_up(q: &Rational) -> f64 {
    Float::with_val_round(53, q, Round::Up)
        .0
        .to_f64_round(Round::Up)
}

/// Convert an exact rational to the nearest `f64` at or below it.
pub fn rational_to_f64_down(q: &Rational) -> f64 {
    Float::with_val_round(53, q, Round::Down)
        .0
        .to_f64_round(Round::Down)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(x: f64) -> Rational {
        Rational::from_f64(x).unwrap()
    }

    fn samples() -> Vec<f64> {
        let mut v = vec![
            1.0,
            0.1,
            1e-300,
            3e-308,
            5e-324,
            1e300,
            2.0f64.powi(-1070),
            0.3,
            7.0,
        ];
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..400 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let e = (s % 200) as i32 - 100;
            v.push((1.0 + (s >> 12) as f64 / (1u64 << 52) as f64) * 2f64.powi(e));
        }
        v
    }

    #[test]
    fn steps_bound_exact_results() {
        let xs = samples();
        for (i, &a) in xs.iter().enumerate() {
            let b = xs[(i * 7 + 3) % xs.len()];
            if !(a * b).is_finite() || !(a / b).is_finite() {
                continue;
            }
            assert!(exact(add_up(a, b)) >= exact(a) + exact(b));
            assert!(exact(add_down(a, b)) <= exact(a) + exact(b));
            assert!(exact(sub_down(a, b)) <= exact(a) - exact(b));
            assert!(exact(mul_up(a, b)) >= exact(a) * exact(b));
            assert!(exact(mul_up(-a, b)) >= -(exact(a) * exact(b)));
            if b > 0.0 {
                assert!(exact(div_up(a, b)) >= exact(a) / exact(b));
            }
            let r = exact(sqrt_up(a));
            assert!(r.clone() * r >= exact(a));
        }
    }

    #[test]
    fn l2_norm_up_bounds_exact_norm() {
        let v: Vec<f64> = samples().into_iter().filter(|x| x.abs() < 1e150).collect();
        let n = l2_norm_up(v.iter().copied());
        let sum: Rational = v.iter().map(|&x| exact(x) * exact(x)).sum();
        assert!(exact(n) * exact(n) >= sum);
        // and it is tight: within 1e-12 relative of the f64 norm
        let approx: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((n - approx) / approx < 1e-12);
    }

    #[test]
    fn l2_norm_down_is_below_exact_norm() {
        let v: Vec<f64> = samples().into_iter().filter(|x| x.abs() < 1e150).collect();
        let n = l2_norm_down(v.iter().copied());
        let sum: Rational = v.iter().map(|&x| exact(x) * exact(x)).sum();
        assert!(exact(n) * exact(n) <= sum);
        assert!(n > 0.0 && l2_norm_up(v.iter().copied()) / n < 1.0 + 1e-12);
    }

    #[test]
    fn pow2_ceil_is_a_power_of_two_at_or_above() {
        for &x in &[1.0, 1.5, 3.0, 4.0, 0.7, 1e-310, 5e-324, 1e300] {
            let p = pow2_ceil(x);
            assert!(p >= x && p / 2.0 < x, "{x}");
            let is_pow2 = if p >= f64::MIN_POSITIVE {
                p.to_bits() & ((1u64 << 52) - 1) == 0
            } else {
                p.to_bits().count_ones() == 1
            };
            assert!(is_pow2, "{x}");
        }
    }

    /// The exact values at the edges: zero factors, products and quotients that underflow.
    #[test]
    fn steps_at_zero_and_underflow_are_pinned() {
        let tiny = f64::from_bits(1);
        // a zero factor gives the exact (signed) zero
        assert_eq!(mul_up(0.0, -1.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(mul_up(-1.0, 0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(mul_up(0.0, 1.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(mul_up(2.0, 0.0).to_bits(), 0.0f64.to_bits());
        assert!(mul_up(0.0, f64::INFINITY).is_nan());
        // underflow: positive products step to the smallest subnormal, negative ones to zero
        assert_eq!(mul_up(1e-200, 1e-200), tiny);
        assert_eq!(mul_up(-1e-200, -1e-200), tiny);
        assert_eq!(mul_up(-1e-200, 1e-200), 0.0);
        assert_eq!(mul_up(1e-200, -1e-200), 0.0);
        assert_eq!(mul_up(3.0, 0.5), 1.5f64.next_up());
        assert_eq!(div_up(1e-300, 1e300), tiny);
        assert_eq!(div_up(0.0, 2.0), tiny);
        assert_eq!(div_up(1.0, 4.0), 0.25f64.next_up());
        assert_eq!(pow2_ceil(f64::MAX), f64::INFINITY);
        assert_eq!(pow2_ceil(1.5), 2.0);
        assert_eq!(pow2_ceil(2f64.powi(1023)), 2f64.powi(1023));
        assert_eq!(pow2_ceil(3.0 * 2f64.powi(1022)), f64::INFINITY);
        assert_eq!(pow2_ceil(3.0 * tiny), 4.0 * tiny);
    }

    #[test]
    fn rational_conversions_are_directed() {
        let q = Rational::from((3, 10));
        assert!(exact(rational_to_f64_up(&q)) >= q);
        assert!(exact(rational_to_f64_down(&q)) <= q);
        assert!(rational_to_f64_up(&q) > rational_to_f64_down(&q));
        let one = Rational::from(1);
        assert_eq!(rational_to_f64_up(&one), 1.0);
        assert_eq!(rational_to_f64_down(&one), 1.0);
    }
}
