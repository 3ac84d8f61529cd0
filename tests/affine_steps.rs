//! Elementwise affine steps (Sub/Add/Mul/Div by a constant, BatchNormalization, Scaler): the
//! error terms of `lipfp::certify::affine` are upper bounds of every execution lipfp covers.
//!
//! * Exact rationals, per op kind and format: each step is read by the real loader from a small
//!   ONNX model; at adversarial inputs (zero, subnormals, the largest finite values, values next
//!   to the step's root where the output cancels, random values over many binades) every
//!   emulated execution — each op rounded to storage, computed in the next wider format then
//!   rounded, a division as a multiplication by the rounded reciprocal, BatchNormalization as
//!   written or precomputed as onnxruntime does (`x * a_hat + b_hat`, with and without FMA) —
//!   is compared with the exact value `a x_hat + c` (square roots enclosed at 256 bits):
//!   per feature `|y_hat - (a x_hat + c)| <= e |x_hat| + f`, and the aggregate statement of
//!   `step_bounds`; `scale_max >= max |a|`, `shift_l2 >= ||c||`.
//! * Model level: lipfp's centre logits of small networks with steps stay within
//!   `ModelBounds::margin_deviation` of the exact network's margins.
//! * onnxruntime (default and disabled optimisations, so its folds are exercised): the same
//!   margins, and lipfp's class equals onnxruntime's wherever Standard certifies at `eps = 0`.

mod common;

use std::path::{Path, PathBuf};

use common::onnx_builder::*;
use common::runtime::{argmax, ort_logits, python};
use lipfp::certify::affine::step_bounds;
use lipfp::certify::{predicted_class, Centre, Certifier, Mode, ModelBounds};
use lipfp::exec::Executor;
use lipfp::execution::ExecutionModel;
use lipfp::format::Format;
use lipfp::model::{Activation, AffineStep, DenseNet, ElementOp};
use lipfp::norms::compute_norms;
use lipfp::sound::l2_norm_up;
use ndarray::ArrayView2;
use rug::float::Round;
use rug::{Float, Rational};

// ---------------------------------------------------------------------------------------------
// Exact enclosures
// ---------------------------------------------------------------------------------------------

fn q(x: f64) -> Rational {
    Rational::from_f64(x).unwrap_or_else(|| panic!("non-finite {x}"))
}

/// An enclosure `[lo, hi]` of an exact real value.
#[derive(Clone, Debug)]
struct Iv {
    lo: Rational,
    hi: Rational,
}

impl Iv {
    fn pt(v: Rational) -> Iv {
        Iv {
            lo: v.clone(),
            hi: v,
        }
    }
    fn add(&self, c: &Rational) -> Iv {
        Iv {
            lo: Rational::from(&self.lo + c),
            hi: Rational::from(&self.hi + c),
        }
    }
    fn neg(&self) -> Iv {
        Iv {
            lo: Rational::from(-&self.hi),
            hi: Rational::from(-&self.lo),
        }
    }
    /// Product with an enclosure `[k_lo, k_hi]`.
    fn mul(&self, k_lo: &Rational, k_hi: &Rational) -> Iv {
        let c = [
            Rational::from(&self.lo * k_lo),
            Rational::from(&self.lo * k_hi),
            Rational::from(&self.hi * k_lo),
            Rational::from(&self.hi * k_hi),
        ];
        Iv {
            lo: c.iter().min().unwrap().clone(),
            hi: c.iter().max().unwrap().clone(),
        }
    }
    fn relu(&self) -> Iv {
        let z = Rational::new();
        Iv {
            lo: self.lo.clone().max(z.clone()),
            hi: self.hi.clone().max(z),
        }
    }
    /// `max |y - v|` over the enclosure.
    fn dev(&self, y: &Rational) -> Rational {
        Rational::from(y - &self.lo)
            .abs()
            .max(Rational::from(y - &self.hi).abs())
    }
    fn mag(&self) -> Rational {
        self.lo.clone().abs().max(self.hi.clone().abs())
    }
}

/// `[1/sqrt(v)]` enclosed at 256 bits, `v > 0`.
fn inv_sqrt(v: &Rational) -> (Rational, Rational) {
    let root = |r: Round| {
        let mut f = Float::with_val_round(256, v, r).0;
        f.sqrt_round(r);
        f.to_rational().unwrap()
    };
    (root(Round::Up).recip(), root(Round::Down).recip())
}

/// The exact map of feature `i` of `step` on the enclosure `x`.
fn exact_step(step: &AffineStep, i: usize, x: Iv) -> Iv {
    step.ops.iter().fold(x, |v, op| match op {
        ElementOp::Neg => v.neg(),
        ElementOp::Add(c) => v.add(&q(c[i])),
        ElementOp::Mul(k) => v.mul(&q(k[i]), &q(k[i])),
        ElementOp::Div(k) => {
            let r = q(k[i]).recip();
            v.mul(&r, &r)
        }
        ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        } => {
            let (lo, hi) = inv_sqrt(&(q(var[i]) + q(*epsilon)));
            let t = v.add(&-q(mean[i])).mul(&q(scale[i]), &q(scale[i]));
            t.mul(&lo, &hi).add(&q(bias[i]))
        }
    })
}

/// The slope `a_i` of feature `i`, enclosed.
fn exact_slope(step: &AffineStep, i: usize) -> Iv {
    let c = exact_step(step, i, Iv::pt(Rational::new()));
    let one = exact_step(step, i, Iv::pt(Rational::from(1)));
    Iv {
        lo: Rational::from(&one.lo - &c.hi),
        hi: Rational::from(&one.hi - &c.lo),
    }
}

// ---------------------------------------------------------------------------------------------
// Emulated executions
// ---------------------------------------------------------------------------------------------

/// Where each op's result is rounded.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rnd {
    /// Once, to storage.
    Storage,
    /// To the next wider format, then to storage.
    Wider,
    /// To the next wider format only; storage at the end of the step (a chain a runtime computes
    /// in float32 between a cast in and a cast out; float16/bfloat16 only).
    ChainWide,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bn {
    Written,
    /// onnxruntime: `a = fl(fl(1/fl(sqrt(fl(var+eps))))*scale)`, `b = fl(bias - fl(mean*a))`.
    Pre,
    PreFma,
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    rnd: Rnd,
    bn: Bn,
    recip: bool,
}

fn variants(f: Format) -> Vec<Variant> {
    let mut out = Vec::new();
    for rnd in [Rnd::Storage, Rnd::Wider, Rnd::ChainWide] {
        if rnd == Rnd::ChainWide && !matches!(f, Format::Float16 | Format::Bfloat16) {
            continue;
        }
        for bn in [Bn::Written, Bn::Pre, Bn::PreFma] {
            for recip in [false, true] {
                out.push(Variant { rnd, bn, recip });
            }
        }
    }
    out
}

/// Feature `i` of `step` at `x` (a storage value) in execution `v`. Each op is computed in
/// `f64` (exact or correctly rounded) and then rounded as `v` says.
fn emulate(step: &AffineStep, i: usize, x: f64, f: Format, v: Variant) -> f64 {
    let w = f.next_wider().unwrap_or(f);
    let r = |t: f64| match v.rnd {
        Rnd::Storage => f.round(t),
        Rnd::Wider => f.round(w.round(t)),
        Rnd::ChainWide => w.round(t),
    };
    let y = step.ops.iter().fold(x, |y, op| match op {
        ElementOp::Neg => -y,
        ElementOp::Add(c) => r(y + c[i]),
        ElementOp::Mul(k) => r(y * k[i]),
        ElementOp::Div(k) if v.recip => r(y * r(1.0 / k[i])),
        ElementOp::Div(k) => r(y / k[i]),
        ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        } => {
            let root = r(r(var[i] + epsilon).sqrt());
            if v.bn == Bn::Written {
                let t = r(r(y - mean[i]) / root);
                return r(r(t * scale[i]) + bias[i]);
            }
            let a = r(r(1.0 / root) * scale[i]);
            let b = r(bias[i] - r(mean[i] * a));
            if v.bn == Bn::PreFma {
                r(y.mul_add(a, b))
            } else {
                r(r(y * a) + b)
            }
        }
    });
    f.round(y)
}

// ---------------------------------------------------------------------------------------------
// Steps read by the loader
// ---------------------------------------------------------------------------------------------

const W: usize = 5;

/// A model `x[N,5] -> <step nodes> -> Gemm -> logits[3]` whose step nodes are `kind`.
fn step_model(kind: &str, dir: &Path) -> PathBuf {
    step_model_with(kind, dir, false)
}

/// The step model, or with `bare` the step's output itself as the graph output.
fn step_model_with(kind: &str, dir: &Path, bare: bool) -> PathBuf {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[W]);
    let c = [1.5, -0.3, 1.0e4, -7.1e-3, 3.0e-7];
    let k = [0.1, -3.7, 1.0e-3, 2.5e3, 1.0e-6];
    let d = [0.3, -7.0, 1.0e-2, 255.0, 3.0e3];
    b.init_f32("c", &[W], &c).init_f32("k", &[W], &k);
    b.init_f32("d", &[W], &d);
    b.init_f32("s", &[], &[0.37]);
    b.init_f32("bn_scale", &[W], &[1.3, -0.7, 2.0e-3, 40.0, 1.0]);
    b.init_f32("bn_bias", &[W], &[0.1, -2.5, 1.0e3, 0.0, -1.0e-3]);
    b.init_f32("bn_mean", &[W], &[0.5, -1.2, 3.0e3, 1.0e-4, 7.0]);
    b.init_f32("bn_var", &[W], &[0.09, 2.0, 1.0e4, 1.0e-6, 0.0]);
    let bn = |b: &mut ModelBuilder, i: &str, o: &str| {
        let ins = [i, "bn_scale", "bn_bias", "bn_mean", "bn_var"];
        b.node("BatchNormalization", "bn", &ins, &[o], vec![]);
    };
    match kind {
        "add" => b.node("Add", "op", &["x", "c"], &["s_out"], vec![]),
        "sub" => b.node("Sub", "op", &["x", "c"], &["s_out"], vec![]),
        "neg_sub" => b.node("Sub", "op", &["c", "x"], &["s_out"], vec![]),
        "mul" => b.node("Mul", "op", &["x", "k"], &["s_out"], vec![]),
        "div" => b.node("Div", "op", &["x", "d"], &["s_out"], vec![]),
        "div_scalar" => b.node("Div", "op", &["x", "s"], &["s_out"], vec![]),
        "batchnorm" => {
            bn(&mut b, "x", "s_out");
            &mut b
        }
        "scaler" => {
            let mut n = node(
                "Scaler",
                "scaler",
                &["x"],
                &["s_out"],
                vec![attr_floats("offset", &c), attr_floats("scale", &k)],
            );
            n.domain = "ai.onnx.ml".into();
            b.import_domain("ai.onnx.ml", 1).push(n)
        }
        "sub_div" => b.node("Sub", "op1", &["x", "c"], &["t"], vec![]).node(
            "Div",
            "op2",
            &["t", "d"],
            &["s_out"],
            vec![],
        ),
        "sub_mul" => b.node("Sub", "op1", &["x", "c"], &["t"], vec![]).node(
            "Mul",
            "op2",
            &["t", "k"],
            &["s_out"],
            vec![],
        ),
        "sub_bn_mul" => {
            b.node("Sub", "op1", &["x", "c"], &["t"], vec![]);
            bn(&mut b, "t", "t2");
            b.node("Mul", "op2", &["t2", "k"], &["s_out"], vec![])
        }
        "tiny" => {
            // slopes in the subnormal range of float32 / float16 once precomputed
            b.init_f32("t_scale", &[W], &[1.0e-40, 3.0e-41, 1.0e-4, 3.0e-5, 1.7e-6]);
            b.init_f32("t_var", &[W], &[3.0, 7.0, 1.0e4, 5.0e3, 3.0]);
            b.init_f32("t_zero", &[W], &[0.0; W]);
            let ins = ["x", "t_scale", "t_zero", "t_zero", "t_var"];
            b.node("BatchNormalization", "bn", &ins, &["s_out"], vec![])
        }
        "div_huge" => {
            b.init_f32("h", &[W], &[3.0e38, 2.9e38, 1.1e38, 6.0e4, 3.0e4]);
            b.node("Div", "op", &["x", "h"], &["s_out"], vec![])
        }
        _ => unreachable!("{kind}"),
    };
    if bare {
        b.output_f32("s_out", W);
        return b.write(dir, &format!("{kind}_bare.onnx"));
    }
    let mut rng = Lcg::new(5);
    b.init_f32("W1", &[3, W], &rng.f32s(3 * W, 1.0));
    b.init_f32("B1", &[3], &rng.f32s(3, 1.0));
    let gemm = [attr_int("transB", 1)];
    b.node("Gemm", "fc", &["s_out", "W1", "B1"], &["y"], gemm.to_vec());
    b.output_f32("y", 3);
    b.write(dir, &format!("{kind}.onnx"))
}

const KINDS: [&str; 11] = [
    "add",
    "sub",
    "neg_sub",
    "mul",
    "div",
    "div_scalar",
    "batchnorm",
    "scaler",
    "sub_div",
    "sub_mul",
    "sub_bn_mul",
];

/// The loaded step of `kind` in format `f`.
fn loaded_step(kind: &str, f: Format, dir: &Path) -> AffineStep {
    let net = lipfp::model::load(&step_model(kind, dir), f, false)
        .unwrap_or_else(|e| panic!("{kind} {f}: {e}"));
    assert_eq!(net.layers.len(), 2, "{kind}: one step layer and the Gemm");
    net.layers[0]
        .affine
        .clone()
        .expect("the first layer is a step")
}

/// Feature `i` of `step` alone (its `e_i`, `f_i` through the public `step_bounds`).
fn feature_step(step: &AffineStep, i: usize) -> AffineStep {
    let one = |c: &[f64]| vec![c[i]];
    let ops = step.ops.iter().map(|op| match op {
        ElementOp::Neg => ElementOp::Neg,
        ElementOp::Add(c) => ElementOp::Add(one(c)),
        ElementOp::Mul(c) => ElementOp::Mul(one(c)),
        ElementOp::Div(c) => ElementOp::Div(one(c)),
        ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        } => ElementOp::BatchNorm {
            scale: one(scale),
            bias: one(bias),
            mean: one(mean),
            var: one(var),
            epsilon: *epsilon,
        },
    });
    AffineStep {
        width: 1,
        ops: ops.collect(),
    }
}

/// The spacing of `f` at `x`.
fn ulp(f: Format, x: f64) -> f64 {
    let e = if x == 0.0 {
        f.emin()
    } else {
        x.abs().log2().floor() as i32
    };
    2f64.powi(e.max(f.emin()) - f.precision() as i32 + 1)
}

/// Adversarial storage values for feature `i`: zero, subnormals, the extremes, values next to
/// the step's root (where the output cancels) and to the BatchNorm mean, random binades.
fn inputs(step: &AffineStep, i: usize, f: Format, seed: u64) -> Vec<f64> {
    let mut v = vec![0.0, 1.0, -1.0, 0.5, f.lambda(), -f.lambda() * 0.5];
    v.push(f.lambda() * f.unit_roundoff() * 2.0); // the smallest subnormal
    v.extend([f.f_max(), -f.f_max() * 0.5, f.f_max() * 2f64.powi(-12)]);
    let mut roots = Vec::new();
    let c = exact_step(step, i, Iv::pt(Rational::new()));
    let a = exact_slope(step, i);
    if a.lo != 0 {
        roots.push((-c.lo / a.lo).to_f64());
    }
    for op in &step.ops {
        match op {
            ElementOp::Add(k) => roots.push(-k[i]),
            ElementOp::BatchNorm { mean, .. } => roots.push(mean[i]),
            _ => {}
        }
    }
    for r in roots {
        let r = f.round(r);
        for d in -3..=3 {
            v.push(r + f64::from(d) * ulp(f, r));
        }
    }
    let mut rng = Lcg::new(seed);
    for e in -8..=8 {
        for _ in 0..6 {
            v.push(rng.sym_f64() * 10f64.powi(e * 5));
        }
    }
    v.into_iter()
        .map(|x| f.round(x))
        .filter(|x| x.is_finite())
        .collect()
}

/// Per feature and variant: `|y_hat - exact| <= e_i |x_hat| + f_i`; returns the largest ratio
/// and the number of finite comparisons.
fn check_per_feature(kind: &str, step: &AffineStep, f: Format) -> (f64, usize) {
    let (mut worst, mut count) = (0.0f64, 0);
    for i in 0..step.width {
        let sb = step_bounds(&feature_step(step, i), f);
        for x in inputs(step, i, f, i as u64 + 11) {
            let exact = exact_step(step, i, Iv::pt(q(x)));
            let bound = q(sb.error_rel) * q(x.abs()) + q(sb.error_const);
            for v in variants(f) {
                let y = emulate(step, i, x, f, v);
                if !y.is_finite() {
                    continue; // overflow: the step's overflow checks refuse such inputs
                }
                count += 1;
                let dev = exact.dev(&q(y));
                assert!(
                    dev <= bound,
                    "{kind} {f} feature {i} x = {x:e} {v:?}: y_hat = {y:e}, exact ~ {:e}, \
                     |error| = {:e} > bound {:e} (e = {:e}, f = {:e})",
                    exact.lo.to_f64(),
                    dev.to_f64(),
                    bound.to_f64(),
                    sb.error_rel,
                    sb.error_const
                );
                if bound > 0 {
                    worst = worst.max(Rational::from(&dev / &bound).to_f64());
                }
            }
        }
    }
    (worst, count)
}

/// The aggregate statement of `step_bounds` on whole vectors, and its magnitude bounds.
fn check_aggregate(kind: &str, step: &AffineStep, f: Format) {
    let sb = step_bounds(step, f);
    let mut c_sq = Rational::new();
    for i in 0..step.width {
        let a = exact_slope(step, i);
        assert!(
            q(sb.scale_max) >= a.mag(),
            "{kind} {f}: scale_max < |a_{i}|"
        );
        c_sq += exact_step(step, i, Iv::pt(Rational::new())).mag().square();
    }
    assert!(
        q(sb.shift_l2).square() >= c_sq,
        "{kind} {f}: shift_l2 < ||c||"
    );
    let per: Vec<Vec<f64>> = (0..step.width).map(|i| inputs(step, i, f, 3)).collect();
    let mut rng = Lcg::new(17);
    for _ in 0..200 {
        let x: Vec<f64> = per
            .iter()
            .map(|p| p[(rng.next_u64() % p.len() as u64) as usize])
            .collect();
        let x_sq: Rational = x.iter().map(|&v| q(v).square()).sum();
        let mut x_norm = Float::with_val_round(256, &x_sq, Round::Down).0;
        x_norm.sqrt_round(Round::Down);
        let rhs = q(sb.error_rel) * x_norm.to_rational().unwrap() + q(sb.error_const);
        for v in variants(f) {
            let y: Vec<f64> = (0..step.width)
                .map(|i| emulate(step, i, x[i], f, v))
                .collect();
            if y.iter().any(|t| !t.is_finite()) {
                continue;
            }
            let lhs: Rational = (0..step.width)
                .map(|i| exact_step(step, i, Iv::pt(q(x[i]))).dev(&q(y[i])).square())
                .sum();
            assert!(lhs <= rhs.clone().square(), "{kind} {f} {v:?} at {x:?}");
        }
    }
}

#[test]
fn step_errors_are_upper_bounds_against_exact_rationals() {
    let dir = tempfile::tempdir().unwrap();
    for f in [Format::Float64, Format::Float32, Format::Float16] {
        for kind in KINDS {
            let step = loaded_step(kind, f, dir.path());
            let (worst, count) = check_per_feature(kind, &step, f);
            check_aggregate(kind, &step, f);
            println!("{f} {kind}: {count} comparisons, max |error| / bound = {worst:.3e}");
            assert!(count > 100, "{kind} {f}: too few finite comparisons");
        }
    }
}

/// BatchNormalization precomputed as onnxruntime does (`a_hat = fl(fl(1/root) * scale)`) with a
/// slope `a` in the subnormal range of the format the precomputation rounds to: `a_hat` then has
/// an absolute error up to half the smallest subnormal, relative error far above `(1+rho)^8-1`,
/// and `x_hat * a_hat` at large `|x_hat|` exceeded `e |x_hat| + f` before the bound had the
/// slope's absolute error (float32: scale 1e-40, var 3, x = F_max, 10x; float16: scale 1e-4,
/// var 1e4, x = 65504, 1.7x); likewise division by a huge constant as a multiplication by a
/// subnormal reciprocal (`div_huge`).
#[test]
fn precomputed_batchnorm_with_a_subnormal_slope() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, f) in [
        ("div_huge", Format::Float32),
        ("tiny", Format::Float32),
        ("tiny", Format::Float16),
    ] {
        let step = loaded_step(kind, f, dir.path());
        let (worst, count) = check_per_feature(kind, &step, f);
        println!("{f} {kind}: {count} comparisons, max |error| / bound = {worst:.3e}");
    }
}

#[test]
fn the_loader_reads_each_kind_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let names = |s: &AffineStep| s.ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(",");
    let expect = [
        ("add", "add"),
        ("sub", "add"),
        ("neg_sub", "neg,add"),
        ("mul", "mul"),
        ("div", "div"),
        ("div_scalar", "div"),
        ("batchnorm", "batchnorm"),
        ("scaler", "add,mul"),
        ("sub_div", "add,div"),
        ("sub_mul", "add,mul"),
        ("sub_bn_mul", "add,batchnorm,mul"),
    ];
    for (kind, ops) in expect {
        let step = loaded_step(kind, Format::Float32, dir.path());
        assert_eq!(names(&step), ops, "{kind}");
        assert_eq!(step.width, W);
    }
    let sub = loaded_step("sub", Format::Float32, dir.path());
    let negated = [-1.5f32, 0.3, -1.0e4, 7.1e-3, -3.0e-7].map(f64::from);
    assert_eq!(sub.ops[0], ElementOp::Add(negated.to_vec()));
}

// ---------------------------------------------------------------------------------------------
// Networks with steps: lipfp's centre and onnxruntime against the exact network
// ---------------------------------------------------------------------------------------------

const N_IN: usize = 8;

/// Small classifiers with a step, as exporters write them (float32).
fn net_model(kind: &str, dir: &Path) -> (PathBuf, usize) {
    let mut rng = Lcg::new(41);
    let mut b = ModelBuilder::new();
    let n = if kind.starts_with("scale_") {
        300
    } else {
        N_IN
    };
    b.input_f32("x", &[n]);
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

const NETS: [&str; 6] = [
    "normalise",
    "batchnorm",
    "scaler",
    "keras",
    "scale_mul",
    "scale_div",
];

/// The exact logits of `net` at `x` (square roots enclosed).
fn exact_logits(net: &DenseNet, x: &[f64]) -> Vec<Iv> {
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
fn net_inputs(n: usize, seed: u64) -> Vec<f64> {
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
fn check_margins(
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

struct Prepared {
    net: DenseNet,
    mb: ModelBounds,
    x: Vec<f64>,
    n: usize,
    logits: Vec<f64>,
}

fn prepare(kind: &str, f: Format, dir: &Path) -> (PathBuf, Prepared) {
    let (model, n) = net_model(kind, dir);
    let net = lipfp::model::load(&model, f, false).unwrap_or_else(|e| panic!("{kind}: {e}"));
    assert!(
        net.layers.iter().any(|l| l.affine.is_some()),
        "{kind}: no step read"
    );
    let exec = ExecutionModel::deployed(f, None, false).unwrap();
    let mb = ModelBounds::new(&net, &compute_norms(&net, 12).unwrap(), &exec);
    assert!(mb.vacuous.is_none(), "{kind}: {:?}", mb.vacuous);
    let x: Vec<f64> = net_inputs(n, 9).into_iter().map(|v| f.round(v)).collect();
    let view = ArrayView2::from_shape((x.len() / n, n), &x).unwrap();
    let logits = Executor::new(&net, &exec).forward_block(view, false).0;
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

#[test]
fn lipfp_centre_logits_stay_within_the_margin_deviation_bound() {
    let dir = tempfile::tempdir().unwrap();
    for f in [Format::Float32, Format::Float16] {
        for kind in NETS {
            let (_, p) = prepare(kind, f, dir.path());
            let (mut worst, mut count) = (0.0f64, 0);
            for (k, row) in p.x.chunks(p.n).enumerate() {
                let ex = exact_logits(&p.net, row);
                let x_norm = l2_norm_up(row.iter().copied());
                let y = &p.logits[k * 4..(k + 1) * 4];
                let (w, c) = check_margins(kind, "lipfp", &p.mb, x_norm, y, &ex);
                worst = worst.max(w);
                count += c;
            }
            println!("{f} {kind}: lipfp centre, {count} pairs, max |dev| / bound = {worst:.3e}");
            assert!(count > 0, "{kind} {f}: nothing checked");
        }
    }
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_conforms_on_networks_with_steps() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    for kind in NETS {
        let (model, p) = prepare(kind, Format::Float32, dir.path());
        let rows = p.x.len() / p.n;
        let cert = Certifier {
            fmt: &p.mb,
            hi: None,
        };
        let mut runs: Vec<Vec<f64>> = Vec::new();
        for opt in ["default", "disable"] {
            let y = ort_logits(&py, &model, rows, p.n, &p.x, &["--opt", opt]);
            runs.push(y.clone());
            let (mut worst, mut count, mut certified) = (0.0f64, 0, 0);
            for (k, row) in p.x.chunks(p.n).enumerate() {
                let ex = exact_logits(&p.net, row);
                let x_norm = l2_norm_up(row.iter().copied());
                let yk = &y[k * 4..(k + 1) * 4];
                let (w, c) = check_margins(kind, opt, &p.mb, x_norm, yk, &ex);
                worst = worst.max(w);
                count += c;
                let ours = &p.logits[k * 4..(k + 1) * 4];
                let centre = Centre {
                    logits: ours,
                    x_norm,
                    hi: None,
                };
                if cert.certify(Mode::Standard, &centre, 0.0).verdict.is_ok() {
                    certified += 1;
                    assert_eq!(
                        Some(argmax(yk)),
                        predicted_class(ours),
                        "{kind} {opt} row {k}"
                    );
                }
            }
            println!(
                "{kind} --opt {opt}: {rows} rows, {certified} certified at eps 0, {count} pairs, \
                 max |dev| / bound = {worst:.3e}"
            );
            assert!(count > 0 && certified > 0, "{kind} {opt}: nothing checked");
        }
        let differ = |a: &[f64], b: &[f64]| a.iter().zip(b).filter(|(u, v)| u != v).count();
        println!(
            "{kind}: logits differing, default vs disable {}, default vs lipfp {}",
            differ(&runs[0], &runs[1]),
            differ(&runs[0], &p.logits)
        );
    }
}

/// onnxruntime's own execution of each step (the step's output is the graph output) at the
/// adversarial inputs: within the per-feature bound, and bitwise one of the emulated executions.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_step_outputs_are_within_the_step_bounds() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    for kind in KINDS {
        ort_step_check(&py, dir.path(), kind);
    }
}

/// The check of [`onnxruntime_step_outputs_are_within_the_step_bounds`] for one kind.
fn ort_step_check(py: &Path, dir: &Path, kind: &str) {
    let f = Format::Float32;
    {
        let step = loaded_step(kind, f, dir);
        let model = step_model_with(kind, dir, true);
        let per: Vec<Vec<f64>> = (0..W).map(|i| inputs(&step, i, f, i as u64 + 11)).collect();
        let rows = per.iter().map(Vec::len).max().unwrap();
        let x: Vec<f64> = (0..rows)
            .flat_map(|r| per.iter().map(move |p| p[r % p.len()]))
            .collect();
        let y = ort_logits(py, &model, rows, W, &x, &["--opt", "default"]);
        let (mut worst, mut count, mut unmatched) = (0.0f64, 0, 0);
        for i in 0..W {
            let sb = step_bounds(&feature_step(&step, i), f);
            for r in 0..rows {
                let (xv, yv) = (x[r * W + i], y[r * W + i]);
                if !yv.is_finite() {
                    continue;
                }
                let matched = variants(f)
                    .into_iter()
                    .any(|v| emulate(&step, i, xv, f, v) == yv);
                unmatched += usize::from(!matched);
                let exact = exact_step(&step, i, Iv::pt(q(xv)));
                let bound = q(sb.error_rel) * q(xv.abs()) + q(sb.error_const);
                let dev = exact.dev(&q(yv));
                assert!(dev <= bound, "{kind} feature {i} x = {xv:e}: ORT {yv:e}");
                count += 1;
                if bound > 0 {
                    worst = worst.max(Rational::from(&dev / &bound).to_f64());
                }
            }
        }
        println!(
            "onnxruntime {kind}: {count} outputs, {unmatched} not bitwise an emulated execution, \
             max |error| / bound = {worst:.3e}"
        );
        assert_eq!(
            unmatched, 0,
            "{kind}: onnxruntime computes outside the emulated executions"
        );
    }
}

/// onnxruntime on the float32 `tiny` BatchNorm (subnormal slope) stays within the step bound
/// (it was 10x over before the slope's absolute error was in it).
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_batchnorm_with_a_subnormal_slope() {
    let dir = tempfile::tempdir().unwrap();
    ort_step_check(&python(), dir.path(), "tiny");
}
