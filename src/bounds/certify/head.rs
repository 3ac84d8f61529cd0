//! The logit margin a classifier head needs (docs/soundness.md "Classifier heads").
//!
//! In real arithmetic `Softmax` and `LogSoftmax` are strictly increasing in each logit for a
//! fixed row, so they keep the arg-max. In floating point two classes whose logits are close can
//! come out tied or swapped. The runtime is assumed to compute, per class `k`, with `M` the row
//! maximum:
//!
//! * Softmax: `d_k = fl(z_k - M)`, `e_k = E(d_k)`, `p_k = R(e_k s)` with one common positive `s`
//!   (`1/S`, its rounding, or a division by the sum `S`), `R` one or two roundings (the second to
//!   the storage format when the head computes in a wider one);
//! * LogSoftmax: `o_k = R(fl(d_k) - L)` with one common `L`, the runtime's `log S`;
//!
//! every rounding to nearest in a format of unit roundoff at most `u` (the storage format's) with
//! absolute error at most `lambda` below the normal range, `E` (exp) and the log within relative
//! error `eps_t` ([`transcendental_accuracy`]) plus `lambda`. onnxruntime's MLAS kernels compute
//! exactly this (`MlasComputeSoftmax`). Then a logit gap `z_c - z_j >= g` keeps `p_c > p_j`
//! (`o_c > o_j`), so the arg-max — and the label `ArgMax` returns, whatever its tie rule — is `c`.

use rug::float::Round;
use rug::ops::{AddAssignRound, DivAssignRound, MulAssignRound, SubAssignRound};
use rug::Float;

use crate::arith::format::Format;
use crate::onnx::model::HeadOp;

/// Working precision (bits).
const PREC: u32 = 128;

/// The assumed relative accuracy `eps_t` of the runtime's `exp` and `log`: `max(2^-16, 8 u)` —
/// 256 float32 ulps, eight storage-format ulps for the narrow formats (onnxruntime's float32
/// `exp` measures within a few ulps: docs/soundness.md).
pub fn transcendental_accuracy(format: Format) -> f64 {
    (8.0 * format.unit_roundoff()).max(2f64.powi(-16))
}

fn f(x: f64) -> Float {
    Float::with_val(PREC, x)
}

/// `(1 + s x)^k` rounded in direction `r` (`s` = +1 or -1; `x` exact).
fn one_plus_pow(x: f64, s: i32, k: u32, r: Round) -> Float {
    let mut b = f(1.0);
    b.add_assign_round(f(x) * s, r);
    let mut out = f(1.0);
    for _ in 0..k {
        out.mul_assign_round(&b, r);
    }
    out
}

/// Upper bound on the runtime's sum `S = sum_k e_k` of `classes` terms, each at most
/// `1 + eps_t + lambda`, rounded `classes - 1` times: `K (1 + eps_t + lambda) (1 + u)^(K-1)`.
fn sum_upper(format: Format, classes: u64) -> Float {
    let (u, eps, lambda) = (
        format.unit_roundoff(),
        transcendental_accuracy(format),
        format.lambda(),
    );
    let mut s = f(1.0);
    s.add_assign_round(eps, Round::Up);
    s.add_assign_round(lambda, Round::Up);
    s.mul_assign_round(classes as f64, Round::Up);
    let mut growth = f(1.0);
    growth.add_assign_round(u, Round::Up);
    let mut exponent = f(0.0);
    exponent.add_assign_round(classes.saturating_sub(1) as f64, Round::Up);
    use rug::ops::PowAssignRound;
    growth.pow_assign_round(&exponent, Round::Up);
    s.mul_assign_round(&growth, Round::Up);
    s
}

/// Lower bound on the top class's exponential `e_c = E(0) >= 1 - eps_t - lambda`.
fn top_exp_lower(format: Format) -> Float {
    let mut e = f(1.0);
    e.sub_assign_round(transcendental_accuracy(format), Round::Down);
    e.sub_assign_round(format.lambda(), Round::Down);
    e
}

/// The Softmax margin `g = -ln(rho) / (1 - u)` with
/// `rho = ((1 - eps_t - lambda)(1-u)^2/(1+u)^2 - lambda) / (1 + eps_t)`, rounded up; `None` when
/// the top probability could fall to the normal range's edge (`(1 - eps_t - lambda)(1 - u)^3 /
/// S_max <= lambda`, the reciprocal's and two output roundings included) or `rho <= 0`.
///
/// Proof sketch (docs/soundness.md): `d_c = 0`, `e_c >= 1 - eps_t - lambda`; for `j`,
/// `d_j <= -(1-u) g`, `e_j <= exp(-(1-u) g)(1 + eps_t) + lambda`; `R` is monotone with
/// `R(x) <= x (1+u)^2` for `x >= lambda` and `R(x) <= lambda` below, and `R(x_c) >= x_c (1-u)^2`
/// since `x_c >= lambda`. `exp(-(1-u) g) <= rho` makes `R(e_j s) < R(e_c s)`.
pub fn softmax_margin(format: Format, classes: u64) -> Option<f64> {
    let (u, eps, lambda) = (
        format.unit_roundoff(),
        transcendental_accuracy(format),
        format.lambda(),
    );
    let top = top_exp_lower(format);
    // the top probability stays above lambda through the reciprocal's and the two output
    // roundings: (1 - eps - lambda)(1 - u)^3 / S_max > lambda, so p_c > lambda >= p_j strictly
    // when e_j s falls below the normal range
    let mut xc = top.clone();
    xc.mul_assign_round(one_plus_pow(u, -1, 3, Round::Down), Round::Down);
    xc.div_assign_round(sum_upper(format, classes), Round::Down);
    if xc <= lambda {
        return None;
    }
    let mut rho = top;
    rho.mul_assign_round(one_plus_pow(u, -1, 2, Round::Down), Round::Down);
    rho.div_assign_round(one_plus_pow(u, 1, 2, Round::Up), Round::Down);
    rho.sub_assign_round(lambda, Round::Down);
    rho.div_assign_round(one_plus_pow(eps, 1, 1, Round::Up), Round::Down);
    if rho <= 0 {
        return None;
    }
    rho.ln_round(Round::Down);
    let mut g = -rho;
    g.div_assign_round(one_plus_pow(u, -1, 1, Round::Down), Round::Up);
    Some(g.to_f64_round(Round::Up).max(lambda))
}

/// Upper bound `L_max` on `|L|`, the runtime's `log S`: `S` lies in
/// `[S_min, S_max]` with `S_min = (1 - eps_t - lambda)(1 - u)^(K-1)`, and the log is within
/// `eps_t (|ln S| + 1)`: `L_max = (1 + eps_t) max(ln S_max, -ln S_min) + eps_t`.
fn log_sum_bound(format: Format, classes: u64) -> Float {
    let (u, eps) = (format.unit_roundoff(), transcendental_accuracy(format));
    let mut hi = sum_upper(format, classes);
    hi.ln_round(Round::Up);
    let mut lo = top_exp_lower(format);
    let k = u32::try_from(classes.saturating_sub(1)).unwrap_or(u32::MAX);
    lo.mul_assign_round(
        one_plus_pow(u, -1, k.min(1 << 20), Round::Down),
        Round::Down,
    );
    lo.ln_round(Round::Down);
    let neg_ln_lo = -lo;
    let mut l = if hi > neg_ln_lo { hi } else { neg_ln_lo };
    l.mul_assign_round(one_plus_pow(eps, 1, 1, Round::Up), Round::Up);
    l.add_assign_round(eps, Round::Up);
    l
}

/// The LogSoftmax margin `g = (3 + u)(u L_max + lambda) / ((1 - 2u - u^2)(1 - u))`, rounded up.
///
/// Proof sketch (docs/soundness.md): `o_c = R(-L) >= -L - u L_max - lambda`; with
/// `D = |fl(d_j)| >= (1-u) g`, `o_j <= -D - L + u(2+u)(D + L_max) + (2+u) lambda`, and
/// `o_j < o_c` as soon as `D (1 - 2u - u^2) > (3+u)(u L_max + lambda)`.
pub fn log_softmax_margin(format: Format, classes: u64) -> f64 {
    let (u, lambda) = (format.unit_roundoff(), format.lambda());
    let mut num = log_sum_bound(format, classes);
    num.mul_assign_round(u, Round::Up);
    num.add_assign_round(lambda, Round::Up);
    num.mul_assign_round(f(3.0) + u, Round::Up);
    // 1 - 2u - u^2 is exact at 128 bits
    let mut den = f(1.0) - f(2.0) * u - f(u) * u;
    den.mul_assign_round(one_plus_pow(u, -1, 1, Round::Down), Round::Down);
    num.div_assign_round(&den, Round::Up);
    num.to_f64_round(Round::Up).max(lambda)
}

/// The logit margin every sound certificate requires for the model's head: the largest over its
/// head ops (0 for logits or an `ArgMax` of the logits, whose strict maximum the certificate
/// already proves); `None` when a head cannot be certified in this format.
pub fn head_margin(heads: &[HeadOp], format: Format, classes: u64) -> Option<f64> {
    let mut g = 0.0f64;
    for h in heads {
        let m = match h {
            HeadOp::ArgMax | HeadOp::Relu => 0.0,
            HeadOp::Softmax => softmax_margin(format, classes)?,
            HeadOp::LogSoftmax => log_softmax_margin(format, classes),
        };
        g = g.max(m);
    }
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::ops::Pow;

    /// The Softmax margin from its closed form in f64 (independent arithmetic), within a
    /// relative `1e-9`.
    #[test]
    fn softmax_margin_matches_the_closed_form() {
        for format in [Format::Float32, Format::Float16, Format::Float64] {
            let (u, eps, lambda) = (
                format.unit_roundoff(),
                transcendental_accuracy(format),
                format.lambda(),
            );
            let rho = ((1.0 - eps - lambda) * (1.0 - u).powi(2) / (1.0 + u).powi(2) - lambda)
                / (1.0 + eps);
            let g = -rho.ln() / (1.0 - u);
            let got = softmax_margin(format, 10).unwrap();
            assert!((got - g).abs() <= g * 1e-9, "{format}: {got} vs {g}");
        }
    }

    /// float32: eps_t = 2^-16, so g is about 2 eps_t + 4u = 3.05e-5.
    #[test]
    fn softmax_margin_float32_value() {
        let g = softmax_margin(Format::Float32, 10).unwrap();
        let expect = 2.0 * 2f64.powi(-16) + 4.0 * 2f64.powi(-24);
        assert!((g - expect).abs() < 1e-9, "{g}");
    }

    /// The LogSoftmax margin from its closed form with `L_max = (1+eps) ln(S_max) + eps`.
    #[test]
    fn log_softmax_margin_matches_the_closed_form() {
        let format = Format::Float32;
        let (u, eps, lambda) = (
            format.unit_roundoff(),
            transcendental_accuracy(format),
            format.lambda(),
        );
        let s_max = 10.0 * (1.0 + eps + lambda) * (1.0 + u).powi(9);
        let l_max = (1.0 + eps) * s_max.ln() + eps;
        let g = (3.0 + u) * (u * l_max + lambda) / ((1.0 - 2.0 * u - u * u) * (1.0 - u));
        let got = log_softmax_margin(format, 10);
        assert!((got - g).abs() <= g * 1e-9, "{got} vs {g}");
    }

    /// The closed forms at 256 bits (rounding errors far below the `f64` result's ulp):
    /// `S_max = K (1 + eps + lambda)(1 + u)^(K-1)`, `S_min = (1 - eps - lambda)(1 - u)^(K-1)`.
    fn sums(format: Format, k: u64) -> (Float, Float, [Float; 3]) {
        let w = |x: f64| Float::with_val(256, x);
        let (u, eps, lambda) = (
            w(format.unit_roundoff()),
            w(transcendental_accuracy(format)),
            w(format.lambda()),
        );
        let kf = w(k as f64);
        let grow = Float::with_val(256, 1 + &u).pow(&w((k - 1) as f64));
        let shrink = Float::with_val(256, 1 - &u).pow(&w((k - 1) as f64));
        let s_max = kf * (Float::with_val(256, 1 + &eps) + &lambda) * grow;
        let top = Float::with_val(256, 1 - &eps) - &lambda;
        let s_min = Float::with_val(256, &top * shrink);
        (s_max, s_min, [u, eps, lambda])
    }

    /// `got` is at or above `exact` and within a relative `2^-50` of it.
    fn pinned(what: &str, got: f64, exact: &Float) {
        let g = Float::with_val(256, got);
        assert!(g >= *exact, "{what}: {got} below {exact}");
        let limit = Float::with_val(
            256,
            exact * (1 + Float::with_val(256, Float::i_exp(1, -50))),
        );
        assert!(g <= limit, "{what}: {got} loose against {exact}");
    }

    #[test]
    fn log_softmax_margin_is_pinned_at_high_precision() {
        for (format, k) in [
            (Format::Float32, 10),
            (Format::Float32, 2),
            (Format::Float16, 3),
            (Format::Bfloat16, 100_000),
            (Format::Bfloat16, 1_000_000),
        ] {
            let (s_max, s_min, [u, eps, lambda]) = sums(format, k);
            // L_max = (1 + eps) max(ln S_max, -ln S_min) + eps: the second wins only where
            // (K - 1) (-ln(1 - u^2)) > ln K + ..., as for bfloat16 with a million classes
            let (hi, lo) = (s_max.ln(), -s_min.ln());
            assert_eq!(lo > hi, k == 1_000_000, "{format} K={k}: which term wins");
            let l_max = Float::with_val(256, 1 + &eps) * if hi > lo { hi } else { lo } + &eps;
            let num = Float::with_val(256, 3 + &u) * (Float::with_val(256, &u * &l_max) + &lambda);
            let den = (1 - Float::with_val(256, 2 * &u) - Float::with_val(256, &u * &u))
                * Float::with_val(256, 1 - &u);
            let g = Float::with_val(256, num / den);
            pinned(
                &format!("{format} K={k}"),
                log_softmax_margin(format, k),
                &g,
            );
        }
    }

    #[test]
    fn softmax_refusal_flips_exactly_where_the_top_probability_reaches_lambda() {
        // (1 - eps - lambda)(1 - u)^3 / S_max > lambda is the condition; find its last K
        let ok = |k: u64| {
            let (s_max, _, [u, eps, lambda]) = sums(Format::Float16, k);
            let top =
                (Float::with_val(256, 1 - &eps) - &lambda) * Float::with_val(256, 1 - &u).pow(3u32);
            Float::with_val(256, top / s_max) > lambda
        };
        let (mut lo, mut hi) = (2u64, 100_000u64);
        assert!(ok(lo) && !ok(hi));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if ok(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        assert!(softmax_margin(Format::Float16, lo).is_some(), "K = {lo}");
        assert!(softmax_margin(Format::Float16, hi).is_none(), "K = {hi}");
    }

    #[test]
    fn argmax_needs_no_margin_and_the_largest_head_wins() {
        assert_eq!(
            head_margin(&[HeadOp::ArgMax], Format::Float32, 10),
            Some(0.0)
        );
        let both = head_margin(
            &[HeadOp::LogSoftmax, HeadOp::Softmax, HeadOp::ArgMax],
            Format::Float16,
            10,
        )
        .unwrap();
        assert_eq!(both, softmax_margin(Format::Float16, 10).unwrap());
    }

    /// float16 with many classes: the top probability can leave the normal range only for
    /// very many classes; then the head is not certifiable.
    #[test]
    fn softmax_margin_refuses_when_the_top_probability_can_underflow() {
        assert!(softmax_margin(Format::Float16, 1000).is_some());
        assert!(softmax_margin(Format::Float16, 100_000).is_none());
    }
}
