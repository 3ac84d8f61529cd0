//! The shape family of `tests/oracles/shapes.rs` (issue 29): a seeded generator of dense ReLU networks
//! (layer counts from 0 hidden layers, widths from 1, hidden layers random, dead, always on or
//! identity, ordinary or huge output biases; corners always included), written as float32 ONNX
//! Gemm chains, and every declared execution (formats, accumulation, flush-to-zero, runtime
//! presets) with the emulated executions (`emulate_bundle.py`) that its certificate covers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use super::emulated::{half_executions, openvino_executions, tf32_executions};
pub use super::local_nets::Rng;
use super::onnx_builder::{attr_int, ModelBuilder};
use lipfp::arith::execution::Gpu;
use lipfp::arith::format::Format;
use lipfp::arith::runtime::{Runtime, RuntimeChoice};
use serde_json::{json, Value};

pub mod shape {
    /// How a generated hidden layer behaves over the balls.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum Kind {
        Random,
        /// Every ReLU off (tiny weights, bias -64).
        Dead,
        /// Every ReLU on (tiny weights, bias +64).
        AlwaysOn,
        /// `W = I`, `b = 0` (width equal to the layer below).
        Identity,
    }

    /// A generated network: widths (input first, classes last), one kind per hidden layer, and
    /// whether the output biases are huge (`+-1024`).
    #[derive(Clone, Debug)]
    pub struct Shape {
        pub widths: Vec<usize>,
        pub kinds: Vec<Kind>,
        pub huge_bias: bool,
        pub seed: u64,
    }

    impl Shape {
        pub fn name(&self) -> String {
            let w: Vec<String> = self.widths.iter().map(usize::to_string).collect();
            format!(
                "{} hidden {:?}{} seed {}",
                w.join("-"),
                self.kinds,
                if self.huge_bias { " huge bias" } else { "" },
                self.seed
            )
        }
    }
}
pub use shape::{Kind, Shape};

/// The corners every run includes, then `extra` random shapes.
pub fn shapes(extra: usize) -> Vec<Shape> {
    let s = |widths: &[usize], kinds: &[Kind], huge_bias: bool, seed: u64| Shape {
        widths: widths.to_vec(),
        kinds: kinds.to_vec(),
        huge_bias,
        seed,
    };
    let mut out = vec![
        s(&[5, 2], &[], false, 1),
        s(&[6, 10], &[], false, 2),
        s(&[16, 2], &[], true, 3),
        s(&[3, 1, 3], &[Kind::Random], false, 4),
        s(&[4, 5, 3], &[Kind::Dead], false, 5),
        s(&[4, 5, 3], &[Kind::AlwaysOn], false, 6),
        s(&[4, 4, 4, 3], &[Kind::Identity, Kind::Random], false, 7),
        s(&[5, 3, 2], &[Kind::Random], true, 8),
    ];
    let mut rng = Rng(0x5EED);
    for k in 0..extra {
        let hidden = rng.below(4) as usize;
        let mut widths = vec![1 + rng.below(6) as usize];
        let mut kinds = Vec::new();
        for _ in 0..hidden {
            let kind = [
                Kind::Random,
                Kind::Random,
                Kind::Dead,
                Kind::AlwaysOn,
                Kind::Identity,
            ][rng.below(5) as usize];
            let width = match kind {
                Kind::Identity => *widths.last().unwrap_or(&1),
                _ => 1 + rng.below(6) as usize,
            };
            widths.push(width);
            kinds.push(kind);
        }
        widths.push(2 + rng.below(4) as usize);
        out.push(s(&widths, &kinds, rng.below(4) == 0, 100 + k as u64));
    }
    out
}

/// The shape's float32 weights and biases, layer by layer.
pub fn parameters(shape: &Shape) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut rng = Rng(shape.seed);
    let depth = shape.widths.len() - 1;
    (0..depth)
        .map(|l| {
            let (n, m) = (shape.widths[l], shape.widths[l + 1]);
            let kind = shape.kinds.get(l).copied();
            let scale = match kind {
                Some(Kind::Dead | Kind::AlwaysOn) => 1e-3,
                _ => 1.5 / (n as f64).sqrt(),
            };
            let mut w: Vec<f32> = (0..m * n).map(|_| (scale * rng.unit()) as f32).collect();
            let b: Vec<f32> = (0..m)
                .map(|_| match kind {
                    Some(Kind::Dead) => -64.0,
                    Some(Kind::AlwaysOn) => 64.0,
                    Some(Kind::Identity) => 0.0,
                    Some(Kind::Random) => (0.3 * rng.unit()) as f32,
                    None if shape.huge_bias => 1024.0 * rng.unit().signum() as f32,
                    None => (0.3 * rng.unit()) as f32,
                })
                .collect();
            if kind == Some(Kind::Identity) {
                w = (0..m * n)
                    .map(|k| f32::from(u8::from(k / n == k % n)))
                    .collect();
            }
            (w, b)
        })
        .collect()
}

/// The shape as a float32 ONNX Gemm chain (ReLU between layers).
pub fn write_model(shape: &Shape, dir: &Path) -> PathBuf {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[shape.widths[0]]);
    let params = parameters(shape);
    let mut input = "x".to_string();
    for (l, (w, bias)) in params.iter().enumerate() {
        let (n, m) = (shape.widths[l], shape.widths[l + 1]);
        let (wn, bn) = (format!("W{l}"), format!("b{l}"));
        b.init_f32(&wn, &[m, n], w);
        b.init_f32(&bn, &[m], bias);
        let last = l + 1 == params.len();
        let z = if last {
            "logits".into()
        } else {
            format!("z{l}")
        };
        let name = format!("/fc{l}/Gemm");
        b.node(
            "Gemm",
            &name,
            &[&input, &wn, &bn],
            &[&z],
            vec![attr_int("transB", 1)],
        );
        input = z;
        if !last {
            let h = format!("h{l}");
            b.node("Relu", &format!("/act{l}/Relu"), &[&input], &[&h], vec![]);
            input = h;
        }
    }
    b.output_f32("logits", *shape.widths.last().unwrap());
    b.write(dir, "shape.onnx")
}

/// One declared execution: what lipfp is told, and what runs the candidates.
#[derive(Clone)]
pub struct Execution {
    pub name: &'static str,
    pub format: Format,
    pub accumulate: Option<Format>,
    pub ftz: bool,
    pub runtime: Option<RuntimeChoice>,
    /// Emulated executions the certificate covers (`emulate_bundle.py`).
    pub emulated: Vec<Value>,
    /// Also onnxruntime CPU on the float32 model.
    pub ort: bool,
}

/// IEEE float32 chains in every bias position, with and without FMA, rounded to `out`.
pub fn ieee_chains(out: Format, ftz: bool) -> Vec<Value> {
    let mut v = Vec::new();
    for bias in ["first", "epilogue"] {
        for fma in [true, false] {
            v.push(
                json!({"name": format!("ieee bias {bias} fma {fma}"), "kind": "gemm",
                "accumulation": "ieee", "bias_position": bias, "ieee_fma": fma,
                "out": out.name(), "ftz": ftz}),
            );
        }
    }
    v
}

/// PyTorch's float32 GEMM (TF32 off for matmul): IEEE chains, also cut by split-K with float32
/// partials.
pub fn pytorch_float32() -> Vec<Value> {
    let mut v = ieee_chains(Format::Float32, false);
    for split in [2, 7] {
        v.push(
            json!({"name": format!("ieee split-K {split}"), "kind": "gemm",
            "accumulation": "ieee", "bias_position": "epilogue", "split_k": split,
            "reduction": "float32"}),
        );
    }
    v
}

pub fn runtime(r: Runtime, gpu: Option<Gpu>) -> Option<RuntimeChoice> {
    Some(RuntimeChoice {
        gpu,
        ..RuntimeChoice::new(r)
    })
}

/// Every format, accumulation, flush-to-zero setting and runtime preset.
pub fn executions() -> Vec<Execution> {
    use Format::{Bfloat16 as BF16, Float16 as F16, Float32 as F32, Float64 as F64};
    let e = |name, format, accumulate, ftz, runtime, emulated, ort| Execution {
        name,
        format,
        accumulate,
        ftz,
        runtime,
        emulated,
        ort,
    };
    let mut f16_native = ieee_chains(F16, false);
    f16_native.push(json!({"name": "float16 accumulator", "kind": "arm_fp16"}));
    vec![
        e(
            "float32",
            F32,
            None,
            false,
            None,
            ieee_chains(F32, false),
            true,
        ),
        e(
            "float32 ftz",
            F32,
            None,
            true,
            None,
            ieee_chains(F32, true),
            false,
        ),
        e("float16", F16, None, false, None, f16_native, false),
        e(
            "float16 acc float32",
            F16,
            Some(F32),
            false,
            None,
            ieee_chains(F16, false),
            false,
        ),
        e(
            "bfloat16",
            BF16,
            None,
            false,
            None,
            ieee_chains(BF16, false),
            false,
        ),
        e("float64", F64, None, false, None, Vec::new(), false),
        e(
            "onnxruntime-cpu",
            F32,
            None,
            false,
            runtime(Runtime::OnnxruntimeCpu, None),
            ieee_chains(F32, false),
            true,
        ),
        e(
            "onnxruntime-cuda h100",
            F32,
            None,
            false,
            runtime(Runtime::OnnxruntimeCuda, Some(Gpu::H100)),
            tf32_executions(&[Gpu::H100], false),
            false,
        ),
        e(
            "pytorch-cuda h100",
            F32,
            None,
            false,
            runtime(Runtime::PytorchCuda, Some(Gpu::H100)),
            pytorch_float32(),
            false,
        ),
        e(
            "pytorch-cuda h100 float16",
            F16,
            None,
            false,
            runtime(Runtime::PytorchCuda, Some(Gpu::H100)),
            half_executions(Gpu::H100, F16, F16),
            false,
        ),
        e(
            "tensorrt",
            F32,
            None,
            false,
            runtime(Runtime::Tensorrt, None),
            tf32_executions(&[Gpu::A100, Gpu::H100, Gpu::B200], false),
            false,
        ),
        e(
            "tensorflow a100",
            F32,
            None,
            false,
            runtime(Runtime::Tensorflow, Some(Gpu::A100)),
            tf32_executions(&[Gpu::A100], true),
            false,
        ),
        e(
            "openvino-cpu",
            F32,
            None,
            false,
            runtime(Runtime::OpenvinoCpu, None),
            openvino_executions(),
            false,
        ),
    ]
}

/// The network run natively in float64, the bias first or last.
pub fn f64_logits(net: &lipfp::onnx::model::DenseNet, x: &[f64], bias_first: bool) -> Vec<f64> {
    let mut h = x.to_vec();
    for (l, layer) in net.layers.iter().enumerate() {
        h = (0..layer.m())
            .map(|r| {
                let dot = |acc: f64| (0..h.len()).fold(acc, |a, c| a + layer.w[[r, c]] * h[c]);
                let z = if bias_first {
                    dot(layer.b[r])
                } else {
                    dot(0.0) + layer.b[r]
                };
                if l + 1 < net.layers.len() {
                    z.max(0.0)
                } else {
                    z
                }
            })
            .collect();
    }
    h
}
