//! The paper's scalar quantities, each a small pure function rounded toward the safe side.
//!
//! Notation follows the paper (sec. 3.2 "Floating-Point Error", sec. 4 "Sound Conditions for
//! Absence of Overflow", sec. 5 "Bounding Deviation", sec. 6 "Robustness Certification", and the
//! Appendix "Flush-to-Zero Execution"). Format constants are computed with rug (`Round::Up`);
//! the per-instance steps use the `f64` + `next_up` arithmetic of [`crate::sound`].

use rug::float::Round;
use rug::ops::{AddAssignRound, MulAssignRound, PowAssignRound, SubAssignRound};
use rug::Float;

use crate::format::Format;
use crate::sound::{add_up, mul_up};

/// Working precision of the rug computations of format constants (bits).
const PREC: u32 = 128;

fn float_up_to_f64(x: &Float) -> f64 {
    x.to_f64_round(Round::Up)
}

/// `(1 + u)^n` rounded up, as a rug `Float`.
fn one_plus_u_pow_up(format: Format, n: u64) -> Float {
    let mut base = Float::with_val(PREC, 1);
    // 1 + 2^-p is exact at 128 bits
    base.add_assign_round(
        Float::with_val(PREC, Float::i_exp(1, -(format.precision() as i32))),
        Round::Up,
    );
    let mut n_f = Float::with_val(PREC, 0);
    n_f.add_assign_round(n as f64, Round::Up);
    // integer power, rounded up
    let mut r = base;
    r.pow_assign_round(&n_f, Round::Up);
    r
}

/// `gamma_n = (1 + u)^n - 1`, rounded up (sec. 3.2, eq. "mixed-model-matvec"; the paper uses
/// this exact definition, valid for every `n`, not the `nu/(1-nu)` closed form).
pub fn gamma_n(format: Format, n: u64) -> f64 {
    let mut g = one_plus_u_pow_up(format, n);
    g.sub_assign_round(1, Round::Up);
    float_up_to_f64(&g)
}

fn gamma_n_float(format: Format, n: u64) -> Float {
    let mut g = one_plus_u_pow_up(format, n);
    g.sub_assign_round(1, Round::Up);
    g
}

/// `kappa_n = gamma_n + u (1 + gamma_n)`, rounded up (sec. 5, "Linear recursion"): the matvec
/// factor plus the bias-add rounding of the matvec result.
pub fn kappa(format: Format, n: u64) -> f64 {
    let g = gamma_n_float(format, n);
    let mut t = g.clone();
    t.add_assign_round(1, Round::Up);
    t.mul_assign_round(
        Float::with_val(PREC, Float::i_exp(1, -(format.precision() as i32))),
        Round::Up,
    );
    t.add_assign_round(&g, Round::Up);
    float_up_to_f64(&t)
}

/// The absolute per-operation error constant as a rug `Float`: `a_mul = u * lambda`, or
/// `lambda` under flush-to-zero (Appendix, Table "ftz").
fn abs_unit(format: Format, ftz: bool) -> Float {
    let e = if ftz {
        format.emin()
    } else {
        format.a_mul_exponent()
    };
    Float::with_val(PREC, Float::i_exp(1, e))
}

/// Multiply `(1 + gamma) * count * unit`, rounding up.
fn one_plus_gamma_times(g: Float, count: u64, unit: Float) -> f64 {
    let mut t = g;
    t.add_assign_round(1, Round::Up);
    let mut c = Float::with_val(PREC, 0);
    c.add_assign_round(count as f64, Round::Up);
    t.mul_assign_round(&c, Round::Up);
    t.mul_assign_round(&unit, Round::Up);
    float_up_to_f64(&t)
}

/// `a_dot(n) = (1 + gamma_n) n a_mul`, rounded up (sec. 3.2): the absolute error of a
/// length-`n` dot product under gradual underflow. Under flush-to-zero (Appendix) it is
/// `a_dot^FTZ(n) = (1 + gamma_n)(2n - 1) lambda`: `n` products and `n - 1` additions may flush.
pub fn a_dot(format: Format, ftz: bool, n: u64) -> f64 {
    let count = if ftz { (2 * n).saturating_sub(1) } else { n };
    one_plus_gamma_times(gamma_n_float(format, n), count, abs_unit(format, ftz))
}

/// `a_dot_fwd(n) = (1 + gamma_{n-1}) n a_mul`, rounded up (sec. 4, Lemma "Forward error for FP
/// dot products"). Under flush-to-zero this returns `a_dot^FTZ(n)`, which dominates
/// `(1 + gamma_{n-1}) n lambda` (the Appendix table's "a_mul -> lambda") and also covers the
/// `n - 1` additions that may flush; either reading is then sound.
pub fn a_dot_fwd(format: Format, ftz: bool, n: u64) -> f64 {
    if ftz {
        a_dot(format, true, n)
    } else {
        one_plus_gamma_times(
            gamma_n_float(format, n.saturating_sub(1)),
            n,
            abs_unit(format, false),
        )
    }
}

/// One step of the deterministic radii (sec. 4, "Deterministic radii"):
/// `r_l = ||W_l|| r_{l-1} + ||b_l||` (ReLU and identity are 1-Lipschitz), rounded up.
#[inline]
pub fn radius_step(spectral: f64, r_prev: f64, bias_norm: f64) -> f64 {
    add_up(mul_up(spectral, r_prev), bias_norm)
}

/// One step of the deviation recursion (Corollary "Linear recursion for deviation"):
/// `D_l = alpha_l D_{l-1} + beta_l(r_{l-1})` with
/// `beta_l(r) = kappa |||W_l||| r + beta_const`, rounded up. `kappa_abs = kappa |||W_l|||`.
#[inline]
pub fn deviation_step(
    alpha: f64,
    d_prev: f64,
    kappa_abs: f64,
    r_prev: f64,
    beta_const: f64,
) -> f64 {
    add_up(
        add_up(mul_up(alpha, d_prev), mul_up(kappa_abs, r_prev)),
        beta_const,
    )
}

/// The model-level constants of one layer's overflow check (sec. 4, "Layer-wide conditions").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverflowConstants {
    /// `max_i ||w_{l,i}||_2` (upper bound).
    pub row_l2_max: f64,
    /// `max_i ||w_{l,i}||_inf` (exact).
    pub row_inf_max: f64,
    /// `1 + gamma_{n_l}` (upper bound).
    pub one_plus_gamma: f64,
    /// `a_dot_fwd(n_l)` (upper bound).
    pub a_dot_fwd: f64,
    /// `||b_l||_inf` (exact).
    pub bias_inf: f64,
    /// `F_max` of the format.
    pub f_max: f64,
}

/// The overflow conditions of Theorem "Layerwise overflow-freedom" at one layer, for an input
/// activation norm bound `r_prev + d_prev`:
/// `S (1 + gamma_n) + a_dot_fwd(n) + ||b||_inf < F_max` and `M < F_max`, with
/// `S = max_i ||w_i||_2 (r + D)` and `M = max_i ||w_i||_inf (r + D)`. All left-hand sides are
/// rounded up, so `true` proves the condition. A `NaN` anywhere gives `false`.
#[inline]
pub fn overflow_free(c: &OverflowConstants, r_prev: f64, d_prev: f64) -> bool {
    let radius = add_up(r_prev, d_prev);
    let s = mul_up(c.row_l2_max, radius);
    let m = mul_up(c.row_inf_max, radius);
    let lhs = add_up(add_up(mul_up(s, c.one_plus_gamma), c.a_dot_fwd), c.bias_inf);
    lhs < c.f_max && m < c.f_max
}

/// Final-layer pairwise error (Lemma "Final-layer pairwise deviation"):
/// `E = alpha^{ij} D_{L-1} + beta^{ij}(r_{L-1})` with
/// `beta^{ij}(r) = kappa ||(|W_i| + |W_j|)|| r + beta_const^{ij}`, rounded up.
/// `kappa_abs_pair = kappa_{n_L} ||(|W_i| + |W_j|)||`.
#[inline]
pub fn final_pair_bounds(
    alpha_pair: f64,
    d: f64,
    kappa_abs_pair: f64,
    r: f64,
    beta_const_pair: f64,
) -> f64 {
    add_up(
        add_up(mul_up(alpha_pair, d), mul_up(kappa_abs_pair, r)),
        beta_const_pair,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Rational;

    fn exact(x: f64) -> Rational {
        Rational::from_f64(x).unwrap()
    }

    fn u(format: Format) -> Rational {
        Rational::from((1, 1u64)) >> format.precision()
    }

    fn gamma_exact(format: Format, n: u32) -> Rational {
        let base = Rational::from(1) + u(format);
        let mut p = Rational::from(1);
        for _ in 0..n {
            p *= &base;
        }
        p - 1
    }

    #[test]
    fn gamma_is_tight_upper_bound() {
        for format in Format::ALL {
            for n in [1u32, 2, 10, 128, 784] {
                let g = gamma_n(format, n as u64);
                let e = gamma_exact(format, n);
                assert!(exact(g) >= e, "{format} n={n}");
                // tight: within a relative 2^-50 of the exact value
                let rel = (exact(g) - &e) / &e;
                assert!(rel < Rational::from((1, 1u64 << 50)), "{format} n={n}");
            }
        }
        // gamma_1 = u exactly
        assert_eq!(gamma_n(Format::Float32, 1), 2f64.powi(-24));
        // superlinear for n u >= 1 is still finite and an upper bound
        let g = gamma_n(Format::Bfloat16, 1024);
        assert!(g.is_finite() && exact(g) >= gamma_exact(Format::Bfloat16, 1024));
    }

    #[test]
    fn kappa_and_a_dot_match_exact_rationals() {
        for format in Format::ALL {
            for n in [1u32, 3, 128, 784] {
                let g = gamma_exact(format, n);
                let k = g.clone() + u(format) * (Rational::from(1) + &g);
                assert!(exact(kappa(format, n as u64)) >= k);
                let lambda = Rational::from((1, 1u64)) >> (-format.emin()) as u32;
                let a_mul = lambda.clone() * u(format);
                let ad = (Rational::from(1) + &g) * n * &a_mul;
                let got = exact(a_dot(format, false, n as u64));
                assert!(got >= ad, "{format} {n}");
                if format != Format::Float64 {
                    assert!((got - &ad) / &ad < Rational::from((1, 1u64 << 50)));
                }
                let ftz = (Rational::from(1) + &g) * (2 * n - 1) * &lambda;
                assert!(exact(a_dot(format, true, n as u64)) >= ftz);
                let g1 = gamma_exact(format, n - 1);
                let fwd = (Rational::from(1) + g1) * n * &a_mul;
                assert!(exact(a_dot_fwd(format, false, n as u64)) >= fwd);
                assert!(
                    exact(a_dot_fwd(format, true, n as u64))
                        >= fwd * (Rational::from(1) / u(format))
                );
            }
        }
    }

    #[test]
    fn steps_pin_exact_values() {
        // r = 2 * 3 + 0.5 exactly representable: the upward step is at most one ulp above.
        let r = radius_step(2.0, 3.0, 0.5);
        assert!(r >= 6.5 && r <= 6.5f64.next_up().next_up());
        let d = deviation_step(1.5, 0.25, 0.125, 4.0, 0.0625);
        let e = Rational::from((3, 2)) * Rational::from((1, 4))
            + Rational::from((1, 8)) * 4
            + Rational::from((1, 16));
        assert!(exact(d) >= e && exact(d) - &e < Rational::from((1, 1u64 << 48)));
        let f = final_pair_bounds(0.1, 0.2, 0.3, 0.4, 0.5);
        let e = exact(0.1) * exact(0.2) + exact(0.3) * exact(0.4) + exact(0.5);
        assert!(exact(f) >= e && exact(f) - e < Rational::from((1, 1u64 << 48)));
    }

    #[test]
    fn overflow_check_is_strict_and_nan_safe() {
        let c = OverflowConstants {
            row_l2_max: 1.0,
            row_inf_max: 1.0,
            one_plus_gamma: 1.0,
            a_dot_fwd: 0.0,
            bias_inf: 0.0,
            f_max: Format::Float16.f_max(),
        };
        assert!(overflow_free(&c, 100.0, 0.0));
        assert!(!overflow_free(&c, c.f_max, 0.0));
        assert!(!overflow_free(&c, f64::NAN, 0.0));
        // S (1 + gamma) + a_dot_fwd + ||b||_inf reaching F_max fails
        assert!(!overflow_free(
            &OverflowConstants {
                bias_inf: 65000.0,
                ..c
            },
            504.0,
            0.0
        ));
        assert!(overflow_free(
            &OverflowConstants {
                bias_inf: 65000.0,
                ..c
            },
            503.0,
            0.0
        ));
        // the product bound M alone can fail
        let m_only = OverflowConstants {
            row_l2_max: 0.0,
            row_inf_max: 1e6,
            ..c
        };
        assert!(!overflow_free(&m_only, 1.0, 0.0));
    }
}
