//! The paper's scalar quantities, each a small pure function rounded toward the safe side.
//!
//! Notation follows the paper (sec. 3.2 "Floating-Point Error", sec. 4 "Sound Conditions for
//! Absence of Overflow", sec. 5 "Bounding Deviation", sec. 6 "Robustness Certification", and the
//! Appendix "Flush-to-Zero Execution"). Format constants are computed with rug (`Round::Up`);
//! the per-instance steps use the `f64` + `next_up` arithmetic of [`crate::arith::sound`].

use rug::float::Round;
use rug::ops::{AddAssignRound, MulAssignRound, PowAssignRound, SubAssignRound};
use rug::Float;

use crate::arith::format::Format;
use crate::arith::sound::{add_up, mul_up};

/// Working precision of the rug computations of format constants (bits).
pub(super) const PREC: u32 = 128;

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
    gamma_n_float(format, n).to_f64_round(Round::Up)
}

pub(super) fn gamma_n_float(format: Format, n: u64) -> Float {
    let mut g = one_plus_u_pow_up(format, n);
    g.sub_assign_round(1, Round::Up);
    g
}

/// The absolute per-operation error constant as a rug `Float`: `a_mul = u * lambda`, or
/// `lambda` under flush-to-zero (Appendix, Table "ftz").
pub(super) fn abs_unit(format: Format, ftz: bool) -> Float {
    let e = if ftz {
        format.emin()
    } else {
        format.a_mul_exponent()
    };
    Float::with_val(PREC, Float::i_exp(1, e))
}

/// `2^-p` as a rug `Float`.
fn unit_roundoff(format: Format) -> Float {
    Float::with_val(PREC, Float::i_exp(1, -(format.precision() as i32)))
}

/// `(1 + g) * count * unit`, rounded up.
fn one_plus_times(g: &Float, count: u64, unit: &Float) -> Float {
    let mut t = g.clone();
    t.add_assign_round(1, Round::Up);
    let mut c = Float::with_val(PREC, 0);
    c.add_assign_round(count as f64, Round::Up);
    t.mul_assign_round(&c, Round::Up);
    t.mul_assign_round(unit, Round::Up);
    t
}

/// `a_acc(n)`: the absolute error of `n` products and one bias summed in `format` in any order,
/// rounded up (sec. 3.2 "Floating-Point Error", extended to the bias inside the sum; see
/// docs/soundness.md "The execution model"). Under gradual underflow only the `n` products (or
/// the FMAs that replace them) have an absolute error `a_mul`, and it passes through at most `n`
/// roundings: `(1 + gamma_n) n a_mul`, the paper's `a_dot(n)`. Under flush-to-zero (Appendix)
/// every one of the `n` multiplications and `n` additions (the bias addition included) may flush:
/// `(1 + gamma_n) 2n lambda`.
pub fn a_acc(format: Format, ftz: bool, n: u64) -> f64 {
    a_acc_float(format, ftz, n).to_f64_round(Round::Up)
}

fn a_acc_float(format: Format, ftz: bool, n: u64) -> Float {
    let count = if ftz { 2 * n } else { n };
    one_plus_times(&gamma_n_float(format, n), count, &abs_unit(format, ftz))
}

/// `a_dot_fwd(n) = (1 + gamma_{n-1}) n a_mul`, rounded up (sec. 4, Lemma "Forward error for FP
/// dot products"): the absolute part of a bound on every value a length-`n` accumulation forms
/// before its last rounding. Under flush-to-zero this returns [`a_acc`], which dominates the
/// table's `(1 + gamma_{n-1}) n lambda` and also covers the additions that may flush.
pub fn a_dot_fwd(format: Format, ftz: bool, n: u64) -> f64 {
    if ftz {
        a_acc(format, true, n)
    } else {
        one_plus_times(
            &gamma_n_float(format, n.saturating_sub(1)),
            n,
            &abs_unit(format, false),
        )
        .to_f64_round(Round::Up)
    }
}

/// The error of one layer output in the execution model (docs/soundness.md "The execution
/// model"): for every output `i` and computed input `z`,
/// `|y_hat_i - (w_i . z + b_i)| <= rel_w (|w_i| . |z|) + rel_b |b_i| + abs`.
/// All three are upper bounds (rug, rounded up).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerError {
    /// Relative coefficient of `|w_i| . |z|` (the paper's `kappa_n` for one format).
    pub rel_w: Float,
    /// Relative coefficient of `|b_i|` (the paper's `u`, now `gamma_n`: the bias sits anywhere).
    pub rel_b: Float,
    /// Absolute term per output (the paper's `(1 + u) a_dot(n)`).
    pub abs: Float,
    /// Whether the value already contains the bias (false for a `MatMul`'s products alone: a
    /// rounding then scales `|w . z|` but not `|b|`).
    pub bias_included: bool,
}

impl LayerError {
    /// Accumulation of `n` products and the bias in `acc`, in any order and association, with
    /// or without FMA, the bias at any position: `rel_w = gamma_{n+1}` (a product's own rounding
    /// and at most `n` additions on its way to the result; `gamma_{n+1} = kappa_n`),
    /// `rel_b = gamma_n` (at most `n` additions), `abs = a_acc(n)`.
    pub fn accumulation(acc: Format, ftz: bool, n: u64) -> LayerError {
        LayerError {
            rel_w: gamma_n_float(acc, n + 1),
            rel_b: gamma_n_float(acc, n),
            abs: a_acc_float(acc, ftz, n),
            bias_included: true,
        }
    }

    /// The error after one more rounding of the output to `to` (the storage format after a
    /// wider accumulation, or a narrowing `Cast`): with `RN(v) = v (1 + d) + e`, `|d| <= u`,
    /// `|e| <= a_mul` (`lambda` under flush-to-zero) and `|v| <= |y| + err`,
    /// `rel' = rel + u (1 + rel)` for both coefficients and `abs' = (1 + u) abs + a_mul`.
    pub fn then_rounded(&self, to: Format, ftz: bool) -> LayerError {
        self.then_operation(to, abs_unit(to, ftz))
    }

    /// The products alone summed in `acc` (a separate `MatMul`, its bias added by a later `Add`):
    /// `rel_w = gamma_n` (a product's rounding and at most `n - 1` additions), no bias term, and
    /// `abs = a_acc(n)` (which dominates the `n` products' and `n - 1` additions' absolute terms).
    pub fn products(acc: Format, ftz: bool, n: u64) -> LayerError {
        LayerError {
            rel_w: gamma_n_float(acc, n),
            rel_b: Float::with_val(PREC, 0),
            abs: a_acc_float(acc, ftz, n),
            bias_included: false,
        }
    }

    /// The bias added in format `to` to the (already rounded) products: `fl(v + b)` with
    /// `|v| <= |w . z| + err`, one rounding: `rel_w' = rel_w + u (1 + rel_w)`, `rel_b' = u`,
    /// `abs' = (1 + u) abs` plus `lambda` under flush-to-zero (an addition is exact in the
    /// subnormal range otherwise).
    pub fn then_bias_added(&self, to: Format, ftz: bool) -> LayerError {
        debug_assert!(!self.bias_included, "the bias is added once");
        let unit = if ftz {
            abs_unit(to, true)
        } else {
            Float::with_val(PREC, 0)
        };
        let with_bias = LayerError {
            bias_included: true,
            ..self.clone()
        };
        with_bias.then_operation(to, unit)
    }

    /// One more correctly rounded operation in `to` on the layer output, with absolute error at
    /// most `unit`: `rel' = rel + u (1 + rel)`, `abs' = (1 + u) abs + unit` (`rel_b` stays 0 while
    /// the bias is not in the value).
    fn then_operation(&self, to: Format, unit: Float) -> LayerError {
        self.then_relative(&unit_roundoff(to), &unit)
    }

    /// A further step whose result is within `rho` relative of its exact input plus `unit`
    /// absolute (for one rounding, `rho = u`): `rel' = rel + rho (1 + rel)`,
    /// `abs' = (1 + rho) abs + unit`.
    pub(super) fn then_relative(&self, rho: &Float, unit: &Float) -> LayerError {
        let u = rho.clone();
        let widen = |rel: &Float| {
            let mut t = rel.clone();
            t.add_assign_round(1, Round::Up);
            t.mul_assign_round(&u, Round::Up);
            t.add_assign_round(rel, Round::Up);
            t
        };
        let mut abs = self.abs.clone();
        abs.mul_assign_round(&one_plus(&u), Round::Up);
        abs.add_assign_round(unit, Round::Up);
        LayerError {
            rel_w: widen(&self.rel_w),
            rel_b: if self.bias_included {
                widen(&self.rel_b)
            } else {
                self.rel_b.clone()
            },
            abs,
            bias_included: self.bias_included,
        }
    }

    /// The componentwise maximum: a bound valid for executions covered by either.
    pub fn max(self, other: LayerError) -> LayerError {
        LayerError {
            rel_w: self.rel_w.max(&other.rel_w),
            rel_b: self.rel_b.max(&other.rel_b),
            abs: self.abs.max(&other.abs),
            bias_included: self.bias_included || other.bias_included,
        }
    }
}

/// `1 + x`, rounded up.
fn one_plus(x: &Float) -> Float {
    let mut t = x.clone();
    t.add_assign_round(1, Round::Up);
    t
}

/// `1 + x` as an upper-bound `f64`.
pub fn one_plus_up(x: &Float) -> f64 {
    one_plus(x).to_f64_round(Round::Up)
}

/// The bound every value an accumulation in `acc` forms before its rounding must stay below
/// (Theorem "Layerwise overflow-freedom", extended in docs/soundness.md "Overflow"): partial sums
/// include the bias, so `(1 + gamma_n)(S + ||b||_inf) + a_dot_fwd(n) < F_max` of `acc`.
pub fn accumulator_check(acc: Format, ftz: bool, n: u64) -> OverflowCheck {
    let g = one_plus_up(&gamma_n_float(acc, n));
    OverflowCheck {
        scale_w: g,
        scale_b: g,
        abs: a_dot_fwd(acc, ftz, n),
        f_max: acc.f_max(),
    }
}

/// The bound before one more operation rounding into `to`, given the error terms so far: the
/// value is within `err` of the exact output, so at most `(1 + rel_w) S + (1 + rel_b) ||b||_inf +
/// abs`, which must stay below `to`'s `F_max` for the result to be finite.
pub fn step_check(err: &LayerError, to: Format) -> OverflowCheck {
    OverflowCheck {
        scale_w: one_plus_up(&err.rel_w),
        scale_b: one_plus_up(&err.rel_b),
        abs: err.abs.to_f64_round(Round::Up),
        f_max: to.f_max(),
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
/// `beta_l(r) = rel_w |||W_l||| r + beta_const`, rounded up. `kappa_abs = rel_w |||W_l|||`
/// (the paper's `kappa |||W_l|||`; [`LayerError::rel_w`]).
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

/// One bound a layer's values must stay below (see [`accumulator_check`], [`step_check`]):
/// `scale_w S + scale_b ||b||_inf + abs < f_max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverflowCheck {
    /// Coefficient of `S = max_i ||w_i||_2 (r + D)` (upper bound).
    pub scale_w: f64,
    /// Coefficient of `||b||_inf` (upper bound).
    pub scale_b: f64,
    /// Absolute term (upper bound).
    pub abs: f64,
    /// `F_max` of the format the value is formed in.
    pub f_max: f64,
}

/// The model-level constants of one layer's overflow checks (sec. 4, "Layer-wide conditions").
#[derive(Clone, Debug, PartialEq)]
pub struct OverflowConstants {
    /// `max_i ||w_{l,i}||_2` (upper bound).
    pub row_l2_max: f64,
    /// `max_i ||w_{l,i}||_inf` (exact).
    pub row_inf_max: f64,
    /// `||b_l||_inf` (exact).
    pub bias_inf: f64,
    /// The smallest `F_max` of the formats products are formed in.
    pub product_f_max: f64,
    /// The sum bounds, for every covered accumulation format and every later rounding.
    pub checks: Vec<OverflowCheck>,
    /// A bound every input value `|z_j| <= r + D` must stay below: the largest value an operand
    /// conversion to nearest keeps finite (infinite without operand conversion).
    pub input_f_max: f64,
}

/// The overflow conditions of Theorem "Layerwise overflow-freedom" at one layer, for an input
/// activation norm bound `r_prev + d_prev`: `M < F_max` for the products, with
/// `M = max_i ||w_i||_inf (r + D)`, and every [`OverflowCheck`] with `S = max_i ||w_i||_2 (r + D)`.
/// All left-hand sides are rounded up, so `true` proves the conditions. A `NaN` anywhere gives
/// `false`.
#[inline]
pub fn overflow_free(c: &OverflowConstants, r_prev: f64, d_prev: f64) -> bool {
    let radius = add_up(r_prev, d_prev);
    let s = mul_up(c.row_l2_max, radius);
    let m = mul_up(c.row_inf_max, radius);
    // written `lhs < f_max` so that a NaN refuses
    let sums_ok = c.checks.iter().all(|k| {
        let lhs = add_up(
            add_up(mul_up(s, k.scale_w), mul_up(c.bias_inf, k.scale_b)),
            k.abs,
        );
        lhs < k.f_max
    });
    m < c.product_f_max && radius < c.input_f_max && sums_ok
}

/// Final-layer pairwise error (Lemma "Final-layer pairwise deviation"):
/// `E = alpha^{ij} D_{L-1} + beta^{ij}(r_{L-1})` with
/// `beta^{ij}(r) = rel_w ||(|W_i| + |W_j|)|| r + beta_const^{ij}`, rounded up.
/// `kappa_abs_pair = rel_w ||(|W_i| + |W_j|)||` (the paper's `kappa_{n_L}`).
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
mod tests;
