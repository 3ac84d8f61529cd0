//! The model-level constants of each layer and of the output layer's class pairs: the error
//! terms of every execution the model covers (docs/soundness.md "The execution model"), a dense
//! layer's constants from its norms, an affine step's from [`super::affine`].

use crate::arith::execution::{ExecutionModel, OperandConversion};
use crate::arith::format::Format;
use crate::arith::sound::{add_up, l2_norm_up, mul_up, sqrt_up};
use crate::bounds::local::LayerRounding;
use crate::bounds::norms::LayerNorms;
use crate::onnx::model::Dense;

use super::model_bounds::{LayerBounds, PairBounds};
use super::quantities::{
    accumulator_check, step_check, LayerError, OverflowCheck, OverflowConstants,
};
use super::{affine, tensor_core};

/// The executions of one layer in accumulation format `acc`, as error terms and the overflow
/// checks along the way (docs/soundness.md "The execution model"):
///
/// * fused: the products and the bias summed in `acc`, then (when `acc` is wider than the storage
///   format) one rounding to storage;
/// * split (only when `acc` is wider and the graph adds the bias with a separate `Add` node): a
///   `MatMul` summing the products in `acc`, rounded to storage, then the `Add` of the bias in
///   storage, as a runtime that does not fuse the two nodes computes them;
///
/// each followed by the graph's narrowing casts.
fn accumulation_variants(
    acc: Format,
    storage: Format,
    ftz: bool,
    n: u64,
    separate_bias: bool,
    casts: &[Format],
) -> Vec<(LayerError, Vec<OverflowCheck>)> {
    let mut variants = Vec::new();
    let mut fused = LayerError::accumulation(acc, ftz, n);
    let mut checks = vec![accumulator_check(acc, ftz, n)];
    if acc != storage {
        checks.push(step_check(&fused, storage));
        fused = fused.then_rounded(storage, ftz);
    }
    if acc != storage && separate_bias {
        // the products alone stay within the fused bounds up to the storage rounding
        let products = LayerError::products(acc, ftz, n).then_rounded(storage, ftz);
        let split_checks = vec![step_check(&products, storage)];
        variants.push((products.then_bias_added(storage, ftz), split_checks));
    }
    variants.push((fused, checks));
    for (err, checks) in &mut variants {
        for &c in casts {
            checks.push(step_check(err, c));
            *err = err.then_rounded(c, ftz);
        }
    }
    variants
}

/// The number of rounded terms a layer's sums are bounded with: its `n` products, or
/// `2n + 2t + 2` when the layer is a bias-free `MatMul` directly after a step whose last `t` ops
/// multiply or divide by one value — onnxruntime then folds them into the product
/// (`MatMulScaleFusion`: `alpha`, computed from the `t` constants with at most two roundings
/// each, applied to each partial sum; docs/soundness.md "Affine steps"): at most one more
/// rounding per product, `2t` for `alpha` and one for the result. The step's own bound stays in
/// the chain, so both executions are covered.
fn rounded_terms(layer: &Dense, previous: Option<&Dense>) -> u64 {
    let n = layer.n() as u64;
    let t = previous
        .and_then(|p| p.affine.as_ref())
        .map_or(0, |s| s.trailing_scalar_scalings()) as u64;
    if t > 0 && layer.product_is_matmul() {
        2 * n + 2 * t + 2
    } else {
        n
    }
}

/// The error terms of one layer maximised over every covered execution, all their overflow
/// checks, and the vacuity reason if some `n * u >= 1` or the layer's weights cannot be
/// converted to the runtime's operand format without an unmodelled absolute error.
pub(super) fn layer_terms(
    exec: &ExecutionModel,
    layer: &Dense,
    previous: Option<&Dense>,
    index: usize,
) -> (LayerError, Vec<OverflowCheck>, Option<String>) {
    let n = rounded_terms(layer, previous);
    let casts: &[Format] = if exec.executes_casts {
        &layer.casts
    } else {
        &[]
    };
    let mut variants = Vec::new();
    let mut vacuous = None;
    let separate_bias = layer.bias_is_separate();
    for acc in exec.accumulations() {
        let u = acc.unit_roundoff();
        if (n as f64) * u >= 1.0 && vacuous.is_none() {
            vacuous = Some(format!(
                "layer {}: n*u = {n} * 2^-{} = {:.3} >= 1 with {acc} accumulation; the error bounds are vacuous",
                index + 1,
                acc.precision(),
                n as f64 * u
            ));
        }
        variants.extend(accumulation_variants(
            acc,
            exec.storage,
            exec.ftz,
            n,
            separate_bias,
            casts,
        ));
    }
    let row_l1_max = layer
        .w
        .rows()
        .into_iter()
        .map(|r| r.iter().fold(0.0, |a, &x| add_up(a, x.abs())))
        .fold(0.0, f64::max);
    variants.extend(beyond_ieee_variants(exec, layer, n, casts));
    if let Some(o) = exec.output_rounding {
        let stored: Vec<_> = variants
            .iter()
            .map(|(e, c)| {
                let mut c = c.clone();
                c.push(step_check(e, o));
                (e.then_rounded(o, exec.ftz), c)
            })
            .collect();
        variants.extend(stored);
    }
    if let Some(conv) = exec.operand {
        if let Some(why) = unconvertible_weight(layer, conv) {
            vacuous.get_or_insert(format!("layer {}: {why}", index + 1));
        }
        let eta = tensor_core::conversion_eta(conv);
        let conv_abs = tensor_core::conversion_abs(conv, row_l1_max);
        let (eta_up, abs_up) = (
            eta.to_f64_round(rug::float::Round::Up),
            conv_abs.to_f64_round(rug::float::Round::Up),
        );
        for (e, c) in &mut variants {
            *e = tensor_core::after_conversion(e, conv, &eta, &conv_abs);
            for k in c.iter_mut() {
                *k = tensor_core::converted_check(*k, eta_up, abs_up);
            }
        }
    }
    let mut err: Option<LayerError> = None;
    let mut checks = Vec::new();
    for (e, c) in variants {
        err = Some(match err {
            Some(prev) => prev.max(e),
            None => e,
        });
        checks.extend(c);
    }
    let err = err.expect("every execution model has an accumulation format");
    (err, checks, vacuous)
}

/// The tensor-core and split-K executions of a layer of `n` products (none for the IEEE model):
/// float32 main loops (IEEE in any order, and every covered generation's block FMA), split into
/// at most `n` partial sums when split-K is covered.
fn beyond_ieee_variants(
    exec: &ExecutionModel,
    layer: &Dense,
    n: u64,
    casts: &[Format],
) -> Vec<(LayerError, Vec<OverflowCheck>)> {
    if exec.tensor_cores.is_none() && exec.split_k.is_none() {
        return Vec::new();
    }
    let splits = if exec.split_k.is_some() { n.max(1) } else { 1 };
    let mut chains = vec![tensor_core::ieee_chain(exec.ftz, n)];
    if let (Some(tc), Some(lambda_exp)) = (exec.tensor_cores, exec.tensor_input_emin()) {
        let nominal =
            tensor_core::nominal_l1(layer.w.view(), crate::arith::format::pow2(lambda_exp));
        for (_, b) in tc.blocks() {
            chains.push(tensor_core::block_chain(b, n, splits, lambda_exp, nominal));
        }
    }
    let split = exec.split_k.map(|r| (r, splits));
    chains
        .iter()
        .flat_map(|c| tensor_core::reduced_variants(c, split, exec.storage, exec.ftz, casts))
        .collect()
}

/// Why a weight or bias of `layer` cannot be converted to the operand format with a relative error
/// alone: nonzero and below its normal range, or rounding past its largest finite value.
fn unconvertible_weight(layer: &Dense, conv: OperandConversion) -> Option<String> {
    let lambda = crate::arith::format::pow2(conv.format.emin());
    let f_max = conv.format.f_max();
    layer.w.iter().chain(layer.b.iter()).find_map(|&w| {
        let a = w.abs();
        if a != 0.0 && a < lambda {
            Some(format!(
                "parameter {w:e} is subnormal in {}: its conversion error is not modelled",
                conv.format.name()
            ))
        } else if a > f_max {
            Some(format!(
                "parameter {w:e} exceeds the largest {} value",
                conv.format.name()
            ))
        } else {
            None
        }
    })
}

/// The ordered class pairs of the output layer (Lemma "Final-layer pairwise deviation"), with
/// the output layer's error terms `err`: `alpha^{ij} = ||w_i - w_j|| + rel_w ||(|w_i| + |w_j|)||`,
/// `beta_const^{ij} = rel_b (|b_i| + |b_j|) + 2 abs`, `L_{ij} = ||w_i - w_j|| prefix`.
pub(super) fn pair_table(
    last: &Dense,
    err: &LayerError,
    prefix: f64,
    lambda: Option<f64>,
) -> Vec<PairBounds> {
    let up = |x: &rug::Float| x.to_f64_round(rug::float::Round::Up);
    let (rel_w, rel_b, abs) = (up(&err.rel_w), up(&err.rel_b), up(&err.abs));
    let pair_const = mul_up(2.0, abs);
    let classes = last.m();
    let mut pairs = vec![PairBounds::default(); classes * classes];
    for i in 0..classes {
        for j in 0..classes {
            if i == j {
                continue;
            }
            let (wi, wj) = (last.w.row(i), last.w.row(j));
            // |w_i - w_j| and |w_i| + |w_j| rounded up entrywise
            let diff = l2_norm_up(
                wi.iter()
                    .zip(wj.iter())
                    .map(|(a, b)| (a - b).abs().next_up()),
            );
            let sum = l2_norm_up(wi.iter().zip(wj.iter()).map(|(&a, &b)| {
                add_up(
                    tensor_core::alignment_weight(a, lambda),
                    tensor_core::alignment_weight(b, lambda),
                )
            }));
            let kappa_abs = mul_up(rel_w, sum);
            let bias = add_up(last.b[i].abs(), last.b[j].abs());
            pairs[i * classes + j] = PairBounds {
                alpha: add_up(diff, kappa_abs),
                kappa_abs,
                beta_const: add_up(mul_up(rel_b, bias), pair_const),
                lip: mul_up(diff, prefix),
                diff,
            };
        }
    }
    pairs
}

/// What the weights below the tensor cores' normal range `lambda` add to `|W|` in the
/// `rel_w |W| |z|` term ([`tensor_core::alignment_weight`]: `2 lambda` at each): at most
/// `2 lambda sqrt(k)` to `|| |W| ||_2` (`k` such weights; the Frobenius norm of the added
/// matrix) and `2 lambda sqrt(k_i)` to row `i`'s `l2` norm, rounded up. Zero without tensor cores.
fn subnormal_bumps(layer: &Dense, lambda: Option<f64>) -> (f64, f64) {
    let Some(lambda) = lambda else {
        return (0.0, 0.0);
    };
    let is_sub = |w: &f64| *w != 0.0 && w.abs() < lambda;
    let total = layer.w.iter().filter(|w| is_sub(w)).count();
    let row_max = layer
        .w
        .rows()
        .into_iter()
        .map(|r| r.iter().filter(|w| is_sub(w)).count())
        .max()
        .unwrap_or(0);
    let two_lambda = mul_up(2.0, lambda);
    (
        mul_up(two_lambda, sqrt_up(total as f64)),
        mul_up(two_lambda, sqrt_up(row_max as f64)),
    )
}

/// The constants of a dense layer from its norms and error terms.
pub(super) fn dense_layer_bounds(
    layer: &Dense,
    nrm: &LayerNorms,
    err: &LayerError,
    exec: &ExecutionModel,
    checks: Vec<OverflowCheck>,
) -> LayerBounds {
    let up = |x: &rug::Float| x.to_f64_round(rug::float::Round::Up);
    let rel_w = up(&err.rel_w);
    let lambda = exec.tensor_input_emin().map(crate::arith::format::pow2);
    let (abs_bump, row_bump) = subnormal_bumps(layer, lambda);
    let kappa_abs = mul_up(rel_w, add_up(nrm.abs_spectral, abs_bump));
    let bias_l2 = l2_norm_up(layer.b.iter().copied());
    let sqrt_m = sqrt_up(layer.m() as f64);
    let beta_const = add_up(
        mul_up(up(&err.rel_b), bias_l2),
        mul_up(up(&err.abs), sqrt_m),
    );
    let row_l2_max = layer
        .w
        .rows()
        .into_iter()
        .map(|r| l2_norm_up(r.iter().copied()))
        .fold(0.0, f64::max);
    let row_l2_max = add_up(row_l2_max, row_bump);
    let row_inf_max = layer.w.iter().fold(0.0f64, |a, &x| a.max(x.abs()));
    let product_f_max = exec
        .accumulations()
        .into_iter()
        .map(Format::f_max)
        .fold(f64::INFINITY, f64::min);
    // converted products are at most (1 + eta) |w| |z| plus a subnormal term: half the range
    // leaves room for both (eta < 1); an input converted to nearest stays finite below the
    // operand format's largest value (truncation covers nearest, so both modes check it)
    let (product_f_max, input_f_max) = match exec.operand {
        Some(c) => (product_f_max / 2.0, c.format.f_max()),
        None => (product_f_max, f64::INFINITY),
    };
    LayerBounds {
        spectral: nrm.spectral,
        alpha: add_up(nrm.spectral, kappa_abs),
        kappa_abs,
        beta_const,
        bias_l2,
        overflow: OverflowConstants {
            row_l2_max,
            row_inf_max,
            bias_inf: layer.b.iter().fold(0.0f64, |a, &x| a.max(x.abs())),
            product_f_max,
            checks,
            input_f_max,
        },
        rounding: Some(LayerRounding {
            rel_w,
            rel_b: up(&err.rel_b),
            abs: up(&err.abs),
        }),
    }
}

/// The constants of an affine step (`W = diag(a)`: [`affine::StepBounds`]).
pub(super) fn step_layer_bounds(s: &affine::StepBounds) -> LayerBounds {
    LayerBounds {
        spectral: s.scale_max,
        alpha: add_up(s.scale_max, s.error_rel),
        kappa_abs: s.error_rel,
        beta_const: s.error_const,
        bias_l2: s.shift_l2,
        overflow: s.overflow.clone(),
        rounding: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::model::{Activation, AffineStep, ElementOp};
    use ndarray::Array2;

    fn dense(op: &str) -> Dense {
        Dense {
            w: Array2::zeros((2, 4)),
            b: vec![0.0; 2],
            act: Activation::Identity,
            nodes: vec![],
            ops: vec![op.into()],
            casts: vec![],
            affine: None,
        }
    }

    fn step(ops: Vec<ElementOp>) -> Dense {
        Dense {
            w: Array2::zeros((0, 0)),
            b: vec![],
            act: Activation::Identity,
            nodes: vec![],
            ops: vec![],
            casts: vec![],
            affine: Some(AffineStep { width: 4, ops }),
        }
    }

    /// onnxruntime folds the trailing scalar Mul/Div run before a bias-free MatMul (a Sub of a
    /// vector before it stays): `2n + 2t + 2` terms; vectors, Gemm and other steps keep `n`.
    #[test]
    fn scalar_scalings_before_a_matmul_count_their_fold() {
        let k = |v: f64| vec![v; 4];
        let cases = [
            (vec![ElementOp::Mul(k(3.0))], "MatMul", 2 * 4 + 2 + 2),
            (
                vec![ElementOp::Mul(k(3.0)), ElementOp::Mul(k(5.0))],
                "MatMul",
                8 + 4 + 2,
            ),
            (
                vec![
                    ElementOp::Add(vec![1.0, 2.0, 3.0, 4.0]),
                    ElementOp::Div(k(3.0)),
                ],
                "MatMul",
                12,
            ),
            (
                vec![ElementOp::Div(k(3.0)), ElementOp::Add(k(1.0))],
                "MatMul",
                4,
            ),
            (vec![ElementOp::Mul(vec![1.0, 2.0, 3.0, 4.0])], "MatMul", 4),
            (vec![ElementOp::Mul(k(3.0))], "Gemm", 4),
        ];
        for (ops, op, want) in cases {
            let prev = step(ops.clone());
            assert_eq!(rounded_terms(&dense(op), Some(&prev)), want, "{ops:?} {op}");
        }
        assert_eq!(rounded_terms(&dense("MatMul"), None), 4);
    }
}
