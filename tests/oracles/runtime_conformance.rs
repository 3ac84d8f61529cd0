//! Certificates for declared runtimes checked against bit-accurate emulators of their arithmetic
//! (`tests/conformance/tensor_core.py`: TF32/bfloat16 operand conversion, NVIDIA tensor-core
//! block FMA after the Khattak-Mikaitis models, split-K reductions, OpenVINO's bfloat16 dot
//! products; validated bit for bit on published hardware outputs by
//! `validate_tensor_core.py` and against exact rationals by `tensor_core_selftest.py`).
//!
//! For every target: lipfp certifies under the declared runtime; then, for every emulated
//! execution the runtime may perform (several GPU generations, conversion roundings, bias
//! positions, split-K counts and reduction formats), (a) at every certified point and at sampled
//! points of its ball (a first-order attack towards the runner-up class and random directions)
//! the emulated execution returns the certified class, and (b) at sampled points, for every class
//! pair, its margin differs from the exact margin of the converted network by at most lipfp's
//! per-point bound (checked exactly). `LIPFP_CONFORMANCE_POINTS=N` runs the MNIST targets on N
//! test points instead of the suite's sample; `LIPFP_GPU_BUNDLES=DIR` also writes each target's
//! certified points, classes, exact margins and bounds for `tests/gpu/gpu_conformance.py`.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::ball::{attack_sample, check_deviation, random_samples, Figures};
use crate::common::bundles::{gpu_bundle, write_bundle};
use crate::common::emulated::{half_executions, openvino_executions, tf32_executions};
use crate::common::exact::ExactNet;
use crate::common::onnx_builder::*;
use crate::common::runtime::{
    argmax, example, export_float16, python, read_f64_npy, read_inputs, script,
};
use half::f16;
use lipfp::arith::execution::Gpu;
use lipfp::arith::format::Format;
use lipfp::arith::runtime::{Runtime, RuntimeChoice};
use lipfp::arith::sound::l2_norm_up;
use lipfp::bounds::certify::Mode;
use lipfp::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::policy::Radius;
use serde_json::{json, Value};

/// One model, runtime and set of emulated executions to check.
struct Target {
    name: String,
    model: PathBuf,
    inputs: Vec<f64>,
    rows: usize,
    format: Option<Format>,
    accumulate: Option<Format>,
    runtime: RuntimeChoice,
    epsilon: &'static str,
    executions: Vec<Value>,
    /// Points (evenly spread) where the deviation bound is checked in exact rationals.
    exact_points: usize,
    /// Certified points (evenly spread) whose balls are sampled.
    ball_points: usize,
}

/// lipfp's certificate under the target's runtime: the subject, whether any sound mode
/// certifies each point, and the inputs as storage values.
fn certify(t: &Target, dir: &Path) -> (Subject, Vec<bool>, Vec<f64>) {
    let spec = SubjectSpec {
        model: t.model.clone(),
        format: t.format,
        accumulate: t.accumulate,
        ftz: false,
        runtime: Some(t.runtime),
        inputs: PathBuf::new(),
        labels: None,
        gram_iterations: 12,
        reference: ReferencePlan::Every { products: true },
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    common::ball::certify_any_sound(
        dir,
        &t.name,
        (&t.inputs[..], t.rows),
        spec,
        (t.epsilon, false),
    )
}

/// The logits of every execution at `rows`: `[execution][row * classes + class]`.
fn emulate(
    python: &Path,
    dir: &Path,
    subject: &Subject,
    rows: &[f64],
    executions: &[Value],
) -> Vec<Vec<f64>> {
    write_bundle(dir, &subject.net, rows);
    let spec = dir.join("executions.json");
    std::fs::write(&spec, Value::Array(executions.to_vec()).to_string()).unwrap();
    let out = dir.join("logits.npy");
    let status = std::process::Command::new(python)
        .arg(script("emulate_bundle.py"))
        .args([dir, &spec, &out])
        .status()
        .expect("python runs");
    assert!(
        status.success(),
        "emulate_bundle.py failed on {}",
        dir.display()
    );
    let flat = read_f64_npy(&out);
    let per = flat.len() / executions.len();
    flat.chunks(per).map(<[f64]>::to_vec).collect()
}

/// The certified centres and ball samples of `t`, with the class each must keep.
fn rows_to_check(
    t: &Target,
    subject: &Subject,
    certified: &[bool],
    x: &[f64],
) -> (Vec<f64>, Vec<usize>) {
    let dim = subject.net.input_dim();
    let eps: f64 = t.epsilon.parse().unwrap();
    let mut rows = Vec::new();
    let mut cls = Vec::new();
    let chosen: Vec<usize> = (0..t.rows).filter(|&k| certified[k]).collect();
    for &k in &chosen {
        rows.extend_from_slice(&x[k * dim..(k + 1) * dim]);
        cls.push(subject.predictions[k].expect("a certified point has a prediction"));
    }
    let stride = (chosen.len() / t.ball_points.max(1)).max(1);
    for &k in chosen.iter().step_by(stride) {
        let xk = &x[k * dim..(k + 1) * dim];
        let mut samples: Vec<Vec<f64>> = attack_sample(subject, k, xk, eps).into_iter().collect();
        samples.extend(random_samples(xk, eps, subject.net.format, k as u64 + 1));
        for p in samples {
            rows.extend_from_slice(&p);
            cls.push(subject.predictions[k].unwrap());
        }
    }
    (rows, cls)
}

/// Run every check of `t`; returns the figures (asserted: no class change, no violation).
fn check_target(python: &Path, t: Target) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let (subject, certified, x) = certify(&t, dir.path());
    let bounds = subject.bounds.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (dim, classes) = (subject.net.input_dim(), subject.net.classes());
    let (mut rows, cls) = rows_to_check(&t, &subject, &certified, &x);
    // (b) also at uncertified centres (spread): the deviation bound holds at every point
    let free: Vec<usize> = (0..t.rows).filter(|&k| !certified[k]).collect();
    for &k in free
        .iter()
        .step_by((free.len() / t.exact_points.max(1)).max(1))
    {
        rows.extend_from_slice(&x[k * dim..(k + 1) * dim]);
    }
    let total = rows.len() / dim;
    let mut fig = Figures {
        points: t.rows,
        certified: certified.iter().filter(|&&c| c).count(),
        ball_samples: cls.len() - certified.iter().filter(|&&c| c).count(),
        ..Figures::default()
    };
    if total > 0 {
        let runs = emulate(
            python,
            &dir.path().join("bundle"),
            &subject,
            &rows,
            &t.executions,
        );
        for y in &runs {
            for (r, &c) in cls.iter().enumerate() {
                if argmax(&y[r * classes..(r + 1) * classes]) != c {
                    fig.mismatches += 1;
                }
            }
        }
        // (b) at spread rows (centres, ball samples and uncertified centres), in exact rationals
        let exact = ExactNet::new(&subject.net);
        let stride = (total / t.exact_points.max(1)).max(1);
        for r in (0..total).step_by(stride) {
            let p = &rows[r * dim..(r + 1) * dim];
            let norm = l2_norm_up(p.iter().copied());
            let ex = exact.logits(p);
            for y in &runs {
                check_deviation(
                    bounds,
                    norm,
                    &ex,
                    &y[r * classes..(r + 1) * classes],
                    &mut fig,
                );
            }
        }
        // bundles for the GPU script: runtimes it can run, certificates that hold on an H100
        let on_h100 = matches!(t.runtime.gpu, None | Some(Gpu::H100))
            && !matches!(
                t.runtime.runtime,
                Runtime::OnnxruntimeCpu | Runtime::OpenvinoCpu
            );
        if let Some(out) =
            std::env::var_os("LIPFP_GPU_BUNDLES").filter(|_| on_h100 && !cls.is_empty())
        {
            let certified_rows = &rows[..cls.len() * dim];
            gpu_bundle(
                &Path::new(&out).join(&t.name),
                (&t.name, &subject),
                certified_rows,
                &cls,
                &t.runtime,
            );
        }
    }
    println!(
        "runtime conformance {} ({}): {} points, {} certified, {} ball samples, {} emulated executions, \
         class changes {}, deviation/bound max {:.3e} over {} pairs, violations {}",
        t.name,
        t.runtime.runtime,
        fig.points,
        fig.certified,
        fig.ball_samples,
        t.executions.len(),
        fig.mismatches,
        fig.max_ratio,
        fig.checked_pairs,
        fig.violations
    );
    assert_eq!(
        fig.mismatches, 0,
        "{}: an emulated execution contradicts a certificate",
        t.name
    );
    assert_eq!(
        fig.violations, 0,
        "{}: an emulated execution deviates beyond lipfp's bound",
        t.name
    );
    fig
}

fn choice(runtime: Runtime, gpu: Option<Gpu>) -> RuntimeChoice {
    RuntimeChoice {
        gpu,
        ..RuntimeChoice::new(runtime)
    }
}

fn target(
    name: &str,
    model: PathBuf,
    (inputs, rows): (Vec<f64>, usize),
    runtime: RuntimeChoice,
    executions: Vec<Value>,
) -> Target {
    Target {
        name: name.into(),
        model,
        inputs,
        rows,
        format: None,
        accumulate: None,
        runtime,
        epsilon: "0.3",
        executions,
        exact_points: 12,
        ball_points: 40,
    }
}

/// The first `n` MNIST test points (`LIPFP_CONFORMANCE_POINTS`, default `default`).
fn mnist(default: usize) -> (PathBuf, (Vec<f64>, usize)) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/benchmarks/mnist");
    let n = std::env::var("LIPFP_CONFORMANCE_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let (x, rows) = read_inputs(&dir.join("x_test.npy"));
    let n = n.min(rows);
    let dim = x.len() / rows;
    (dir.join("model.onnx"), (x[..n * dim].to_vec(), n))
}

#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with numpy (set LIPFP_PYTHON)"
)]
fn mnist_float32_on_tf32_tensor_cores() {
    let py = python();
    let (model, data) = mnist(150);
    let h100 = check_target(
        &py,
        target(
            "mnist-onnxruntime-cuda-h100",
            model.clone(),
            data.clone(),
            choice(Runtime::OnnxruntimeCuda, Some(Gpu::H100)),
            tf32_executions(&[Gpu::H100], false),
        ),
    );
    assert!(h100.certified > h100.points / 2, "{h100:?}");
    check_target(
        &py,
        target(
            "mnist-tensorrt-any-gpu",
            model.clone(),
            data.clone(),
            choice(Runtime::Tensorrt, None),
            tf32_executions(&[Gpu::A100, Gpu::H100, Gpu::B200], false),
        ),
    );
    check_target(
        &py,
        target(
            "mnist-tensorflow-a100",
            model,
            data,
            choice(Runtime::Tensorflow, Some(Gpu::A100)),
            tf32_executions(&[Gpu::A100], true),
        ),
    );
}

#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn mnist_float16_on_tensor_cores_with_split_k() {
    let py = python();
    let (model, data) = mnist(150);
    let tmp = tempfile::tempdir().unwrap();
    let half = export_float16(&py, &model, tmp.path());
    let off = RuntimeChoice {
        reduced_precision_reduction: Some(false),
        ..choice(Runtime::PytorchCuda, Some(Gpu::H100))
    };
    let fig = check_target(
        &py,
        target(
            "mnist-float16-pytorch-cuda-h100",
            half.clone(),
            data.clone(),
            off,
            half_executions(Gpu::H100, Format::Float16, Format::Float32),
        ),
    );
    // the float16 export has weights below float16's normal range, aligned by their nominal
    // exponent (docs/soundness.md "Subnormal tensor-core inputs"): certified, and every
    // emulated execution (which aligns them so) stays inside the bound
    assert!(fig.certified * 10 >= fig.points * 8, "{fig:?}");
    // reduced-precision reduction: float16 partial sums (few points certify; none may flip)
    check_target(
        &py,
        target(
            "mnist-float16-pytorch-cuda-reduced",
            half,
            data,
            choice(Runtime::PytorchCuda, Some(Gpu::H100)),
            half_executions(Gpu::H100, Format::Float16, Format::Float16),
        ),
    );
}

#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with numpy (set LIPFP_PYTHON)"
)]
fn mnist_on_openvino_bfloat16() {
    // nothing certifies (bfloat16 operands, best 0% even at eps 0.01); the deviation bound is
    // still checked at spread points
    let py = python();
    let (model, data) = mnist(150);
    check_target(
        &py,
        Target {
            epsilon: "0.01",
            ..target(
                "mnist-openvino-cpu",
                model,
                data,
                choice(Runtime::OpenvinoCpu, None),
                openvino_executions(),
            )
        },
    );
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy (set LIPFP_PYTHON)"
)]
fn examples_on_openvino_bfloat16() {
    // MNIST certifies nothing with bfloat16 operands (best 0% at eps 0.1): the examples do
    let py = python();
    let executions = openvino_executions();
    for (name, eps) in [("digits", "0.1"), ("breast-cancer", "0.05")] {
        let (model, x, rows) = example(name);
        let fig = check_target(
            &py,
            Target {
                epsilon: eps,
                ..target(
                    &format!("{name}-openvino-cpu"),
                    model,
                    (x, rows),
                    choice(Runtime::OpenvinoCpu, None),
                    executions.clone(),
                )
            },
        );
        assert!(fig.certified > 0, "{fig:?}");
    }
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy (set LIPFP_PYTHON)"
)]
fn embedded_examples_on_gpu_runtimes() {
    let py = python();
    for name in ["digits", "breast-cancer"] {
        let (model, x, rows) = example(name);
        check_target(
            &py,
            Target {
                epsilon: "0.25",
                ..target(
                    &format!("{name}-onnxruntime-cuda"),
                    model.clone(),
                    (x.clone(), rows),
                    choice(Runtime::OnnxruntimeCuda, None),
                    tf32_executions(&[Gpu::A100, Gpu::H100], false),
                )
            },
        );
        let f16 = Target {
            format: Some(Format::Float16),
            epsilon: "0.25",
            ..target(
                &format!("{name}-float16-pytorch-cuda"),
                model,
                (x, rows),
                RuntimeChoice {
                    reduced_precision_reduction: Some(false),
                    ..choice(Runtime::PytorchCuda, None)
                },
                [Gpu::V100, Gpu::A100, Gpu::H100]
                    .iter()
                    .flat_map(|&g| half_executions(g, Format::Float16, Format::Float32))
                    .collect(),
            )
        };
        check_target(&py, f16);
    }
}

/// The emulator itself: `tensor_core_selftest.py` checks the block FMA, the operand conversions
/// and the roundings against an independent exact-rational implementation of the specification
/// (every case must agree bit for bit). The check against published hardware outputs,
/// `validate_tensor_core.py`, needs the Khattak-Mikaitis repository and is run by hand.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy (set LIPFP_PYTHON)"
)]
fn the_emulator_agrees_with_exact_rationals() {
    let out = std::process::Command::new(python())
        .arg(script("tensor_core_selftest.py"))
        .output()
        .expect("run tensor_core_selftest.py");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success() && text.contains(" 0 mismatches"),
        "the emulator disagrees with exact rationals:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One input, two classes: `w_0 = 1 + 2^-11 - 2^-23`, `w_1 = 1`, `b_1 = 2^-12`. The exact margin
/// `(2^-11 - 2^-23) x - 2^-12` is positive near `x = 1`, but TF32 (truncating or rounding)
/// turns `w_0` into 1, and class 1 wins everywhere.
fn tf32_counterexample(dir: &Path) -> PathBuf {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[1]);
    b.init_f32("W", &[2, 1], &[1.0 + 2f32.powi(-11) - 2f32.powi(-23), 1.0]);
    b.init_f32("B", &[2], &[0.0, 2f32.powi(-12)]);
    b.node(
        "Gemm",
        "dense",
        &["x", "W", "B"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("logits", 2);
    b.write(dir, "tf32_counterexample.onnx")
}

/// float16, 128 inputs, two classes, at `x = (32, 0.5, ..., 0.5)`: class 0 has the same
/// weights, so its products are `1024` and 127 times `0.25` (1055.75 exactly; float32 accumulation
/// rounds it once to 1056); class 1 is the bias 1040. Split-K with one product per split reduced
/// in float16 adds each 0.25 to 1024 and rounds it away: 1024, and class 1 wins.
fn split_k_counterexample(dir: &Path) -> PathBuf {
    let n = 128;
    let mut w = vec![0.0f32; 2 * n];
    w[0] = 32.0;
    for v in w.iter_mut().take(n).skip(1) {
        *v = 0.5;
    }
    let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    let mut b = ModelBuilder::new();
    b.input("x", DataType::Float16, &batched(&[n]));
    b.init_f16("W", &[2, n], &h);
    b.init_f16("B", &[2], &[f16::from_f32(0.0), f16::from_f32(1040.0)]);
    b.node(
        "Gemm",
        "dense",
        &["x", "W", "B"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.output("logits", DataType::Float16, Some(&batched(&[2])));
    b.write(dir, "split_k_counterexample.onnx")
}

/// Certified by every sound mode under the IEEE model, refused by every sound mode under each
/// runtime in `refused`; the emulated `execution` returns another class at the centre.
fn certified_only_without_runtime(
    model: &Path,
    inputs: Vec<f64>,
    epsilon: &'static str,
    accumulate: Option<Format>,
    refused: &[RuntimeChoice],
    execution: Value,
) {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let t = |runtime| Target {
        accumulate,
        epsilon,
        ..target(
            "counterexample",
            model.to_path_buf(),
            (inputs.clone(), 1),
            runtime,
            vec![],
        )
    };
    let verdicts = |runtime| {
        let (subject, _, _) = certify(&t(runtime), dir.path());
        let radius = Radius::parse_decimal(epsilon).unwrap();
        let out = run::certify(&subject, &radius, &Mode::SOUND).unwrap();
        out.modes
            .iter()
            .filter(|m| m.mode.is_sound())
            .map(|m| m.verdicts[0])
            .collect::<Vec<bool>>()
    };
    // onnxruntime-cpu is the IEEE model
    let ieee = verdicts(RuntimeChoice::new(Runtime::OnnxruntimeCpu));
    assert!(
        ieee.iter().all(|&v| v),
        "the IEEE model certifies the point in every sound mode: {ieee:?}"
    );
    for &r in refused {
        assert!(
            verdicts(r).iter().all(|&v| !v),
            "{} must not certify",
            r.runtime
        );
    }
    let (subject, _, x) = certify(&t(RuntimeChoice::new(Runtime::OnnxruntimeCpu)), dir.path());
    assert_eq!(subject.predictions[0], Some(0));
    let y = emulate(&py, &dir.path().join("bundle"), &subject, &x, &[execution]);
    assert_eq!(
        argmax(&y[0]),
        1,
        "the emulated runtime returns the other class at the centre: {:?}",
        y[0]
    );
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy (set LIPFP_PYTHON)"
)]
fn a_tf32_flip_inside_an_ieee_certificate_is_not_certified_for_tf32_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let model = tf32_counterexample(dir.path());
    let refused: Vec<RuntimeChoice> = [
        Runtime::OnnxruntimeCuda,
        Runtime::Tensorrt,
        Runtime::Tensorflow,
    ]
    .into_iter()
    .flat_map(|r| [None, Some(Gpu::A100), Some(Gpu::H100)].map(|g| choice(r, g)))
    .chain([RuntimeChoice {
        operand_rounding: Some(lipfp::arith::execution::OperandRounding::Nearest),
        ..choice(Runtime::OnnxruntimeCuda, Some(Gpu::H100))
    }])
    .collect();
    let execution = json!({"name": "h100 tf32 nearest", "kind": "gemm", "operand": "tf32", "operand_rounding": "nearest",
        "device": "h100", "accumulation": "tensor_core", "bias_position": "epilogue"});
    certified_only_without_runtime(&model, vec![1.0], "0.25", None, &refused, execution);
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy (set LIPFP_PYTHON)"
)]
fn a_float16_split_k_flip_is_not_certified_with_reduced_precision_reduction() {
    let dir = tempfile::tempdir().unwrap();
    let model = split_k_counterexample(dir.path());
    let refused = [
        choice(Runtime::PytorchCuda, Some(Gpu::H100)),
        choice(Runtime::OnnxruntimeCuda, None),
    ];
    let execution = json!({"name": "h100 split-K 128 float16", "kind": "gemm", "device": "h100", "accumulation": "tensor_core",
        "bias_position": "epilogue", "split_k": 128, "reduction": "float16", "out": "float16"});
    certified_only_without_runtime(
        &model,
        std::iter::once(32.0).chain([0.5; 127]).collect(),
        "0.1",
        Some(Format::Float32),
        &refused,
        execution,
    );
}
