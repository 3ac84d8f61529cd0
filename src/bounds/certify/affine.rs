//! Bounds of an elementwise affine step `y = a * x + c` (docs/soundness.md "Affine steps").
//!
//! For every feature the exact map is tracked op by op as magnitude bounds `|a| <= A`,
//! `|c| <= C`, and the runtime's rounding error as `|y_hat - (a x_hat + c)| <= e |x_hat| + f`
//! for the computed input `x_hat`. Each op rounds to the storage format, possibly after
//! computing in the next wider one: relative error `rho = (1 + u)(1 + u_w) - 1` per op
//! ([`op_rounding`]) and an absolute `lambda` (subnormal results, flush-to-zero). With
//! `M = A |x_hat| + C` bounding the exact value before the op:
//!
//! * `+ k`: `e' = (1+rho) e + rho A'`, `f' = (1+rho) f + rho C' + lambda`;
//! * `* k`: `e' = (1+rho)|k| e + rho A'`, `f' = (1+rho)|k| f + rho C' + lambda`;
//! * `/ k` (also as a multiplication by the rounded reciprocal): `e' = (1+rho)^2 e/|k| +
//!   ((1+rho)^2 - 1) A' + l (A + e)`, likewise `f'`, plus `lambda`, with `l = (1+rho)^2 lambda`
//!   for a reciprocal below the normal range;
//! * BatchNormalization, `a_bn = scale / sqrt(var + eps)`, computed as written or as
//!   `x * a_hat + b_hat` with `a_hat`, `b_hat` precomputed (onnxruntime), FMA or not:
//!   `e' = (1+g)|a_bn| e + g |a_bn| A + l (A + e)`, `f' = (1+g)|a_bn| f + g(|a_bn| C + |B| +
//!   |a_bn||mean|) + 4 lambda + l (C + f + |mean|)` with `g = (1+rho)^8 - 1` and
//!   `l = (1+g) lambda` for a precomputed slope below the normal range;
//!
//! where `A'`, `C'` are the bounds after the op. The step's layer constants follow as for a
//! dense layer with `W = diag(a)`: `||W|| = |||W||| = max A`, `rel_w |||W||| = max e`,
//! `beta = ||f||_2`, `||b|| = ||C||_2`.

use crate::arith::format::Format;
use crate::arith::sound::{add_up, div_up, l2_norm_up, mul_up};
use crate::onnx::model::batch_norm_scale;
use crate::onnx::model::{AffineStep, ElementOp};

use super::quantities::{OverflowCheck, OverflowConstants};

/// The relative error of one elementwise op that rounds to `storage`, possibly after computing
/// in the next wider format: `(1 + u)(1 + u_w) - 1`, rounded up (`u_w = 0` for float64).
pub fn op_rounding(storage: Format) -> f64 {
    let u = storage.unit_roundoff();
    let uw = storage.next_wider().map_or(0.0, Format::unit_roundoff);
    add_up(add_up(u, uw), mul_up(u, uw))
}

/// `(1 + rho)^k - 1`, rounded up.
fn gamma(rho: f64, k: u32) -> f64 {
    let mut p = 1.0;
    for _ in 0..k {
        p = mul_up(p, add_up(1.0, rho));
    }
    (p - 1.0).next_up()
}

/// One feature's bounds while the ops are applied.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Feature {
    /// `|a| <= a_max`.
    a_max: f64,
    /// `|c| <= c_max`.
    c_max: f64,
    /// Error coefficient of `|x_hat|`.
    e: f64,
    /// Constant error term.
    f: f64,
}

impl Feature {
    /// The feature after scaling its map by `k` (`|k| <= k_abs`) with relative error `g` per
    /// unit: `e' = (1+g) k e + g A'`, `f' = (1+g) k f + g C' + abs`.
    fn scaled(self, k_abs: f64, g: f64, abs: f64) -> Feature {
        let a_max = mul_up(self.a_max, k_abs);
        let c_max = mul_up(self.c_max, k_abs);
        let one_g = add_up(1.0, g);
        Feature {
            a_max,
            c_max,
            e: add_up(mul_up(mul_up(one_g, k_abs), self.e), mul_up(g, a_max)),
            f: add_up(
                add_up(mul_up(mul_up(one_g, k_abs), self.f), mul_up(g, c_max)),
                abs,
            ),
        }
    }
}

/// The bounds of one feature `i` through every op of `step`, and per op the bound on the value
/// before its rounding (`(A' + e') |x_hat| + C' + f'`) as `(coefficient, constant)`.
fn feature_bounds(
    step: &AffineStep,
    i: usize,
    rho: f64,
    lambda: f64,
) -> (Feature, Vec<(f64, f64)>) {
    let mut ft = Feature {
        a_max: 1.0,
        ..Feature::default()
    };
    let mut peaks = Vec::with_capacity(step.ops.len());
    for op in &step.ops {
        ft = match op {
            ElementOp::Neg => ft,
            ElementOp::Add(k) => {
                let c_max = add_up(ft.c_max, k[i].abs());
                let one_rho = add_up(1.0, rho);
                Feature {
                    a_max: ft.a_max,
                    c_max,
                    e: add_up(mul_up(one_rho, ft.e), mul_up(rho, ft.a_max)),
                    f: add_up(add_up(mul_up(one_rho, ft.f), mul_up(rho, c_max)), lambda),
                }
            }
            ElementOp::Mul(k) => ft.scaled(k[i].abs(), rho, lambda),
            ElementOp::Div(k) => {
                let g = gamma(rho, 2);
                let mut next = ft.scaled(div_up(1.0, k[i].abs()), g, lambda);
                // a rounded reciprocal below the normal range errs by up to lambda absolutely
                let slope_abs = mul_up(lambda, add_up(1.0, g));
                next.e = add_up(next.e, mul_up(slope_abs, add_up(ft.a_max, ft.e)));
                next.f = add_up(next.f, mul_up(slope_abs, add_up(ft.c_max, ft.f)));
                next
            }
            ElementOp::BatchNorm {
                scale,
                bias,
                mean,
                var,
                epsilon,
            } => {
                let a_bn = batch_norm_scale(scale[i], var[i], *epsilon);
                let g = gamma(rho, 8);
                // as written, (x - mean) / sqrt(var + eps) may exceed the output: its bound too
                let inv_root = batch_norm_scale(1.0, var[i], *epsilon);
                let k = mul_up(a_bn.max(inv_root).max(1.0), add_up(1.0, g));
                peaks.push((
                    mul_up(add_up(ft.a_max, ft.e), k),
                    add_up(
                        mul_up(add_up(add_up(ft.c_max, ft.f), mean[i].abs()), k),
                        bias[i].abs(),
                    ),
                ));
                let mut next = ft.scaled(a_bn, g, mul_up(4.0, lambda));
                let shift = add_up(bias[i].abs(), mul_up(a_bn, mean[i].abs()));
                next.c_max = add_up(next.c_max, shift);
                next.f = add_up(next.f, mul_up(g, shift));
                // a precomputed slope a_hat may fall below the normal range: an absolute error
                // lambda on it, times |t| <= (A + e)|x_hat| + C + f and times |mean|
                let slope_abs = mul_up(lambda, add_up(1.0, g));
                next.e = add_up(next.e, mul_up(slope_abs, add_up(ft.a_max, ft.e)));
                let t_const = add_up(add_up(ft.c_max, ft.f), mean[i].abs());
                next.f = add_up(next.f, mul_up(slope_abs, t_const));
                next
            }
        };
        peaks.push((add_up(ft.a_max, ft.e), add_up(ft.c_max, ft.f)));
    }
    (ft, peaks)
}

/// The model-level constants of an affine step, as for a dense layer with `W = diag(a)`.
#[derive(Clone, Debug, PartialEq)]
pub struct StepBounds {
    /// `max_i A_i >= ||diag(a)||_2 = |||diag(a)|||_2`.
    pub scale_max: f64,
    /// `max_i e_i`: the coefficient of `||x_hat||_2` in the step's error.
    pub error_rel: f64,
    /// `||f||_2`.
    pub error_const: f64,
    /// `||C||_2 >= ||c||_2`.
    pub shift_l2: f64,
    /// Overflow checks: every op's value before rounding stays below `F_max`.
    pub overflow: OverflowConstants,
}

/// The bounds of `step` executed in `storage` (and the next wider format).
pub fn step_bounds(step: &AffineStep, storage: Format) -> StepBounds {
    let (rho, lambda) = (op_rounding(storage), storage.lambda());
    let mut out = StepBounds {
        scale_max: 0.0,
        error_rel: 0.0,
        error_const: 0.0,
        shift_l2: 0.0,
        overflow: OverflowConstants {
            row_l2_max: 1.0,
            row_inf_max: 0.0,
            bias_inf: 1.0,
            product_f_max: f64::INFINITY,
            checks: Vec::new(),
            input_f_max: f64::INFINITY,
        },
    };
    let mut peaks: Vec<(f64, f64)> = Vec::new();
    let (mut f_sq, mut c_sq) = (
        Vec::with_capacity(step.width),
        Vec::with_capacity(step.width),
    );
    for i in 0..step.width {
        let (ft, p) = feature_bounds(step, i, rho, lambda);
        out.scale_max = out.scale_max.max(ft.a_max);
        out.error_rel = out.error_rel.max(ft.e);
        f_sq.push(ft.f);
        c_sq.push(ft.c_max);
        for (k, (coef, cst)) in p.into_iter().enumerate() {
            match peaks.get_mut(k) {
                Some(q) => *q = (q.0.max(coef), q.1.max(cst)),
                None => peaks.push((coef, cst)),
            }
        }
    }
    out.error_const = l2_norm_up(f_sq);
    out.shift_l2 = l2_norm_up(c_sq);
    // |x_hat|_inf <= ||x_hat||_2 <= r + D = S with row_l2_max = 1; ||b||_inf = 1
    out.overflow.checks = peaks
        .into_iter()
        .map(|(coef, cst)| OverflowCheck {
            scale_w: coef,
            scale_b: cst,
            abs: 0.0,
            f_max: storage.f_max(),
        })
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Rational;

    fn q(x: f64) -> Rational {
        Rational::from_f64(x).unwrap()
    }

    /// `got >= exact` and within a relative `2^-40` of it (directed `f64` steps only).
    fn tight(what: &str, got: f64, exact: &Rational) {
        let g = q(got);
        assert!(
            g >= *exact,
            "{what}: {got} below the exact {}",
            exact.to_f64()
        );
        let slack = exact * Rational::from((1, 1u64 << 40));
        assert!(
            g <= Rational::from(exact + &slack),
            "{what}: {got} is loose"
        );
    }

    #[test]
    fn a_scale_then_shift_pins_every_constant() {
        // one feature: y = 3 x + 0.5 in float32 (ops rounded to float32 after float64)
        let step = AffineStep {
            width: 1,
            ops: vec![ElementOp::Mul(vec![3.0]), ElementOp::Add(vec![0.5])],
        };
        let b = step_bounds(&step, Format::Float32);
        let (u, uw) = (q(2f64.powi(-24)), q(2f64.powi(-53)));
        let rho = Rational::from(&u + &uw) + Rational::from(&u * &uw);
        let lambda = q(2f64.powi(-126));
        let one = Rational::from(1);
        // after * 3: A = 3, e = 3 rho, f = lambda; after + 0.5: e = (1+rho) 3 rho + 3 rho
        let e1 = Rational::from(3) * &rho;
        let e2 = Rational::from(&one + &rho) * &e1 + &e1;
        let f2 = Rational::from(&one + &rho) * &lambda + &rho * q(0.5) + &lambda;
        tight("scale_max", b.scale_max, &Rational::from(3));
        tight("shift_l2", b.shift_l2, &q(0.5));
        tight("error_rel", b.error_rel, &e2);
        tight("error_const", b.error_const, &f2);
        // one overflow check per op: the value after it, (A + e) |x| + C + f
        assert_eq!(b.overflow.checks.len(), 2);
        let c = b.overflow.checks[1];
        tight("peak coefficient", c.scale_w, &(Rational::from(3) + &e2));
        tight("peak constant", c.scale_b, &(q(0.5) + &f2));
    }

    #[test]
    fn a_division_pins_its_doubled_rounding_and_the_reciprocal_term() {
        // y = x / 4 in float32: A = 1/4, g = (1 + rho)^2 - 1,
        // e = g A + (1 + g) lambda (A_0 + e_0), f = lambda (the reciprocal's subnormal terms)
        let step = AffineStep {
            width: 1,
            ops: vec![ElementOp::Div(vec![4.0])],
        };
        let b = step_bounds(&step, Format::Float32);
        let (u, uw) = (q(2f64.powi(-24)), q(2f64.powi(-53)));
        let rho = Rational::from(&u + &uw) + Rational::from(&u * &uw);
        let one = Rational::from(1);
        let g = Rational::from(&one + &rho) * Rational::from(&one + &rho) - &one;
        let lambda = q(2f64.powi(-126));
        let quarter = q(0.25);
        let e = Rational::from(&g * &quarter) + Rational::from(&one + &g) * &lambda;
        tight("scale_max", b.scale_max, &quarter);
        // `gamma` forms (1 + rho)^2 in f64 and subtracts 1: relative slack about 2^-28
        let e_loose = (&e * Rational::from((1u64 << 20) + 1)) >> 20u32;
        assert!(q(b.error_rel) >= e, "error_rel below the exact value");
        assert!(q(b.error_rel) <= e_loose, "error_rel is loose");
        tight("error_const", b.error_const, &lambda);
    }
}
