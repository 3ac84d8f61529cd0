//! Error terms of the executions beyond IEEE accumulation (docs/soundness.md "Runtimes beyond
//! IEEE accumulation"): operand conversion to TF32 or bfloat16, NVIDIA tensor-core block FMA
//! chains, split-K partial sums reduced in a stated format, and the bias in the first block or
//! in a float32 epilogue. Every constant is a rug `Float` rounded up.

use ndarray::ArrayView2;
use rug::float::Round;
use rug::ops::{AddAssignRound, MulAssignRound, PowAssignRound, SubAssignRound};
use rug::Float;

use crate::arith::execution::{BlockFma, OperandConversion};
use crate::arith::format::Format;
use crate::arith::sound::{add_up, mul_up};

use super::quantities::{
    abs_unit, accumulator_check, gamma_n_float, step_check, LayerError, OverflowCheck, PREC,
};

/// `2^e` as a rug `Float`.
fn pow2(e: i32) -> Float {
    Float::with_val(PREC, Float::i_exp(1, e))
}

/// `k` as a rug `Float` (exact for every `u64` at 128 bits).
fn count(k: u64) -> Float {
    Float::with_val(PREC, k)
}

/// `(1 + x)^k`, rounded up.
fn one_plus_pow(x: &Float, k: u64) -> Float {
    let mut base = x.clone();
    base.add_assign_round(1, Round::Up);
    base.pow_assign_round(&count(k), Round::Up);
    base
}

/// `(1 + x)^k - 1`, rounded up: the relative error after `k` steps of relative error `x`.
pub fn compound(x: &Float, k: u64) -> Float {
    let mut g = one_plus_pow(x, k);
    g.sub_assign_round(1, Round::Up);
    g
}

/// `theta` of one block FMA step (docs/soundness.md "Tensor cores"): for `c' = BFMA(c, p_1..p_b)`,
/// `|c' - (c + sum p_i)| <= theta (|c| + sum |p_i|) + 2^-126`, with
/// `theta = 2^-23 + (b + 1) 2^-(23 + e) (1 + 2^-23)`: each of the `b + 1` terms loses less than
/// `2^(E - 23 - e)` to the alignment truncation, `E` the largest term's exponent
/// (`2^E <= |c| + sum |p_i|`), and the float32 result is truncated (relative error below
/// `2^-23`; round to nearest is covered). The absolute `2^-126` covers a flushed or truncated
/// subnormal result.
pub fn block_theta(b: BlockFma) -> Float {
    let u_final = pow2(-23);
    let mut align = pow2(-(23 + b.extra_bits as i32));
    align.mul_assign_round(&count(u64::from(b.block) + 1), Round::Up);
    let mut widen = u_final.clone();
    widen.add_assign_round(1, Round::Up);
    align.mul_assign_round(&widen, Round::Up);
    align.add_assign_round(&u_final, Round::Up);
    align
}

/// `eta = (1 + u_c)^2 - 1`: the relative error of a product of two converted operands, each
/// within `u_c` relative of the original (`u_c = 2^-p` to nearest, `2^(1-p)` by truncation).
pub fn conversion_eta(c: OperandConversion) -> Float {
    compound(&pow2(c.relative_error_exponent()), 2)
}

/// The absolute conversion term of one output: `(1 + u_c) lambda_c ||w_i||_1` with
/// `row_l1_max >= max_i ||w_i||_1`: an input below the operand format's normal range may lose
/// up to `lambda_c` (truncated, rounded or flushed); weights are normal or zero (checked).
pub fn conversion_abs(c: OperandConversion, row_l1_max: f64) -> Float {
    let mut t = pow2(c.relative_error_exponent());
    t.add_assign_round(1, Round::Up);
    t.mul_assign_round(&pow2(c.format.emin()), Round::Up);
    t.mul_assign_round(row_l1_max, Round::Up);
    t
}

/// An error bound relative to the converted products `|w'| . |z'|` and bias `b'`, restated
/// against the original ones: `sum |w' z'| <= (1 + eta) sum |w z| + conv_abs` and
/// `|sum w' z' - sum w z| <= eta sum |w z| + conv_abs` give
/// `rel_w' = (1 + eta)(1 + rel_w) - 1`, `abs' = abs + (1 + rel_w) conv_abs`; the bias may be
/// converted too (a runtime that copies it into the output with a GEMM): `|b'| <= (1 + u_c)|b|`
/// gives `rel_b' = (1 + u_c)(1 + rel_b) - 1`.
pub fn after_conversion(
    err: &LayerError,
    c: OperandConversion,
    eta: &Float,
    conv_abs: &Float,
) -> LayerError {
    let mut rel_w = err.rel_w.clone();
    rel_w.add_assign_round(1, Round::Up);
    let mut f = eta.clone();
    f.add_assign_round(1, Round::Up);
    rel_w.mul_assign_round(&f, Round::Up);
    rel_w.sub_assign_round(1, Round::Up);
    let mut carry = err.rel_w.clone();
    carry.add_assign_round(1, Round::Up);
    carry.mul_assign_round(conv_abs, Round::Up);
    let mut abs = err.abs.clone();
    abs.add_assign_round(&carry, Round::Up);
    let rel_b = if err.bias_included {
        let mut b = err.rel_b.clone();
        b.add_assign_round(1, Round::Up);
        let mut f = pow2(c.relative_error_exponent());
        f.add_assign_round(1, Round::Up);
        b.mul_assign_round(&f, Round::Up);
        b.sub_assign_round(1, Round::Up);
        b
    } else {
        err.rel_b.clone()
    };
    LayerError {
        rel_w,
        rel_b,
        abs,
        bias_included: err.bias_included,
    }
}

/// An overflow check restated for converted products: the value is at most
/// `scale_w sum |w' z'| + ...`, so `scale_w' = scale_w (1 + eta)` and
/// `abs' = abs + scale_w conv_abs` (all rounded up).
pub fn converted_check(c: OverflowCheck, eta: f64, conv_abs: f64) -> OverflowCheck {
    OverflowCheck {
        scale_w: mul_up(c.scale_w, add_up(1.0, eta)),
        abs: add_up(c.abs, mul_up(c.scale_w, conv_abs)),
        ..c
    }
}

/// The float32 main loop of a layer: its error with the bias as the initial accumulator and
/// with the products alone, each with the check on the values it forms.
#[derive(Clone, Debug)]
pub struct Chain {
    /// The bias in the first block (or anywhere in an IEEE sum).
    pub with_bias: (LayerError, OverflowCheck),
    /// The products alone (the bias added in the epilogue).
    pub products: (LayerError, OverflowCheck),
}

/// IEEE float32 accumulation in any order (a covered execution beside the tensor cores: lipfp's
/// own centre execution, CUDA-core kernels).
pub fn ieee_chain(ftz: bool, n: u64) -> Chain {
    let with_bias = LayerError::accumulation(Format::Float32, ftz, n);
    let products = LayerError::products(Format::Float32, ftz, n);
    let check = accumulator_check(Format::Float32, ftz, n);
    Chain {
        with_bias: (with_bias, check),
        products: (products, check),
    }
}

/// A chain of tensor-core block FMAs over the `n` products, split into at most `splits` chains
/// (1 without split-K): each chain of `t <= ceil(n / b)` steps has relative error
/// `rho = (1 + theta)^T - 1` on `|c_0| + sum |p|`, and all chains together at most
/// `(T + splits) (1 + theta)^T 2^-126` absolute (docs/soundness.md "Tensor cores").
///
/// A product with a subnormal factor (below `lambda = 2^lambda_exp`, the smallest normal of the
/// tensor cores' input format) is aligned by its factors' nominal exponents, not its size: the
/// alignment argument holds with `|p_j|` replaced by a nominal size `nu_j` at least `2^E_j`.
/// For a subnormal activation `nu_j = |p_j| + 2 lambda |w_j|`; for a subnormal weight
/// `nu_j = |p_j| + 2 lambda |z_j| + 2 lambda^2` (docs/soundness.md "Subnormal tensor-core
/// inputs"). The chain gains `rho 2 lambda nominal_l1` absolute, `nominal_l1` from
/// [`nominal_l1`]; the `2 lambda |z_j|` terms are carried by the layer's `rel_w |W| |z|` term
/// with [`alignment_weight`] in place of `|w_j|`.
pub fn block_chain(b: BlockFma, n: u64, splits: u64, lambda_exp: i32, nominal_l1: f64) -> Chain {
    let theta = block_theta(b);
    let t = n.div_ceil(u64::from(b.block)).max(1);
    let rho = compound(&theta, t);
    let mut abs = one_plus_pow(&theta, t);
    abs.mul_assign_round(&count(t + splits), Round::Up);
    abs.mul_assign_round(&pow2(-126), Round::Up);
    let mut nominal = rho.clone();
    nominal.mul_assign_round(&pow2(lambda_exp + 1), Round::Up);
    nominal.mul_assign_round(nominal_l1, Round::Up);
    abs.add_assign_round(&nominal, Round::Up);
    let with_bias = LayerError {
        rel_w: rho.clone(),
        rel_b: rho.clone(),
        abs: abs.clone(),
        bias_included: true,
    };
    let products = LayerError {
        rel_w: rho,
        rel_b: Float::with_val(PREC, 0),
        abs,
        bias_included: false,
    };
    let (cw, cp) = (
        step_check(&with_bias, Format::Float32),
        step_check(&products, Format::Float32),
    );
    Chain {
        with_bias: (with_bias, cw),
        products: (products, cp),
    }
}

/// The size a weight counts with in the tensor cores' `rel_w |W| |z|` term: `|w| + 2 lambda`
/// (rounded up) for a nonzero weight below `lambda`, the smallest normal of the tensor cores'
/// input format (its product's nominal size carries `2 lambda |z_j|`, see [`block_chain`]), `|w|`
/// otherwise or without tensor cores (`lambda = None`).
pub fn alignment_weight(w: f64, lambda: Option<f64>) -> f64 {
    match lambda {
        Some(l) if w != 0.0 && w.abs() < l => add_up(w.abs(), mul_up(2.0, l)),
        _ => w.abs(),
    }
}

/// `max_i sum_j max(|w_ij|, lambda [w_ij subnormal])`, rounded up: the chain's nominal-size
/// coefficient of [`block_chain`] (`2 lambda |w_j|` for a subnormal activation, `2 lambda^2` for a
/// subnormal weight), over the rows of `w`.
pub fn nominal_l1(w: ArrayView2<'_, f64>, lambda: f64) -> f64 {
    w.rows()
        .into_iter()
        .map(|r| {
            r.iter().fold(0.0, |a, &w| {
                let size = if w != 0.0 && w.abs() < lambda {
                    lambda
                } else {
                    w.abs()
                };
                add_up(a, size)
            })
        })
        .fold(0.0, f64::max)
}

/// The split-K reduction: `splits` float32 partials, each rounded to `red` (exact when `red` is
/// float32) and summed in `red` in any order: each partial passes through at most `splits`
/// roundings, `rel = gamma_splits(red)`, and at most `splits` conversions and additions may
/// each lose the absolute unit of `red` (`a_mul`, or `lambda` twice under flush-to-zero):
/// `abs = (1 + gamma) splits unit` (`2 splits lambda` under flush-to-zero).
pub fn reduction_terms(red: Format, ftz: bool, splits: u64) -> (Float, Float) {
    let g = gamma_n_float(red, splits);
    let mut abs = g.clone();
    abs.add_assign_round(1, Round::Up);
    let per = if ftz { 2 * splits } else { splits };
    abs.mul_assign_round(&count(per), Round::Up);
    abs.mul_assign_round(&abs_unit(red, ftz), Round::Up);
    (g, abs)
}

/// The executions of one layer built on `chain`: the bias in the chain, or added to the (reduced)
/// products in a float32 epilogue; with split-K the partials reduced in `split.0` over at most
/// `split.1` splits; then the storage rounding when storage is narrower than float32, then the
/// graph's narrowing casts. Each with the overflow checks of every value formed.
pub fn reduced_variants(
    chain: &Chain,
    split: Option<(Format, u64)>,
    storage: Format,
    ftz: bool,
    casts: &[Format],
) -> Vec<(LayerError, Vec<OverflowCheck>)> {
    let mut out = Vec::new();
    for (bias_first, (err, check)) in [(true, &chain.with_bias), (false, &chain.products)] {
        let mut err = err.clone();
        let mut checks = vec![*check];
        if let Some((red, splits)) = split {
            let (g, abs) = reduction_terms(red, ftz, splits);
            err = err.then_relative(&g, &abs);
            checks.push(step_check(&err, red));
        }
        if !bias_first {
            checks.push(step_check(&err, Format::Float32));
            err = err.then_bias_added(Format::Float32, ftz);
        }
        if storage != Format::Float32 {
            checks.push(step_check(&err, storage));
            err = err.then_rounded(storage, ftz);
        }
        for &c in casts {
            checks.push(step_check(&err, c));
            err = err.then_rounded(c, ftz);
        }
        out.push((err, checks));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::execution::{OperandFormat, OperandRounding};
    use rug::Rational;

    fn q(x: &Float) -> Rational {
        x.to_rational().unwrap()
    }

    fn p2(e: i32) -> Rational {
        if e >= 0 {
            Rational::from(1u64 << e)
        } else {
            Rational::from((1, 1u64)) >> (-e) as u32
        }
    }

    fn pow(x: &Rational, k: u64) -> Rational {
        let mut r = Rational::from(1);
        for _ in 0..k {
            r *= x;
        }
        r
    }

    /// `got >= exact` and within a relative `2^-100`.
    fn tight(what: &str, got: &Float, exact: &Rational) {
        let g = q(got);
        assert!(g >= *exact, "{what}: {g} < {exact}");
        if *exact != 0 {
            let rel = (g - exact) / exact;
            assert!(rel < p2(-100), "{what} not tight: {rel}");
        }
    }

    #[test]
    fn block_theta_pins_the_published_parameters() {
        // H100 TF32: b = 8, e = 2: 2^-23 + 9 2^-25 (1 + 2^-23)
        let h100 = BlockFma {
            block: 8,
            extra_bits: 2,
        };
        let want = p2(-23) + Rational::from(9) * p2(-25) * (Rational::from(1) + p2(-23));
        tight("theta h100 tf32", &block_theta(h100), &want);
        // V100 float16: b = 4, e = 0: 2^-23 + 5 2^-23 (1 + 2^-23)
        let v100 = BlockFma {
            block: 4,
            extra_bits: 0,
        };
        let want = p2(-23) + Rational::from(5) * p2(-23) * (Rational::from(1) + p2(-23));
        tight("theta v100", &block_theta(v100), &want);
    }

    #[test]
    fn block_chain_compounds_over_the_blocks() {
        let b = BlockFma {
            block: 16,
            extra_bits: 2,
        };
        // 784 products: 49 blocks
        let c = block_chain(b, 784, 1, -14, 0.0);
        let theta = q(&block_theta(b));
        let one = Rational::from(1);
        let base = Rational::from(&one + &theta);
        let rho = pow(&base, 49) - &one;
        tight("rho", &c.with_bias.0.rel_w, &rho);
        tight("rho bias", &c.with_bias.0.rel_b, &rho);
        assert_eq!(c.products.0.rel_b, 0);
        let abs = pow(&base, 49) * Rational::from(50) * p2(-126);
        tight("abs", &c.with_bias.0.abs, &abs);
        // a subnormal input adds rho 2 lambda ||w||_1
        let e = block_chain(b, 784, 1, -14, 3.0);
        let extra = (pow(&base, 49) - &one) * p2(-13) * Rational::from(3);
        tight("abs nominal", &e.with_bias.0.abs, &(abs.clone() + extra));
        // a partial block still counts: 785 products take 50 blocks
        let d = block_chain(b, 785, 1, -14, 0.0);
        tight("rho 785", &d.products.0.rel_w, &(pow(&base, 50) - &one));
    }

    #[test]
    fn subnormal_weights_count_with_their_nominal_size() {
        // `got` is the exact value rounded up by at most a few ulps
        let safe = |got: f64, want: f64| {
            let (g, w) = (
                Rational::from_f64(got).unwrap(),
                Rational::from_f64(want).unwrap(),
            );
            assert!(
                g >= w && g <= w.clone() * (Rational::from(1) + p2(-50)),
                "{got} vs {want}"
            );
        };
        let lambda = 2f64.powi(-14);
        // a float16 subnormal weight: |w| + 2 lambda (exact in f64)
        let w = 3.0 * 2f64.powi(-24);
        safe(alignment_weight(w, Some(lambda)), w + 2.0 * lambda);
        safe(alignment_weight(-w, Some(lambda)), w + 2.0 * lambda);
        // zero, normal weights and the IEEE model are unchanged
        assert_eq!(alignment_weight(0.0, Some(lambda)), 0.0);
        assert_eq!(alignment_weight(-lambda, Some(lambda)), lambda);
        assert_eq!(alignment_weight(w, None), w);
        // rows [0.5, -w, 0] and [w, w, 0.25]: max(0.5 + lambda, 2 lambda + 0.25)
        let m = ndarray::arr2(&[[0.5, -w, 0.0], [w, w, 0.25]]);
        safe(nominal_l1(m.view(), lambda), 0.5 + lambda);
        // every entry below lambda: the row counts lambda per nonzero entry
        let tiny = ndarray::arr2(&[[w, 0.0, -w]]);
        safe(nominal_l1(tiny.view(), lambda), 2.0 * lambda);
    }

    #[test]
    fn conversion_terms_pin_exact_values() {
        let trunc = OperandConversion {
            format: OperandFormat::Tf32,
            rounding: OperandRounding::Truncate,
        };
        let near = OperandConversion {
            format: OperandFormat::Bfloat16,
            rounding: OperandRounding::Nearest,
        };
        let one = Rational::from(1);
        tight(
            "eta trunc",
            &conversion_eta(trunc),
            &(pow(&(&one + p2(-10)), 2) - &one),
        );
        tight(
            "eta near",
            &conversion_eta(near),
            &(pow(&(&one + p2(-8)), 2) - &one),
        );
        let a = conversion_abs(trunc, 3.0);
        tight(
            "conv abs",
            &a,
            &((&one + p2(-10)) * p2(-126) * Rational::from(3)),
        );
        // restating an error: rel_w' = (1+eta)(1+rel_w) - 1, abs' = abs + (1+rel_w) conv_abs
        let err = LayerError::accumulation(Format::Float32, false, 10);
        let eta = conversion_eta(trunc);
        let out = after_conversion(&err, trunc, &eta, &a);
        let want = (&one + q(&eta)) * (&one + q(&err.rel_w)) - &one;
        tight("rel_w'", &out.rel_w, &want);
        let want_b = (&one + p2(-10)) * (&one + q(&err.rel_b)) - &one;
        tight("rel_b'", &out.rel_b, &want_b);
        let want_abs = q(&err.abs) + (&one + q(&err.rel_w)) * q(&a);
        tight("abs'", &out.abs, &want_abs);
        // an overflow check restated: scale_w (1 + eta), abs + scale_w conv_abs, the rest kept
        let check = OverflowCheck {
            scale_w: 1.5,
            scale_b: 1.25,
            abs: 0.5,
            f_max: 65504.0,
        };
        let c = converted_check(check, 0.125, 0.25);
        let f = |x: f64| Rational::from_f64(x).unwrap();
        let up = |what: &str, got: f64, want: Rational| {
            assert!(
                f(got) >= want && f(got) <= want.clone() * (&one + p2(-50)),
                "{what}"
            );
        };
        up("scale_w'", c.scale_w, f(1.5) * f(1.125));
        up("check abs'", c.abs, f(0.5) + f(1.5) * f(0.25));
        assert_eq!((c.scale_b, c.f_max), (1.25, 65504.0));
    }

    #[test]
    fn reduction_in_float16_and_float32() {
        let (g, abs) = reduction_terms(Format::Float16, false, 49);
        let one = Rational::from(1);
        let gamma = pow(&(&one + p2(-11)), 49) - &one;
        tight("gamma", &g, &gamma);
        tight(
            "abs",
            &abs,
            &(Rational::from(&one + &gamma) * Rational::from(49) * p2(-25)),
        );
        let (_, abs_ftz) = reduction_terms(Format::Float16, true, 49);
        tight(
            "abs ftz",
            &abs_ftz,
            &(Rational::from(&one + &gamma) * Rational::from(98) * p2(-14)),
        );
    }

    #[test]
    fn variants_put_the_bias_first_or_last_and_round_to_storage() {
        let b = BlockFma {
            block: 8,
            extra_bits: 1,
        };
        let chain = block_chain(b, 100, 100, -14, 0.0);
        let v = reduced_variants(
            &chain,
            Some((Format::Float16, 100)),
            Format::Float16,
            false,
            &[],
        );
        assert_eq!(v.len(), 2);
        let (first, first_checks) = &v[0];
        let (last, last_checks) = &v[1];
        // reduction, storage rounding: two more checks; the epilogue adds one
        assert_eq!(first_checks.len(), 3);
        assert_eq!(last_checks.len(), 4);
        assert_eq!(first_checks[1].f_max, 65504.0);
        // bias first: rel_b = rel_w; bias in the epilogue: one float32 rounding, then float16
        assert_eq!(first.rel_b, first.rel_w);
        let one = Rational::from(1);
        let want = (&one + p2(-24)) * (&one + p2(-11)) - &one;
        tight("epilogue rel_b", &last.rel_b, &want);
        // the chain's own error, the reduction's and the storage rounding compose
        let (g, _) = reduction_terms(Format::Float16, false, 100);
        let want_w =
            (&one + q(&chain.with_bias.0.rel_w)) * (&one + q(&g)) * (&one + p2(-11)) - &one;
        tight("rel_w", &first.rel_w, &want_w);
    }
}
