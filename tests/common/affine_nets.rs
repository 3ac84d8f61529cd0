//! Small float32 classifiers with elementwise affine steps as exporters write them (a
//! normalisation, BatchNorm after a layer, Scaler, Keras' Sub/Mul, a scalar Mul or Div before a
//! bias-free MatMul), their exact logits, and the check that a runtime's margins stay within
//! `ModelBounds::margin_deviation` of the exact network's (`tests/oracles/affine_steps.rs`,
//! `tests/oracles/affine_steps_runtime.rs`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use super::affine::{exact_step, q, ulp, Iv};
use super::onnx_builder::*;
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::bounds::certify::ModelBounds;
use lipfp::bounds::norms::compute_norms;
use lipfp::engine::exec::{Executor, Hidden};
use lipfp::onnx::model::{Activation, DenseNet};
use ndarray::ArrayView2;
use rug::Rational;

pub const N_IN: usize = 8;

/// Small classifiers with a step, as exporters write them (float32).
pub fn net_model(kind: &str, dir: &Path) -> (PathBuf, usize) {
    let mut rng = Lcg::new(41);
    let mut b = ModelBuilder::new();
    let n = match kind {
        k if k.starts_with("scale_") => 300,
        "channels" => 12,
        _ => N_IN,
    };
    if kind == "channels" {
        b.input_f32("x", &[2, 3, 2]);
    } else {
        b.input_f32("x", &[n]);
    }
    let mean: Vec<f32> = rng.f32s(n, 5.0);
    let std: Vec<f32> = (0..n).map(|_| 0.05 + 3.0 * rng.sym_f32().abs()).collect();
    let recip: Vec<f32> = std.iter().map(|s| 1.0 / s).collect();
    b.init_f32("mean", &[n], &mean).init_f32("std", &[n], &std);
    b.init_f32("recip", &[n], &recip);
    b.init_f32("W1", &[16, n], &rng.f32s(16 * n, 0.7));
    b.init_f32("W1t", &[n, 16], &rng.f32s(16 * n, 0.7));
    b.init_f32("B1", &[16], &rng.f32s(16, 0.5));
    b.init_f32("W2", &[4, 16], &rng.f32s(64, 1.0));
    b.init_f32("W2t", &[16, 4], &rng.f32s(64, 1.0));
    b.init_f32("B2", &[4], &rng.f32s(4, 0.5));
    let t = || vec![attr_int("transB", 1)];
    let head = |b: &mut ModelBuilder, h: &str| {
        b.node("Relu", "relu", &[h], &["a"], vec![]);
        b.node("Gemm", "fc2", &["a", "W2", "B2"], &["y"], t());
    };
    match kind {
        "normalise" => {
            b.node("Sub", "sub", &["x", "mean"], &["s1"], vec![]);
            b.node("Div", "div", &["s1", "std"], &["s2"], vec![]);
            b.node("Gemm", "fc1", &["s2", "W1", "B1"], &["h"], t());
            head(&mut b, "h");
        }
        "batchnorm" => {
            let var: Vec<f32> = (0..16).map(|k| [0.0, 1e-6, 4.0, 0.3][k % 4]).collect();
            b.init_f32("bn_s", &[16], &rng.f32s(16, 2.0));
            b.init_f32("bn_b", &[16], &rng.f32s(16, 1.0));
            b.init_f32("bn_m", &[16], &rng.f32s(16, 1.0));
            b.init_f32("bn_v", &[16], &var);
            b.node("Gemm", "fc1", &["x", "W1", "B1"], &["h"], t());
            let ins = ["h", "bn_s", "bn_b", "bn_m", "bn_v"];
            b.node("BatchNormalization", "bn", &ins, &["hb"], vec![]);
            head(&mut b, "hb");
        }
        "scaler" => {
            let neg: Vec<f32> = mean.to_vec();
            let mut sc = node(
                "Scaler",
                "scaler",
                &["x"],
                &["s"],
                vec![attr_floats("offset", &neg), attr_floats("scale", &recip)],
            );
            sc.domain = "ai.onnx.ml".into();
            b.import_domain("ai.onnx.ml", 1).push(sc);
            b.node("MatMul", "mm1", &["s", "W1t"], &["p"], vec![]);
            b.node("Add", "add1", &["p", "B1"], &["h"], vec![]);
            b.node("Relu", "relu", &["h"], &["a"], vec![]);
            b.node("MatMul", "mm2", &["a", "W2t"], &["p2"], vec![]);
            b.node("Add", "add2", &["p2", "B2"], &["y"], vec![]);
        }
        "keras" => {
            b.node("Sub", "sub", &["x", "mean"], &["s1"], vec![]);
            b.node("Mul", "mul", &["s1", "recip"], &["s2"], vec![]);
            b.node("MatMul", "mm1", &["s2", "W1t"], &["p"], vec![]);
            b.node("Add", "add1", &["p", "B1"], &["h"], vec![]);
            head(&mut b, "h");
        }
        "channels" => {
            // per-channel normalisation of a [C=2, H=3, W=2] image, as torchvision's Normalize
            // baked into a model exports, a per-row offset and a BatchNorm2d, then Flatten
            b.init_f32("c_mean", &[2, 1, 1], &[0.4, -1.5]);
            b.init_f32("c_std", &[1, 2, 1, 1], &[0.25, 3.0]);
            b.init_f32("h_off", &[3, 1], &[0.5, -0.125, 2.0]);
            b.init_f32("bn_s", &[2], &[1.5, -0.5]);
            b.init_f32("bn_b", &[2], &[0.1, 0.3]);
            b.init_f32("bn_m", &[2], &[-0.2, 0.7]);
            b.init_f32("bn_v", &[2], &[0.5, 2.0]);
            b.node("Sub", "sub", &["x", "c_mean"], &["s1"], vec![]);
            b.node("Div", "div", &["s1", "c_std"], &["s2"], vec![]);
            b.node("Add", "add", &["s2", "h_off"], &["s3"], vec![]);
            let ins = ["s3", "bn_s", "bn_b", "bn_m", "bn_v"];
            b.node("BatchNormalization", "bn", &ins, &["s4"], vec![]);
            b.node(
                "Flatten",
                "flat",
                &["s4"],
                &["f"],
                vec![attr_int("axis", 1)],
            );
            b.init_f32("W1c", &[16, 12], &rng.f32s(16 * 12, 0.7));
            b.node("Gemm", "fc1", &["f", "W1c", "B1"], &["h"], t());
            head(&mut b, "h");
        }
        "scale_mul" | "scale_div" => {
            b.init_f32("alpha", &[], &[0.3]);
            let op = if kind == "scale_mul" { "Mul" } else { "Div" };
            b.node(op, "scale", &["x", "alpha"], &["s"], vec![]);
            b.node("MatMul", "mm1", &["s", "W1t"], &["h"], vec![]);
            head(&mut b, "h");
        }
        _ => unreachable!("{kind}"),
    }
    b.output_f32("y", 4);
    (b.write(dir, &format!("net_{kind}.onnx")), n)
}

pub const NETS: [&str; 7] = [
    "normalise",
    "batchnorm",
    "scaler",
    "keras",
    "scale_mul",
    "scale_div",
    "channels",
];

/// The exact logits of `net` at `x` (square roots enclosed).
pub fn exact_logits(net: &DenseNet, x: &[f64]) -> Vec<Iv> {
    let mut z: Vec<Iv> = x.iter().map(|&v| Iv::pt(q(v))).collect();
    for l in &net.layers {
        z = match &l.affine {
            Some(step) => (0..step.width)
                .map(|i| exact_step(step, i, z[i].clone()))
                .collect(),
            None => (0..l.m())
                .map(|r| {
                    let mut acc = Iv::pt(q(l.b[r]));
                    for (k, zk) in z.iter().enumerate() {
                        let w = l.w[[r, k]];
                        if w != 0.0 && (zk.lo != 0 || zk.hi != 0) {
                            let p = zk.mul(&q(w), &q(w));
                            acc = Iv {
                                lo: acc.lo + p.lo,
                                hi: acc.hi + p.hi,
                            };
                        }
                    }
                    acc
                })
                .collect(),
        };
        if l.act == Activation::Relu {
            z = z.iter().map(Iv::relu).collect();
        }
    }
    z
}

/// Inputs (float32 values): around the normalisation means (exactly on them and a few ulps
/// away, where `x - mean` cancels), random over binades, and large magnitudes.
pub fn net_inputs(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Lcg::new(41);
    let mean: Vec<f64> = rng.f32s(n, 5.0).into_iter().map(f64::from).collect();
    let mut rng = Lcg::new(seed);
    let mut rows = Vec::new();
    for r in 0..96 {
        for &m in &mean {
            let v = match r % 6 {
                0 => m + f64::from((rng.next_u64() % 7) as i32 - 3) * ulp(Format::Float32, m),
                1 => m + rng.sym_f64() * 1e-3,
                2 => rng.sym_f64() * 10f64.powi(r % 5),
                3 => rng.sym_f64() * 1e4,
                4 => rng.sym_f64() * 1e-6,
                _ => m + rng.sym_f64() * 3.0,
            };
            rows.push(Format::Float32.round(v));
        }
    }
    rows
}

/// `|m_hat - m| <= margin_deviation` for every pair; returns the largest ratio and the count.
pub fn check_margins(
    kind: &str,
    who: &str,
    mb: &ModelBounds,
    x_norm: f64,
    y: &[f64],
    ex: &[Iv],
) -> (f64, usize) {
    let (mut worst, mut count) = (0.0f64, 0);
    for i in 0..y.len() {
        for j in (0..y.len()).filter(|&j| j != i) {
            let Ok(e) = mb.margin_deviation(x_norm, i, j) else {
                continue;
            };
            let m = Iv {
                lo: Rational::from(&ex[i].lo - &ex[j].hi),
                hi: Rational::from(&ex[i].hi - &ex[j].lo),
            };
            let dev = m.dev(&(q(y[i]) - q(y[j])));
            assert!(
                dev <= q(e),
                "{kind} {who}: pair ({i},{j}) |dev| {:e} > {e:e}",
                dev.to_f64()
            );
            count += 1;
            if e > 0.0 {
                worst = worst.max(dev.to_f64() / e);
            }
        }
    }
    (worst, count)
}

pub struct Prepared {
    pub net: DenseNet,
    pub mb: ModelBounds,
    pub x: Vec<f64>,
    pub n: usize,
    pub logits: Vec<f64>,
}

pub fn prepare(kind: &str, f: Format, dir: &Path) -> (PathBuf, Prepared) {
    let (model, n) = net_model(kind, dir);
    let net = lipfp::onnx::model::load(&model, f, false).unwrap_or_else(|e| panic!("{kind}: {e}"));
    assert!(
        net.layers.iter().any(|l| l.affine.is_some()),
        "{kind}: no step read"
    );
    let exec = ExecutionModel::deployed(f, None, false).unwrap();
    let mb = ModelBounds::new(&net, &compute_norms(&net, 12).unwrap(), &exec);
    assert!(mb.vacuous.is_none(), "{kind}: {:?}", mb.vacuous);
    let x: Vec<f64> = net_inputs(n, 9).into_iter().map(|v| f.round(v)).collect();
    let view = ArrayView2::from_shape((x.len() / n, n), &x).unwrap();
    let logits = Executor::new(&net, &exec)
        .forward_block(view, Hidden::None)
        .0;
    let logits = logits.into_iter().collect();
    (
        model,
        Prepared {
            net,
            mb,
            x,
            n,
            logits,
        },
    )
}
