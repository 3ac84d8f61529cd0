//! Conformance with the runtimes models really run on: onnxruntime CPU (the Python package, at
//! its default optimisation level and with optimisations disabled) and tract's optimised plan.
//!
//! For every model below, with lipfp's default execution model (or the declared accumulation):
//!
//! * (a) at every point that a sound mode certifies, and at sampled points of its ball (one
//!   first-order attack towards the runner-up class, three random directions, each rounded to the
//!   input format and checked to lie in the ball), the runtime returns the certified class;
//! * (b) at sampled points, for every class pair `(i, j)`, the runtime's margin differs from the
//!   exact margin of the converted network (big-integer arithmetic) by at most lipfp's own
//!   per-point bound `E_ctr^{ij}` (checked exactly; the largest ratio is printed).
//!
//! Models: the MNIST benchmark (`../shared`) in float32 and exported with float16 weights and
//! input; the embedded examples in float32, flush-to-zero and float16; a dense layer with large
//! biases where onnxruntime's bias-first accumulation changes the class; a float32 network with a
//! float16 `Cast` round trip between its layers; near-ties on the decision boundary. Without a
//! Python with onnxruntime (or without `../shared`) the tests that need it are reported as
//! ignored, with the reason (`build.rs`); `.ci/run` requires it.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::ball::{attack_sample, check_deviation, random_samples, Figures};
use crate::common::exact::ExactNet;
use crate::common::onnx_builder::*;
use crate::common::runtime::{
    argmax, example, export_float16, ort_logits, python, read_inputs, tract_logits,
};
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::engine::exec::{Executor, Hidden};
use lipfp::engine::run::{ReferencePlan, Subject, SubjectSpec};
use lipfp::onnx::model::DenseNet;
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::policy::Decision;
use ndarray::ArrayView2;
use rug::Rational;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shared_mnist() -> PathBuf {
    root().join("../shared/benchmarks/mnist")
}

/// One model and test set to check.
struct Case {
    name: String,
    model: PathBuf,
    /// Inputs as `f64`, row-major `[rows, dim]` (converted to the storage format by lipfp and by
    /// the runtime's own input cast alike, round-to-nearest-even).
    inputs: Vec<f64>,
    rows: usize,
    format: Option<Format>,
    accumulate: Option<Format>,
    ftz: bool,
    epsilon: &'static str,
    /// Points (evenly spread) at which the deviation bound is checked against exact logits.
    exact_points: usize,
    /// Certified points (evenly spread) whose balls are sampled.
    ball_points: usize,
    /// Whether mode `local` certifies too.
    local: bool,
    /// The decision rule (with `argmin` the runtimes' outputs are negated, exactly, before they
    /// are compared with lipfp's, which certifies the negated outputs' argmax).
    decision: Decision,
}

fn certify(case: &Case, dir: &Path) -> (Subject, Vec<bool>, Vec<f64>) {
    let spec = SubjectSpec {
        model: case.model.clone(),
        format: case.format,
        accumulate: case.accumulate,
        ftz: case.ftz,
        runtime: None,
        inputs: PathBuf::new(),
        labels: None,
        gram_iterations: 12,
        reference: ReferencePlan::Every { products: true },
        shard: None,
        decision: case.decision,
        label_column: None,
        ball: Default::default(),
    };
    let data = (&case.inputs[..], case.rows);
    let radius = (case.epsilon, case.local);
    common::ball::certify_any_sound(dir, &case.name, data, spec, radius)
}

/// A runtime's outputs as lipfp certifies them: negated (exactly) for `argmin`, whose class is
/// then their first largest.
fn read_as(decision: Decision, y: Vec<f64>) -> Vec<f64> {
    match decision {
        Decision::Argmax => y,
        Decision::Argmin => y.into_iter().map(|v| -v).collect(),
    }
}

/// Run every check of `case` against onnxruntime (both optimisation levels) and tract.
fn check_case(python: &Path, case: Case) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let (subject, certified, x) = certify(&case, dir.path());
    let dim = subject.net.input_dim();
    let rows = case.rows;
    let eps: f64 = case.epsilon.parse().unwrap();
    let bounds = subject.bounds.as_ref().unwrap_or_else(|e| panic!("{e}"));
    let exact = ExactNet::new(&subject.net);
    let daz: &[&str] = if case.ftz { &["--daz"] } else { &[] };
    let mut runtimes: Vec<(String, Vec<f64>)> = Vec::new();
    for opt in ["default", "disable"] {
        let mut flags = vec!["--opt", opt];
        flags.extend_from_slice(daz);
        let y = ort_logits(python, &case.model, rows, dim, &x, &flags);
        runtimes.push((
            format!("onnxruntime --opt {opt}"),
            read_as(case.decision, y),
        ));
    }
    match tract_logits(&case.model, &subject.net.input_shape, rows, &x) {
        Ok(y) if !case.ftz => runtimes.push(("tract".into(), read_as(case.decision, y))),
        Ok(_) => eprintln!(
            "{}: tract not compared (it does not flush subnormals)",
            case.name
        ),
        Err(e) => eprintln!("{}: tract cannot run this model: {e}", case.name),
    }
    let classes = subject.net.classes();
    let mut fig = Figures {
        points: rows,
        certified: certified.iter().filter(|&&c| c).count(),
        ..Figures::default()
    };
    // (a) at the certified centres
    for (_, y) in &runtimes {
        for k in (0..rows).filter(|&k| certified[k]) {
            if Some(argmax(&y[k * classes..(k + 1) * classes])) != subject.predictions[k] {
                fig.mismatches += 1;
            }
        }
    }
    // (b) deviation bounds at evenly spread points
    let stride = (rows / case.exact_points.max(1)).max(1);
    for k in (0..rows).step_by(stride) {
        let ex = exact.logits(&x[k * dim..(k + 1) * dim]);
        for (_, y) in &runtimes {
            let yk = &y[k * classes..(k + 1) * classes];
            check_deviation(bounds, subject.x_norms[k], &ex, yk, &mut fig);
        }
    }
    // (a) in the balls of certified points
    let chosen: Vec<usize> = (0..rows).filter(|&k| certified[k]).collect();
    let stride = (chosen.len() / case.ball_points.max(1)).max(1);
    let mut samples: Vec<(usize, Vec<f64>)> = Vec::new();
    for &k in chosen.iter().step_by(stride) {
        let xk = &x[k * dim..(k + 1) * dim];
        samples.extend(attack_sample(&subject, k, xk, eps).map(|p| (k, p)));
        for p in random_samples(xk, eps, subject.net.format, k as u64 + 1) {
            samples.push((k, p));
        }
    }
    fig.ball_samples = samples.len();
    if !samples.is_empty() {
        let flat: Vec<f64> = samples
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let y = ort_logits(python, &case.model, samples.len(), dim, &flat, daz);
        let mut ball_runs = vec![read_as(case.decision, y)];
        if !case.ftz {
            if let Ok(y) = tract_logits(&case.model, &subject.net.input_shape, samples.len(), &flat)
            {
                ball_runs.push(read_as(case.decision, y));
            }
        }
        for y in &ball_runs {
            for (s, (k, _)) in samples.iter().enumerate() {
                if Some(argmax(&y[s * classes..(s + 1) * classes])) != subject.predictions[*k] {
                    fig.mismatches += 1;
                }
            }
        }
    }
    println!(
        "conformance {}: {} points, {} certified, {} ball samples, runtimes [{}], mismatches {}, \
         deviation/bound max {:.3e} over {} pairs, violations {}",
        case.name,
        fig.points,
        fig.certified,
        fig.ball_samples,
        runtimes
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        fig.mismatches,
        fig.max_ratio,
        fig.checked_pairs,
        fig.violations
    );
    assert_eq!(
        fig.mismatches, 0,
        "{}: a runtime contradicts a certificate",
        case.name
    );
    assert_eq!(
        fig.violations, 0,
        "{}: a runtime deviates beyond lipfp's bound",
        case.name
    );
    assert!(fig.checked_pairs > 0, "{}: nothing was checked", case.name);
    fig
}

fn case(name: &str, model: PathBuf, inputs: Vec<f64>, rows: usize, epsilon: &'static str) -> Case {
    Case {
        name: name.into(),
        model,
        inputs,
        rows,
        format: None,
        accumulate: None,
        ftz: false,
        epsilon,
        exact_points: rows,
        ball_points: rows,
        local: false,
        decision: Decision::Argmax,
    }
}

/// A ReLU on the output layer (the naturally trained fixture with a `Relu` appended by
/// `tests/local/relu_output.py`): lipfp reads the zero floor as one more class that is never
/// certified; at every point a sound mode (`local` included) certifies, and at the attacked and
/// random points of its ball, onnxruntime's argmax of the ReLU outputs is the certified class.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn relu_output_certificates_hold_on_onnxruntime() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("relu-out.onnx");
    let out = std::process::Command::new(&py)
        .arg(root().join("tests/local/relu_output.py"))
        .arg(root().join("tests/local/digits-32x2.onnx"))
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, inputs, rows) = common::runtime::example("digits");
    let spec = SubjectSpec {
        model: model.clone(),
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: PathBuf::new(),
        labels: None,
        gram_iterations: 12,
        reference: ReferencePlan::Every { products: true },
        shard: None,
        decision: Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    let (subject, certified, x) = common::ball::certify_any_sound(
        dir.path(),
        "relu-out",
        (&inputs, rows),
        spec,
        ("0.05", true),
    );
    assert_eq!(subject.net.floor_class(), Some(10));
    let dim = subject.net.input_dim();
    let real = subject.net.label_classes();
    let (mut checked, mut samples) = (0, Vec::new());
    for k in (0..rows).filter(|&k| certified[k]) {
        let xk = &x[k * dim..(k + 1) * dim];
        samples.push((k, xk.to_vec()));
        samples.extend(common::ball::attack_sample(&subject, k, xk, 0.05).map(|p| (k, p)));
        for p in common::ball::random_samples(xk, 0.05, subject.net.format, k as u64 + 1) {
            samples.push((k, p));
        }
    }
    let flat: Vec<f64> = samples
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .collect();
    let y = ort_logits(&py, &model, samples.len(), dim, &flat, &[]);
    for (s, (k, _)) in samples.iter().enumerate() {
        let row = &y[s * real..(s + 1) * real];
        assert!(row.iter().all(|v| *v >= 0.0), "not a ReLU output");
        assert_eq!(
            Some(argmax(row)),
            subject.predictions[*k],
            "point {k}, sample {s}"
        );
        checked += 1;
    }
    let n_cert = certified.iter().filter(|&&c| c).count();
    eprintln!("relu output: {n_cert} of {rows} certified, {checked} runtime checks");
    assert!(n_cert > 100 && checked > n_cert);
}

/// ACAS Xu style: a network whose decision is the *smallest* output, certified with
/// `decision = "argmin"` (the naturally trained fixture read that way, standard and local
/// modes): at every certified point, at the attacked points of its ball and at random points of
/// it, onnxruntime's and tract's argmin is the certified class.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn argmin_decision_holds_on_the_runtimes() {
    let py = python();
    let (_, inputs, rows) = common::runtime::example("digits");
    let model = root().join("tests/local/digits-32x2.onnx");
    let fig = check_case(
        &py,
        Case {
            local: true,
            decision: Decision::Argmin,
            ..case("digits-32x2-argmin", model, inputs, rows, "0.05")
        },
    );
    assert!(fig.certified > 100 && fig.ball_samples > 100, "{fig:?}");
}

/// Mode `local` on a naturally trained network (the fixture of `tests/oracles/local_reference.rs`), where
/// it certifies far more than the Lipschitz modes: every point any sound mode certifies keeps its
/// class under onnxruntime and tract at the centre and at the sampled and attacked points of its
/// ball.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn local_on_a_naturally_trained_network() {
    let py = python();
    let (_, inputs, rows) = common::runtime::example("digits");
    let model = root().join("tests/local/digits-32x2.onnx");
    for eps in ["0.05", "0.2"] {
        let fig = check_case(
            &py,
            Case {
                local: true,
                ..case(
                    &format!("digits-32x2-local-{eps}"),
                    model.clone(),
                    inputs.clone(),
                    rows,
                    eps,
                )
            },
        );
        eprintln!("{eps}: {fig:?}");
        assert!(fig.certified > 100, "{eps}: {fig:?}");
    }
}

#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn mnist_float32() {
    let (py, dir) = (python(), shared_mnist());
    let (inputs, rows) = read_inputs(&dir.join("x_test.npy"));
    let fig = check_case(
        &py,
        Case {
            exact_points: 200,
            ball_points: 300,
            ..case("mnist-float32", dir.join("model.onnx"), inputs, rows, "0.3")
        },
    );
    // best: 9,569 points with its componentwise sources (measured, the paper's best, 9,565)
    assert_eq!((fig.points, fig.certified), (10_000, 9_569));
}

#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn mnist_float16_export() {
    let (py, dir) = (python(), shared_mnist());
    let tmp = tempfile::tempdir().unwrap();
    let model = export_float16(&py, &dir.join("model.onnx"), tmp.path());
    let (inputs, rows) = read_inputs(&dir.join("x_test.npy"));
    let fig = check_case(
        &py,
        Case {
            accumulate: Some(Format::Float32),
            exact_points: 150,
            ball_points: 300,
            ..case(
                "mnist-float16-accumulate-float32",
                model.clone(),
                inputs.clone(),
                rows,
                "0.3",
            )
        },
    );
    assert!(fig.certified >= 9_200, "{fig:?}");
    // the default execution model also covers float16 accumulation: sound, vacuous here
    check_case(
        &py,
        Case {
            exact_points: 50,
            ball_points: 0,
            ..case(
                "mnist-float16-default",
                model,
                inputs[..2000 * 784].to_vec(),
                2000,
                "0.3",
            )
        },
    );
}

/// The embedded examples' test sets.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn embedded_examples() {
    let py = python();
    let (digits, x, rows) = example("digits");
    let fig = check_case(
        &py,
        case("digits-float32", digits.clone(), x.clone(), rows, "0.3"),
    );
    assert!(fig.certified > rows / 2, "{fig:?}");
    check_case(
        &py,
        Case {
            ftz: true,
            ..case("digits-float32-ftz", digits, x, rows, "0.3")
        },
    );
    let (cancer, x, rows) = example("breast-cancer");
    check_case(
        &py,
        case(
            "breast-cancer-float32",
            cancer.clone(),
            x.clone(),
            rows,
            "0.25",
        ),
    );
    let tmp = tempfile::tempdir().unwrap();
    let half = export_float16(&py, &cancer, tmp.path());
    check_case(
        &py,
        case(
            "breast-cancer-float16",
            half.clone(),
            x.clone(),
            rows,
            "0.25",
        ),
    );
    let fig = check_case(
        &py,
        Case {
            accumulate: Some(Format::Float32),
            ..case(
                "breast-cancer-float16-accumulate-float32",
                half,
                x,
                rows,
                "0.25",
            )
        },
    );
    assert!(fig.certified > 0, "{fig:?}");
}

/// One dense layer, 784 inputs, 10 classes, every bias 1024 (one float32 ulp there is `2^-13`).
/// Class 0 has four weights just under half an ulp, at `k = 0, 256, 512, 768`; class 1 one weight
/// just over half an ulp. Exactly, and with the bias added last, class 0 wins by about 1.5 ulp at
/// `x = 1`; onnxruntime pre-loads the bias and adds each 256-term block into it, so each of class
/// 0's blocks rounds away and class 1 wins.
fn bias_first_model(dir: &Path) -> PathBuf {
    let (n, m) = (784usize, 10usize);
    let mut w = vec![0f32; m * n];
    for k in [0, 256, 512, 768] {
        w[k] = 2f32.powi(-14) - 2f32.powi(-30);
    }
    w[n] = 2f32.powi(-14) + 2f32.powi(-30);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[n]);
    b.init_f32("W", &[m, n], &w);
    b.init_f32("B", &[m], &[1024.0; 10]);
    b.node(
        "Gemm",
        "dense",
        &["x", "W", "B"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("logits", m);
    b.write(dir, "bias_first.onnx")
}

#[test]
fn the_bias_first_counterexample_is_never_certified() {
    let dir = tempfile::tempdir().unwrap();
    let model = bias_first_model(dir.path());
    let ones = vec![1.0; 784];
    let c = case("bias-first", model.clone(), ones.clone(), 1, "0.01");
    let (subject, certified, x) = certify(&c, dir.path());
    // lipfp's own execution (bias added last) and the exact network both say class 0 ...
    assert_eq!(subject.predictions[0], Some(0));
    let exact = ExactNet::new(&subject.net).logits(&x);
    let exact_class = (0..10).max_by(|&a, &b| exact[a].cmp(&exact[b])).unwrap();
    assert_eq!(exact_class, 0);
    // ... by a margin that the paper's bias-after bound, u (|b_0| + |b_1|) = 2^-13 plus the
    // product terms, would have certified
    let margin = Rational::from(&exact[0] - &exact[1]);
    assert!(
        margin
            > Rational::from((3, 2)) * Rational::from((1, 1u32 << 13))
                - Rational::from((1, 1u32 << 25))
    );
    // ... but no sound mode certifies it now
    assert!(
        !certified[0],
        "a sound mode certified the bias-first counterexample"
    );
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_returns_another_class_at_the_bias_first_point() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let model = bias_first_model(dir.path());
    let x = vec![1.0; 784];
    // onnxruntime returns class 1 at the centre itself (MLAS: bias first, blocks of 256)
    let y = ort_logits(&py, &model, 1, 784, &x, &["--opt", "default"]);
    assert_eq!(argmax(&y), 1, "onnxruntime logits {y:?}");
    // and the runtime stays within lipfp's deviation bound at a few points around it
    let mut rng = Lcg::new(5);
    let rows = 64;
    let inputs: Vec<f64> = (0..rows * 784)
        .map(|k| {
            if k < 784 {
                1.0
            } else {
                (1.0 + 0.01 * rng.sym_f64()) as f32 as f64
            }
        })
        .collect();
    check_case(
        &py,
        Case {
            ball_points: 0,
            ..case("bias-first", model, inputs, rows, "0.01")
        },
    );
}

/// A float32 network 16-32-5 with a float16 `Cast` round trip after the hidden ReLU.
fn cast_round_trip_model(dir: &Path) -> PathBuf {
    let mut rng = Lcg::new(23);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[16]);
    b.init_f32("W1", &[32, 16], &rng.f32s(32 * 16, 1.0));
    b.init_f32("B1", &[32], &rng.f32s(32, 0.5));
    b.init_f32("W2", &[5, 32], &rng.f32s(5 * 32, 1.0));
    b.init_f32("B2", &[5], &rng.f32s(5, 0.5));
    b.node(
        "Gemm",
        "fc1",
        &["x", "W1", "B1"],
        &["h"],
        vec![attr_int("transB", 1)],
    );
    b.node("Relu", "relu1", &["h"], &["a"], vec![]);
    b.node(
        "Cast",
        "to_half",
        &["a"],
        &["a16"],
        vec![attr_int("to", DataType::Float16 as i64)],
    );
    b.node(
        "Cast",
        "to_float",
        &["a16"],
        &["a32"],
        vec![attr_int("to", DataType::Float as i64)],
    );
    b.node(
        "Gemm",
        "fc2",
        &["a32", "W2", "B2"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("logits", 5);
    b.write(dir, "cast_round_trip.onnx")
}

#[test]
fn cast_round_trips_are_roundings() {
    let dir = tempfile::tempdir().unwrap();
    let model = cast_round_trip_model(dir.path());
    let net = lipfp::onnx::model::load(&model, Format::Float32, false).unwrap();
    assert_eq!(net.layers[0].casts, vec![Format::Float16]);
    assert!(net.layers[1].casts.is_empty());
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn cast_round_trips_conform_to_onnxruntime() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let model = cast_round_trip_model(dir.path());
    // inputs from 1 to 1e5 in magnitude: the largest overflow float16 in the hidden layer
    let mut rng = Lcg::new(7);
    let rows = 600;
    let inputs: Vec<f64> = (0..rows * 16)
        .map(|k| rng.sym_f64() * 10f64.powi((k / 16 % 6) as i32))
        .collect();
    let fig = check_case(&py, case("cast-round-trip", model, inputs, rows, "0.001"));
    assert!(fig.certified > 0 && fig.certified < rows, "{fig:?}");
}

/// Points of the digits test set moved onto the decision boundary: the last point, on the
/// segment towards a point of another class, that the float64 execution still gives the
/// original class, and points backing away from it. Certified (at eps 0) only where the margin
/// beats the error bound; the runtimes must agree wherever one is.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn near_ties() {
    let py = python();
    let (model, x, rows) = example("digits");
    let net = lipfp::onnx::model::load(&model, Format::Float32, false).unwrap();
    let exec = Executor::new(&net, &ExecutionModel::float64_reference());
    let dim = net.input_dim();
    let class_of = |p: &[f64]| {
        let view = ArrayView2::from_shape((1, dim), p).unwrap();
        argmax(
            exec.forward_block(view, Hidden::None)
                .0
                .row(0)
                .as_slice()
                .unwrap(),
        )
    };
    let point = |k: usize| -> Vec<f64> {
        x[k * dim..(k + 1) * dim]
            .iter()
            .map(|&v| v as f32 as f64)
            .collect()
    };
    let mut ties = Vec::new();
    for a in 0..rows.min(200) {
        let xa = point(a);
        let ca = class_of(&xa);
        let Some(b) = (1..rows)
            .map(|d| (a + d) % rows)
            .find(|&b| class_of(&point(b)) != ca)
        else {
            continue;
        };
        let xb = point(b);
        let at = |t: f64| -> Vec<f64> {
            xa.iter()
                .zip(&xb)
                .map(|(&p, &q)| (p + t * (q - p)) as f32 as f64)
                .collect()
        };
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if class_of(&at(mid)) == ca {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // the boundary point itself and points backing away from it: margins from a few ulps
        // to well above the error bound
        for back in [0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2] {
            ties.extend(at(lo * (1.0 - back)));
        }
    }
    let n = ties.len() / dim;
    let fig = check_case(
        &py,
        Case {
            ball_points: 0,
            exact_points: 300,
            ..case("digits-near-ties", model, ties, n, "0")
        },
    );
    assert!(fig.points >= 1000, "{fig:?}");
    assert!(fig.certified > 0 && fig.certified < fig.points, "{fig:?}");
}

#[test]
fn exact_logits_of_a_tiny_net() {
    use lipfp::onnx::model::{Activation, Dense};
    use ndarray::array;
    let layer = |w, b, act| Dense {
        w,
        b,
        act,
        nodes: vec![],
        ops: vec![],
        casts: vec![],
        affine: None,
    };
    let net = DenseNet {
        layers: vec![
            layer(
                array![[0.5, -1.0], [0.25, 0.75]],
                vec![0.125, -2.0],
                Activation::Relu,
            ),
            layer(
                array![[1.0, 2.0], [-1.0, 0.5]],
                vec![0.0, 1.0],
                Activation::Identity,
            ),
        ],
        input_name: "x".into(),
        input_shape: vec![2],
        head: Vec::new(),
        format: Format::Float16,
        converted_changed: 0,
        path: "tiny".into(),
    };
    // hidden: relu(1.5 - 0.5 + 0.125, 0.75 + 0.375 - 2) = (1.125, 0)
    let y = ExactNet::new(&net).logits(&[3.0, 0.5]);
    assert_eq!(y, vec![Rational::from((9, 8)), Rational::from((-1, 8))]);
}
