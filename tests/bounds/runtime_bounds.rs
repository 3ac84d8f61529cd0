//! Pins of the model-level constants that only runtimes beyond IEEE accumulation add
//! (docs/soundness.md "Runtimes beyond IEEE accumulation"), each against values written out here
//! in exact rationals, not taken from the production code:
//!
//! * under TF32 tensor cores every layer's `rel_w` covers the A100 block-FMA chain after the
//!   operand conversion, with or without split-K;
//! * weights an operand conversion cannot hold (subnormal in TF32, above its largest value) make
//!   the certificate vacuous, exactly at the format's boundaries;
//! * float16 weights below the tensor cores' normal range widen `|| |W| ||`, the rows of the
//!   overflow checks, the output pairs and the componentwise products by `2 lambda` each
//!   ("Subnormal tensor-core inputs").
//!
//! A value `got` of lipfp's is accepted when it is at least the exact value and (where stated)
//! within a relative `2^-40` of it: only directed `f64` steps separate them.

use crate::common::exact_bounds::net;
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::arith::runtime::{Runtime, RuntimeChoice};
use lipfp::bounds::certify::componentwise::AbsWeights;
use lipfp::bounds::certify::ModelBounds;
use lipfp::bounds::norms::LayerNorms;
use ndarray::Array2;
use rug::Rational;

fn q(x: f64) -> Rational {
    Rational::from_f64(x).unwrap()
}

fn p2(e: i32) -> Rational {
    if e >= 0 {
        Rational::from(1) << e as u32
    } else {
        Rational::from(1) >> (-e) as u32
    }
}

/// `(1 + x)^k`.
fn pow1p(x: &Rational, k: u32) -> Rational {
    let base = Rational::from(x + 1u32);
    (0..k).fold(Rational::from(1), |acc, _| acc * &base)
}

/// `got >= exact`, and within a relative `2^-40` when `tight`.
fn above(what: &str, got: f64, exact: &Rational, tight: bool) {
    let g = q(got);
    assert!(
        g >= *exact,
        "{what}: {got} below the exact {}",
        exact.to_f64()
    );
    if tight {
        let limit = exact * (p2(-40) + 1u32);
        assert!(g <= limit, "{what}: {got} not tight ({})", exact.to_f64());
    }
}

fn deployed(c: RuntimeChoice, storage: Format) -> ExecutionModel {
    c.deployment(storage, None, false)
        .unwrap_or_else(|e| panic!("{e}"))
        .execution
}

/// Norm bounds valid for any matrix of this test: the Frobenius norm rounded up, twice.
fn norms(w: &Array2<f64>) -> LayerNorms {
    let frob = w.iter().map(|x| x * x).sum::<f64>().sqrt() * (1.0 + 1e-12) + 1e-300;
    LayerNorms {
        spectral: frob,
        abs_spectral: frob,
    }
}

fn bounds(net: &lipfp::onnx::model::DenseNet, exec: &ExecutionModel) -> ModelBounds {
    let n: Vec<LayerNorms> = net.layers.iter().map(|l| norms(&l.w)).collect();
    ModelBounds::new(net, &n, exec)
}

#[test]
fn tf32_layers_cover_the_a100_block_fma_chain_with_and_without_split_k() {
    // 64 -> 3, normal weights: 16 A100 TF32 blocks (b = 4, e = 1)
    let w = Array2::from_shape_fn((3, 64), |(i, j)| 0.25 + ((i * 64 + j) % 7) as f64 / 16.0);
    let m = net(Format::Float32, vec![w], vec![vec![0.5, -0.25, 0.125]]);
    let full = deployed(
        RuntimeChoice::new(Runtime::OnnxruntimeCuda),
        Format::Float32,
    );
    let no_split = ExecutionModel {
        split_k: None,
        ..full
    };
    // theta = 2^-23 + 5 2^-24 (1 + 2^-23); rho = (1 + theta)^16 - 1; truncation to TF32:
    // eta = (1 + 2^-10)^2 - 1; rel_w >= (1 + eta)(1 + rho) - 1
    let theta = p2(-23) + Rational::from(5) * p2(-24) * (p2(-23) + 1u32);
    let rho = pow1p(&theta, 16) - 1u32;
    let eta = pow1p(&p2(-10), 2) - 1u32;
    let want = (eta + 1u32) * (rho + 1u32) - 1u32;
    // the IEEE sum alone gives less: gamma_65 = (1 + 2^-24)^65 - 1 composed the same way
    let ieee = (pow1p(&p2(-10), 2)) * pow1p(&p2(-24), 65) - 1u32;
    assert!(
        want > ieee,
        "the block chain must dominate here for the test to mean anything"
    );
    for (what, exec) in [("split-K", full), ("no split-K", no_split)] {
        let b = bounds(&m, &exec);
        assert!(b.vacuous.is_none(), "{what}: {:?}", b.vacuous);
        let rel_w = b.layers[0].rounding.expect("a dense layer").rel_w;
        above(&format!("{what}: rel_w"), rel_w, &want, false);
        // converted products stay below half of float32's range; inputs below TF32's largest
        let o = &b.layers[0].overflow;
        assert_eq!(o.product_f_max, f32::MAX as f64 / 2.0, "{what}");
        assert_eq!(
            o.input_f_max,
            (2.0 - 2f64.powi(-10)) * 2f64.powi(127),
            "{what}"
        );
    }
}

/// A float32 net with one 4 -> 2 layer holding `special` among ordinary weights and a zero.
fn with_weight(special: f64) -> lipfp::onnx::model::DenseNet {
    let w = ndarray::arr2(&[[0.5, special, 0.0, -0.25], [0.75, -0.5, 0.25, 0.125]]);
    net(Format::Float32, vec![w], vec![vec![0.0, 0.0]])
}

#[test]
fn weights_tf32_cannot_hold_make_the_certificate_vacuous_exactly_at_its_boundaries() {
    let exec = deployed(
        RuntimeChoice::new(Runtime::OnnxruntimeCuda),
        Format::Float32,
    );
    let lambda = 2f64.powi(-126);
    // TF32's largest value (2 - 2^-10) 2^127, and the next float32 above it
    let tf32_max = (2.0 - 2f64.powi(-10)) * 2f64.powi(127);
    let above_max = (tf32_max as f32).next_up() as f64;
    for (special, refused) in [
        (lambda, false),       // the smallest normal converts
        (lambda / 2.0, true),  // float32 subnormal: not a relative error
        (-lambda / 2.0, true), // either sign
        (tf32_max, false),     // the largest TF32 value converts
        (above_max, true),     // above it: rounds or truncates past the range
        (1.0, false),          // an ordinary weight (and the zero beside it)
    ] {
        let b = bounds(&with_weight(special), &exec);
        assert_eq!(
            b.vacuous.is_some(),
            refused,
            "weight {special:e}: {:?}",
            b.vacuous
        );
        if let Some(why) = &b.vacuous {
            assert!(why.contains("layer 1") && why.contains("tf32"), "{why}");
        }
    }
}

#[test]
fn subnormal_float16_weights_widen_every_use_of_abs_w_on_tensor_cores() {
    let lambda = 2f64.powi(-14);
    let sub = 3.0 * 2f64.powi(-24); // a float16 subnormal
                                    // row 0: two subnormals, a zero and the smallest normal (not widened); row 1: one subnormal
    let w = ndarray::arr2(&[
        [0.5, sub, -sub, 0.0, lambda],
        [-0.25, 0.125, 0.0, sub, 0.75],
    ]);
    let m = net(Format::Float16, vec![w.clone()], vec![vec![0.0, 0.0]]);
    let rpr_off = RuntimeChoice {
        reduced_precision_reduction: Some(false),
        ..RuntimeChoice::new(Runtime::PytorchCuda)
    };
    let exec = deployed(rpr_off, Format::Float16);
    let b = bounds(&m, &exec);
    assert!(b.vacuous.is_none(), "{:?}", b.vacuous);
    let lb = &b.layers[0];
    let rel_w = lb.rounding.expect("a dense layer").rel_w;
    let two_lambda = q(2.0 * lambda);
    // || |W| || + 2 lambda sqrt(3): compare squares against the exact sqrt's enclosure
    let base = q(norms(&w).abs_spectral);
    let kappa = q(lb.kappa_abs) / q(rel_w);
    let lo = &base + &two_lambda * q(3f64.sqrt().next_down());
    let hi = &base + &two_lambda * q(3f64.sqrt().next_up());
    assert!(kappa >= lo, "kappa_abs misses 2 lambda sqrt(3)");
    assert!(kappa <= hi * (p2(-40) + 1u32), "kappa_abs is loose");
    // the overflow rows: max_i ||w_i||_2 + 2 lambda sqrt(k_i), row 0 has k = 2
    let row = |r: usize| -> Rational {
        w.row(r)
            .iter()
            .fold(Rational::new(), |s, &x| s + q(x) * q(x))
    };
    let rows = [row(0), row(1)];
    let norm_max = rows.iter().map(|r| r.to_f64().sqrt()).fold(0.0, f64::max);
    let want = q(norm_max.next_down()) + &two_lambda * q(2f64.sqrt().next_down());
    above("row_l2_max", lb.overflow.row_l2_max, &want, false);
    let loose = q(norm_max.next_up()) + &two_lambda * q(2f64.sqrt().next_up());
    assert!(
        q(lb.overflow.row_l2_max) <= loose * (p2(-40) + 1u32),
        "row_l2_max is loose"
    );
    // the output pair (0, 1): rel_w ||(|w_0| + 2 lambda [sub]) + (|w_1| + 2 lambda [sub])||
    let widened = |x: f64| {
        if x != 0.0 && x.abs() < lambda {
            q(x.abs()) + &two_lambda
        } else {
            q(x.abs())
        }
    };
    let sq: Rational = (0..5)
        .map(|j| {
            let s = widened(w[[0, j]]) + widened(w[[1, j]]);
            Rational::from(&s * &s)
        })
        .sum();
    let pair = b.pair(0, 1).kappa_abs;
    let got_sq = q(pair) * q(pair);
    let rel_sq = q(rel_w) * q(rel_w);
    assert!(
        got_sq >= Rational::from(&rel_sq * &sq),
        "pair kappa misses the widening"
    );
    assert!(
        got_sq <= rel_sq * sq * (p2(-38) + 1u32),
        "pair kappa is loose"
    );
    // the componentwise products |W| |x| with the same widening
    let x = ndarray::arr2(&[[1.0, 2.0, 4.0, 8.0, 0.5]]);
    let p = AbsWeights::new(&m, &exec).measure(x.view(), &[]);
    for (i, &got) in p.last.iter().enumerate() {
        let exact: Rational = (0..5).map(|j| widened(w[[i, j]]) * q(x[[0, j]])).sum();
        above(&format!("|W| |x| row {i}"), got, &exact, true);
    }
}
