//! Shared by `tests/oracles/affine_steps.rs` (exact rationals) and `tests/oracles/affine_steps_runtime.rs`
//! (onnxruntime): exact enclosures of elementwise affine steps, emulated executions of a step,
//! the small step models the loader reads and adversarial inputs for them. Networks with steps
//! are in `affine_nets.rs`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use super::onnx_builder::*;
use lipfp::arith::format::Format;
use lipfp::onnx::model::{AffineStep, ElementOp};
use rug::float::Round;
use rug::{Float, Rational};

// ---------------------------------------------------------------------------------------------
// Exact enclosures
// ---------------------------------------------------------------------------------------------

pub fn q(x: f64) -> Rational {
    Rational::from_f64(x).unwrap_or_else(|| panic!("non-finite {x}"))
}

/// An enclosure `[lo, hi]` of an exact real value.
#[derive(Clone, Debug)]
pub struct Iv {
    pub lo: Rational,
    pub hi: Rational,
}

impl Iv {
    pub fn pt(v: Rational) -> Iv {
        Iv {
            lo: v.clone(),
            hi: v,
        }
    }
    pub fn add(&self, c: &Rational) -> Iv {
        Iv {
            lo: Rational::from(&self.lo + c),
            hi: Rational::from(&self.hi + c),
        }
    }
    pub fn neg(&self) -> Iv {
        Iv {
            lo: Rational::from(-&self.hi),
            hi: Rational::from(-&self.lo),
        }
    }
    /// Product with an enclosure `[k_lo, k_hi]`.
    pub fn mul(&self, k_lo: &Rational, k_hi: &Rational) -> Iv {
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
    pub fn relu(&self) -> Iv {
        let z = Rational::new();
        Iv {
            lo: self.lo.clone().max(z.clone()),
            hi: self.hi.clone().max(z),
        }
    }
    /// `max |y - v|` over the enclosure.
    pub fn dev(&self, y: &Rational) -> Rational {
        Rational::from(y - &self.lo)
            .abs()
            .max(Rational::from(y - &self.hi).abs())
    }
    pub fn mag(&self) -> Rational {
        self.lo.clone().abs().max(self.hi.clone().abs())
    }
}

/// `[1/sqrt(v)]` enclosed at 256 bits, `v > 0`.
pub fn inv_sqrt(v: &Rational) -> (Rational, Rational) {
    let root = |r: Round| {
        let mut f = Float::with_val_round(256, v, r).0;
        f.sqrt_round(r);
        f.to_rational().unwrap()
    };
    (root(Round::Up).recip(), root(Round::Down).recip())
}

/// The exact map of feature `i` of `step` on the enclosure `x`.
pub fn exact_step(step: &AffineStep, i: usize, x: Iv) -> Iv {
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
pub fn exact_slope(step: &AffineStep, i: usize) -> Iv {
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
pub enum Rnd {
    /// Once, to storage.
    Storage,
    /// To the next wider format, then to storage.
    Wider,
    /// To the next wider format only; storage at the end of the step (a chain a runtime computes
    /// in float32 between a cast in and a cast out; float16/bfloat16 only).
    ChainWide,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bn {
    Written,
    /// onnxruntime: `a = fl(fl(1/fl(sqrt(fl(var+eps))))*scale)`, `b = fl(bias - fl(mean*a))`.
    Pre,
    PreFma,
}

#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub rnd: Rnd,
    pub bn: Bn,
    pub recip: bool,
}

pub fn variants(f: Format) -> Vec<Variant> {
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
pub fn emulate(step: &AffineStep, i: usize, x: f64, f: Format, v: Variant) -> f64 {
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

pub const W: usize = 5;

/// A model `x[N,5] -> <step nodes> -> Gemm -> logits[3]` whose step nodes are `kind`.
pub fn step_model(kind: &str, dir: &Path) -> PathBuf {
    step_model_with(kind, dir, false)
}

/// The step model, or with `bare` the step's output itself as the graph output.
pub fn step_model_with(kind: &str, dir: &Path, bare: bool) -> PathBuf {
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

pub const KINDS: [&str; 11] = [
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
pub fn loaded_step(kind: &str, f: Format, dir: &Path) -> AffineStep {
    let net = lipfp::onnx::model::load(&step_model(kind, dir), f, false)
        .unwrap_or_else(|e| panic!("{kind} {f}: {e}"));
    assert_eq!(net.layers.len(), 2, "{kind}: one step layer and the Gemm");
    net.layers[0]
        .affine
        .clone()
        .expect("the first layer is a step")
}

/// Feature `i` of `step` alone (its `e_i`, `f_i` through the public `step_bounds`).
pub fn feature_step(step: &AffineStep, i: usize) -> AffineStep {
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
pub fn ulp(f: Format, x: f64) -> f64 {
    let e = if x == 0.0 {
        f.emin()
    } else {
        x.abs().log2().floor() as i32
    };
    2f64.powi(e.max(f.emin()) - f.precision() as i32 + 1)
}

/// Adversarial storage values for feature `i`: zero, subnormals, the extremes, values next to
/// the step's root (where the output cancels) and to the BatchNorm mean, random binades.
pub fn inputs(step: &AffineStep, i: usize, f: Format, seed: u64) -> Vec<f64> {
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
