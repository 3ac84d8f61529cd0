//! Classifier heads after the logits (`src/onnx/model/heads.rs`, `src/bounds/certify/head.rs`): `Softmax`,
//! `LogSoftmax`, `ArgMax`, skl2onnx's label (`ArrayFeatureExtractor` over the labels `0..K-1`)
//! and `ZipMap`, and the ops that pass a head value on.
//!
//! * Acceptance: each head loads, `DenseNet::head` lists its ops, the network and lipfp's
//!   classes are those of the model without the head, and (with onnxruntime) lipfp's classes
//!   are onnxruntime's and tract's on sample inputs.
//! * The head margin `g` every sound certificate subtracts is checked twice. Against exact
//!   rationals: `g` satisfies the inequality that defines it (exp and log evaluated by rug with
//!   outward rounding) and a slightly smaller value does not. Against onnxruntime: on crafted
//!   logits fed through an identity `Gemm` (so the logits are exactly the inputs), whenever the
//!   top class leads every other class by at least `g` — at logits near 0, 1, 100, 1e4 and -1e4,
//!   with every other class at the runner-up value (largest softmax sum) or at random lower
//!   values — onnxruntime's Softmax / LogSoftmax scores rank it strictly first and `ArgMax` of
//!   them returns it, in float16, float32 and float64. Smaller gaps, down to a few ulps, probe
//!   the rounding: onnxruntime must tie or swap the classes at some of them, or the crafted
//!   inputs would prove nothing.
//! * End to end: a Softmax-headed model's certificates are the plain model's minus `g` (a point
//!   whose logit gap is above the plain certificate's bound but below that bound plus `g` is
//!   refused), and `lipfp certify` names the head and its margin in the report.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::classifiers::*;
use crate::common::onnx_builder::*;
use crate::common::runtime::{self, argmax};
use lipfp::arith::format::Format;
use lipfp::bounds::certify::head::{
    head_margin, log_softmax_margin, softmax_margin, transcendental_accuracy,
};
use lipfp::bounds::certify::{Mode, Refusal};
use lipfp::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use lipfp::onnx::model::{self, DenseNet, HeadOp};
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::policy::Radius;
use lipfp::progress::Progress;
use rug::float::Round;
use rug::ops::Pow;
use rug::{Float, Rational};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The model at `path`, loaded in the format it is stored in.
fn load(path: &Path) -> DenseNet {
    model::stored_format(path)
        .and_then(|f| model::load(path, f, false))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `rows` float32 inputs of width `dim` in `[-2, 2)`, row-major, as `f64`.
fn sample_inputs(rows: usize, dim: usize, seed: u64) -> Vec<f64> {
    let mut rng = Lcg::new(seed);
    (0..rows * dim)
        .map(|_| 2.0 * rng.sym_f32() as f64)
        .collect()
}

/// The subject lipfp prepares for `model` on the float inputs `x` (`[rows, dim]`).
fn prepare(model: &Path, x: &[f64], dim: usize, reference: bool) -> Subject {
    let inputs = model.with_extension("x.npy");
    runtime::write_f64_npy(&inputs, x.len() / dim, &[dim], x);
    let spec = SubjectSpec {
        model: model.to_path_buf(),
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs,
        labels: None,
        gram_iterations: 12,
        reference: if reference {
            ReferencePlan::Every { products: true }
        } else {
            ReferencePlan::None
        },
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    run::prepare(&spec, &Progress::silent()).unwrap_or_else(|e| panic!("{e}"))
}

/// lipfp's predicted class per row.
fn classes_of(subject: &Subject) -> Vec<i64> {
    subject
        .predictions
        .iter()
        .map(|p| p.map(|c| c as i64).unwrap_or(-1))
        .collect()
}

/// One graph output as onnxruntime returned it: `[rows, width]`, widened to `f64`.
struct Output {
    width: usize,
    values: Vec<f64>,
}

impl Output {
    fn row(&self, i: usize) -> &[f64] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// The class of row `i`: the label itself, or the arg-max of the scores (first on ties).
    fn class(&self, i: usize) -> i64 {
        match self.width {
            1 => self.row(i)[0] as i64,
            _ => argmax(self.row(i)) as i64,
        }
    }
}

/// onnxruntime's outputs for each `(model, inputs [rows, dim])`, in one Python process
/// (`tests/conformance/ort_heads.py`).
fn ort_outputs(jobs: &[(&Path, usize, &[f64])]) -> Vec<Vec<Output>> {
    let python = runtime::python();
    let dir = tmp();
    let mut args: Vec<PathBuf> = Vec::new();
    for (k, (model, dim, x)) in jobs.iter().enumerate() {
        let (inputs, out) = (
            dir.path().join(format!("x{k}.npy")),
            dir.path().join(format!("out{k}")),
        );
        runtime::write_f64_npy(&inputs, x.len() / dim, &[*dim], x);
        std::fs::create_dir(&out).unwrap();
        args.extend([model.to_path_buf(), inputs, out]);
    }
    let args: Vec<&Path> = args.iter().map(PathBuf::as_path).collect();
    runtime::run_script(&python, "ort_heads.py", &args, &[]);
    jobs.iter()
        .enumerate()
        .map(|(k, (_, dim, x))| {
            let rows = x.len() / dim;
            let out = dir.path().join(format!("out{k}"));
            (0..)
                .map(|o| out.join(format!("{o}.npy")))
                .take_while(|p| p.exists())
                .map(|p| {
                    let values = runtime::read_f64_npy(&p);
                    Output {
                        width: values.len() / rows,
                        values,
                    }
                })
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Acceptance
// ---------------------------------------------------------------------------------------------

/// `/head/{op}` over the logits, then `ArgMax` (keepdims 1: an int64 `[N, 1]` output).
fn scores_then_argmax(op: &str) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    classifier_from(&mut b, "x", 3);
    b.node(
        op,
        &format!("/head/{op}"),
        &["logits"],
        &["scores"],
        vec![attr_int("axis", -1)],
    );
    b.node(
        "ArgMax",
        "/head/ArgMax",
        &["scores"],
        &["label"],
        vec![attr_int("axis", -1), attr_int("keepdims", 1)],
    );
    b.output("label", DataType::Int64, Some(&batched(&[1])));
    b
}

/// The logits and their probabilities, both graph outputs (the logits first).
fn logits_and_probabilities() -> ModelBuilder {
    let mut b = softmax_model();
    b.outputs.insert(
        0,
        value_info("logits", DataType::Float, Some(&batched(&[3]))),
    );
    b
}

/// Softmax, then every op that passes a head value on: Identity, Reshape, Flatten, Unsqueeze,
/// Squeeze and an exact Cast (float32 -> float64).
fn softmax_passed_on() -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    classifier_from(&mut b, "x", 3);
    b.node("Softmax", "/Softmax", &["logits"], &["p0"], vec![]);
    b.node("Identity", "/Identity", &["p0"], &["p1"], vec![]);
    b.init_i64("shape", &[2], &[-1, 3]);
    b.node("Reshape", "/Reshape", &["p1", "shape"], &["p2"], vec![]);
    b.node(
        "Flatten",
        "/Flatten",
        &["p2"],
        &["p3"],
        vec![attr_int("axis", 1)],
    );
    b.init_i64("axes", &[1], &[2]);
    b.node("Unsqueeze", "/Unsqueeze", &["p3", "axes"], &["p4"], vec![]);
    b.node("Squeeze", "/Squeeze", &["p4", "axes"], &["p5"], vec![]);
    let to_double = attr_int("to", DataType::Double as i64);
    b.node("Cast", "/Cast", &["p5"], &["probs"], vec![to_double]);
    b.output("probs", DataType::Double, Some(&batched(&[3])));
    b
}

/// A Softmax without an `axis` attribute at `opset`: the default (1 before opset 13, -1 from
/// 13) is the class axis of `[N, classes]` logits either way.
fn softmax_default_axis(opset: i64) -> ModelBuilder {
    let mut b = with_head(|b| {
        b.node("Softmax", "/Softmax", &["logits"], &["probs"], vec![]);
        "probs".into()
    });
    b.opset(opset);
    b
}

/// Every head model lipfp reads, with the head ops `DenseNet::head` must list (sorted).
fn head_models() -> Vec<(&'static str, ModelBuilder, Vec<HeadOp>)> {
    use HeadOp::*;
    vec![
        ("softmax", softmax_model(), vec![Softmax]),
        ("log_softmax", log_softmax_model(), vec![LogSoftmax]),
        ("argmax", argmax_model(), vec![ArgMax]),
        (
            "softmax_argmax",
            scores_then_argmax("Softmax"),
            vec![Softmax, ArgMax],
        ),
        (
            "log_softmax_argmax",
            scores_then_argmax("LogSoftmax"),
            vec![LogSoftmax, ArgMax],
        ),
        (
            "logits_and_probabilities",
            logits_and_probabilities(),
            vec![Softmax],
        ),
        ("softmax_passed_on", softmax_passed_on(), vec![Softmax]),
        ("softmax_opset11", softmax_default_axis(11), vec![Softmax]),
        ("softmax_opset13", softmax_default_axis(13), vec![Softmax]),
        (
            "skl2onnx_mlp",
            skl2onnx_mlp(&[0, 1, 2], false),
            vec![Softmax, ArgMax],
        ),
        (
            "skl2onnx_mlp_zipmap",
            skl2onnx_mlp(&[0, 1, 2], true),
            vec![Softmax, ArgMax],
        ),
    ]
}

/// Each head is read, listed in `DenseNet::head` (and in the model hash), and leaves the network
/// and its classes as they are without it.
#[test]
fn every_head_is_read_after_the_logits_and_listed() {
    let dir = tmp();
    let plain_path = plain_model().write(dir.path(), "plain.onnx");
    let plain = load(&plain_path);
    assert!(plain.head.is_empty());
    let x = sample_inputs(64, 12, 3);
    let plain_subject = prepare(&plain_path, &x, 12, false);
    let mut hashes = vec![plain.hash()];
    for (name, b, head) in head_models() {
        let path = b.write(dir.path(), &format!("{name}.onnx"));
        let net = load(&path);
        assert_eq!(net.head, head, "{name}");
        assert_eq!(net.widths(), [12, 8, 3], "{name}");
        assert_eq!(net.format, Format::Float32, "{name}");
        hashes.push(net.hash());
        if name.starts_with("skl2onnx") {
            continue; // other weights
        }
        let subject = prepare(&path, &x, 12, false);
        assert_eq!(subject.logits, plain_subject.logits, "{name}");
        assert_eq!(classes_of(&subject), classes_of(&plain_subject), "{name}");
    }
    // the head is part of the model hash: a softmax model is not its logits model
    let (softmax, log_softmax) = (hashes[1].clone(), hashes[2].clone());
    assert_ne!(softmax, hashes[0]);
    assert_ne!(softmax, log_softmax);
}

/// lipfp's classes for a head model are onnxruntime's (from its first output: the label, or
/// the arg-max of scores) and tract's, and its certificates at radius 0.05 are about them.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn head_models_give_onnxruntimes_and_tracts_classes() {
    let dir = tmp();
    let x = sample_inputs(64, 12, 5);
    let models: Vec<(&str, PathBuf)> = head_models()
        .into_iter()
        .map(|(name, b, _)| (name, b.write(dir.path(), &format!("{name}.onnx"))))
        .collect();
    let jobs: Vec<(&Path, usize, &[f64])> = models
        .iter()
        .map(|(_, p)| (p.as_path(), 12, &x[..]))
        .collect();
    let ort = ort_outputs(&jobs);
    let radius = Radius::parse_decimal("0.05").unwrap();
    for ((name, path), outs) in models.iter().zip(&ort) {
        let subject = prepare(path, &x, 12, false);
        let ours = classes_of(&subject);
        let theirs: Vec<i64> = (0..64).map(|i| outs[0].class(i)).collect();
        assert_eq!(
            ours, theirs,
            "{name}: lipfp's classes differ from onnxruntime's"
        );
        // tract does not implement the ai.onnx.ml ops
        if !name.starts_with("skl2onnx") {
            let t = runtime::tract_logits(path, &[12], 64, &x).unwrap_or_else(|e| panic!("{e}"));
            let out = Output {
                width: t.len() / 64,
                values: t,
            };
            let tract: Vec<i64> = (0..64).map(|i| out.class(i)).collect();
            assert_eq!(ours, tract, "{name}: lipfp's classes differ from tract's");
        }
        let outcome = run::certify(&subject, &radius, &[Mode::Standard]).unwrap();
        let verdicts = &outcome.mode(Mode::Standard).unwrap().verdicts;
        let certified = verdicts.iter().filter(|v| **v).count();
        for (i, _) in verdicts.iter().enumerate().filter(|(_, v)| **v) {
            assert_eq!(
                subject.predictions[i].map(|c| c as i64),
                Some(theirs[i]),
                "{name}"
            );
        }
        eprintln!("{name}: classes as onnxruntime's; {certified}/64 certified at 0.05");
    }
}

// ---------------------------------------------------------------------------------------------
// The head margin against onnxruntime
// ---------------------------------------------------------------------------------------------

/// The formats onnxruntime's CPU provider runs these heads in. float16 models run too, though
/// onnxruntime 1.32 has no float16 Softmax kernel on CPU: it inlines the op's function body
/// (ReduceMax, Sub, Exp, ReduceSum, Div) and runs it, like the Gemm and the ArgMax, in float32
/// between inserted Casts, so the float16 scores are float32 ones rounded once more (the two
/// roundings `certify::head` allows for) and `ArgMax` of the scores reads the float32 scores.
/// bfloat16 is not run.
const ORT_FORMATS: [(Format, DataType); 3] = [
    (Format::Float16, DataType::Float16),
    (Format::Float32, DataType::Float),
    (Format::Float64, DataType::Double),
];

/// `x` rounded to nearest in `format`.
fn to_nearest(x: f64, format: Format) -> f64 {
    match format {
        Format::Float64 => x,
        Format::Float32 => x as f32 as f64,
        Format::Float16 => half::f16::from_f64(x).to_f64(),
        Format::Bfloat16 => half::bf16::from_f64(x).to_f64(),
    }
}

/// The largest value of `format` below the value `r` of `format`.
fn next_below(r: f64, format: Format) -> f64 {
    match format {
        Format::Float64 => r.next_down(),
        Format::Float32 => (r as f32).next_down() as f64,
        Format::Float16 => {
            let bits = half::f16::from_f64(r).to_bits();
            let below = match bits {
                0 => 0x8001,
                b if b & 0x8000 == 0 => b - 1,
                b => b + 1,
            };
            half::f16::from_bits(below).to_f64()
        }
        Format::Bfloat16 => unreachable!("not run by onnxruntime"),
    }
}

/// The largest value of `format` at or below `x` (`x` finite, in range).
fn round_down(x: f64, format: Format) -> f64 {
    let r = to_nearest(x, format);
    if r <= x {
        r
    } else {
        next_below(r, format)
    }
}

/// `z[N, K] -> Gemm(I_K, 0) -> logits -> {op} -> scores -> ArgMax -> label`, and `ArgMax` of
/// the logits, in element type `dt`. Outputs: logits, scores, label, logit_label. The identity
/// `Gemm` is exact (products by 1 and 0, sums with zeros), so the logits are the inputs.
fn head_probe_model(dt: DataType, format: Format, classes: usize, op: &str) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input("z", dt, &batched(&[classes]));
    let eye: Vec<f64> = (0..classes * classes)
        .map(|k| if k % (classes + 1) == 0 { 1.0 } else { 0.0 })
        .collect();
    let zeros = vec![0.0; classes];
    match format {
        Format::Float16 => {
            let h = |v: &[f64]| {
                v.iter()
                    .map(|&x| half::f16::from_f64(x))
                    .collect::<Vec<_>>()
            };
            b.init_f16("W", &[classes, classes], &h(&eye));
            b.init_f16("B", &[classes], &h(&zeros));
        }
        Format::Float32 => {
            let s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
            b.init_f32("W", &[classes, classes], &s(&eye));
            b.init_f32("B", &[classes], &s(&zeros));
        }
        _ => {
            b.init_f64("W", &[classes, classes], &eye);
            b.init_f64("B", &[classes], &zeros);
        }
    }
    let argmax = || vec![attr_int("axis", 1), attr_int("keepdims", 0)];
    b.node(
        "Gemm",
        "/fc/Gemm",
        &["z", "W", "B"],
        &["logits"],
        vec![attr_int("transB", 1)],
    )
    .node(
        op,
        &format!("/head/{op}"),
        &["logits"],
        &["scores"],
        vec![attr_int("axis", 1)],
    )
    .node("ArgMax", "/head/ArgMax", &["scores"], &["label"], argmax())
    .node(
        "ArgMax",
        "/logits/ArgMax",
        &["logits"],
        &["logit_label"],
        argmax(),
    );
    b.output("logits", dt, Some(&batched(&[classes])))
        .output("scores", dt, Some(&batched(&[classes])))
        .output("label", DataType::Int64, Some(&[batch()]))
        .output("logit_label", DataType::Int64, Some(&[batch()]));
    b
}

/// A crafted row of logits: class `top` leads every other class by `gap` (exact) or more.
struct Row {
    z: Vec<f64>,
    top: usize,
    gap: f64,
    /// Whether `gap >= g` (compared exactly).
    at_margin: bool,
}

/// Rows of `classes` logits of `format` for the margin `g`. The top class is never class 0,
/// which is always a runner-up: `ArgMax` returns the first index on a tie, so a tie gives the
/// wrong class. `gap` is the gap asked for; the runner-up is the largest value at most
/// `top - gap`, so the real gap is at least `gap`, up to one ulp of `top` more.
///
/// * margin rows: logits near 0, 1, 100, 1e4 and -1e4, gaps `g` times 1 to 64; every other
///   class at the runner-up value (the largest softmax sum, `ln K` for LogSoftmax) or the
///   runner-up at class 0 and the others random, up to 16 below it;
/// * probe rows: logits near 0, 1 and 100, gaps `g` times `2^-1 .. 2^-60` and 0.95 to 0.6,
///   every other class at the runner-up value.
fn crafted_rows(format: Format, classes: usize, g: f64, seed: u64) -> Vec<Row> {
    let mut rng = Lcg::new(seed);
    let mut rows = Vec::new();
    let mut push = |base: f64, gap: f64, spread: bool, rng: &mut Lcg| {
        let top_value = to_nearest(base, format);
        // `top - gap` in f64 can round back to `top` for the tiniest gaps
        let runner = round_down(top_value - gap, format).min(next_below(top_value, format));
        let k = rows.len();
        let top = 1 + k % (classes - 1);
        let mut z = vec![runner; classes];
        z[top] = top_value;
        if spread {
            for (j, v) in z.iter_mut().enumerate().skip(1) {
                if j != top {
                    *v = round_down(runner - 16.0 * rng.unit_f64(), format);
                }
            }
        }
        let exact = Rational::from_f64(top_value).unwrap() - Rational::from_f64(runner).unwrap();
        rows.push(Row {
            z,
            top,
            gap: exact.to_f64(),
            at_margin: exact >= Rational::from_f64(g).unwrap(),
        });
    };
    for base in [0.0, 1.0, 100.0, 1e4, -1e4] {
        for factor in [1.0, 1.0001, 1.5, 4.0, 64.0] {
            for spread in [false, true] {
                push(base, g * factor, spread, &mut rng);
            }
        }
    }
    for base in [0.0, 1.0, 100.0] {
        let fractions = (1..=60)
            .map(|k| 2f64.powi(-k))
            .chain([0.95, 0.9, 0.8, 0.7, 0.6]);
        for t in fractions {
            push(base, g * t, false, &mut rng);
        }
    }
    rows
}

/// What onnxruntime did with the rows below the margin of one model.
#[derive(Default)]
struct Probe {
    /// Rows whose scores do not rank the top class strictly first (ties and swaps).
    score_failures: usize,
    /// Of these, rows where another class scores strictly higher.
    swaps: usize,
    /// Rows whose `ArgMax` of the scores is not the top class.
    label_failures: usize,
    /// The largest gap of a failing row.
    largest_failing_gap: f64,
}

/// onnxruntime's Softmax and LogSoftmax, and `ArgMax` of them, rank the top class strictly first
/// on every crafted row whose gap is at least lipfp's head margin (float16, float32, float64;
/// 2 to 1000 classes), and tie or swap it on some row below the margin.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_ranks_the_top_class_first_from_the_head_margin_on() {
    let dir = tmp();
    let mut cases = Vec::new();
    for (format, dt) in ORT_FORMATS {
        for classes in [2usize, 10, 100, 1000] {
            for (op, head) in [
                ("Softmax", HeadOp::Softmax),
                ("LogSoftmax", HeadOp::LogSoftmax),
            ] {
                let name = format!("{format}_{op}_{classes}");
                let path = head_probe_model(dt, format, classes, op)
                    .write(dir.path(), &format!("{name}.onnx"));
                // the margin lipfp subtracts for this very model
                let net = load(&path);
                assert_eq!(net.format, format, "{name}");
                assert_eq!(net.head, [head, HeadOp::ArgMax], "{name}");
                let g = head_margin(&net.head, format, classes as u64).unwrap();
                let direct = match head {
                    HeadOp::Softmax => softmax_margin(format, classes as u64).unwrap(),
                    _ => log_softmax_margin(format, classes as u64),
                };
                assert_eq!(g, direct, "{name}");
                let rows = crafted_rows(format, classes, g, classes as u64);
                cases.push((name, format!("{format} {op}"), path, classes, g, rows));
            }
        }
    }
    let inputs: Vec<Vec<f64>> = cases
        .iter()
        .map(|(.., rows)| rows.iter().flat_map(|r| r.z.iter().copied()).collect())
        .collect();
    let jobs: Vec<(&Path, usize, &[f64])> = cases
        .iter()
        .zip(&inputs)
        .map(|((_, _, path, classes, ..), x)| (path.as_path(), *classes, &x[..]))
        .collect();
    let outputs = ort_outputs(&jobs);
    // wrong labels below the margin, per format and head op
    let mut wrong_labels = std::collections::BTreeMap::new();
    for ((name, head, _, classes, g, rows), outs) in cases.iter().zip(&outputs) {
        let [logits, scores, label, logit_label] = &outs[..] else {
            panic!("{name}: {} outputs", outs.len());
        };
        assert_eq!(scores.width, *classes, "{name}");
        let mut probe = Probe::default();
        let mut checked = 0;
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                logits.row(i),
                &row.z[..],
                "{name}: the identity Gemm is not exact"
            );
            assert_eq!(logit_label.class(i), row.top as i64, "{name} row {i}");
            let s = scores.row(i);
            let others = (0..*classes).filter(|&j| j != row.top);
            let strict = others.clone().all(|j| s[row.top] > s[j]);
            let swapped = others.clone().any(|j| s[row.top] < s[j]);
            let labelled = label.class(i) == row.top as i64;
            if row.at_margin {
                checked += 1;
                assert!(
                    strict && labelled,
                    "{name}: gap {:e} >= margin {g:e} but onnxruntime ranks class {} \
                     {}: logits {:?}, scores {:?}, label {}",
                    row.gap,
                    row.top,
                    if strict {
                        "first"
                    } else {
                        "not strictly first"
                    },
                    &row.z[..row.z.len().min(8)],
                    &s[..s.len().min(8)],
                    label.class(i)
                );
            } else if !strict || !labelled {
                probe.score_failures += usize::from(!strict);
                probe.swaps += usize::from(swapped);
                probe.label_failures += usize::from(!labelled);
                probe.largest_failing_gap = probe.largest_failing_gap.max(row.gap);
            }
        }
        eprintln!(
            "{name}: margin {g:.3e}; {checked} rows at or above it ranked first; below it \
             {} score ties or swaps ({} swaps), {} wrong labels, largest failing gap {:.3e} \
             (margin / gap = {:.1})",
            probe.score_failures,
            probe.swaps,
            probe.label_failures,
            probe.largest_failing_gap,
            g / probe.largest_failing_gap
        );
        // the probe rows reach the rounding: without the margin the test could fail
        assert!(
            probe.score_failures > 0,
            "{name}: onnxruntime ranked the top class strictly first on every row below the \
             margin; the crafted rows do not probe its rounding"
        );
        *wrong_labels.entry(head.clone()).or_insert(0) += probe.label_failures;
        assert!(checked >= 40, "{name}: {checked} rows at the margin");
    }
    // float16: onnxruntime's ArgMax reads the float32 scores (see `ORT_FORMATS`), so only
    // some class counts give a wrong label
    for (head, wrong) in wrong_labels {
        assert!(
            wrong > 0,
            "{head}: ArgMax of the scores never missed the top class"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The head margin against exact rationals
// ---------------------------------------------------------------------------------------------

/// Bits of the rug floats the exponentials and logarithms are evaluated in.
const PREC: u32 = 512;

fn q(x: f64) -> Rational {
    Rational::from_f64(x).expect("finite")
}

/// `r` rounded in direction `round` to a `PREC`-bit float, then `op` (monotone) applied in the
/// same direction, as an exact rational.
fn outward(r: &Rational, round: Round, op: impl FnOnce(&mut Float, Round)) -> Rational {
    let mut x = Float::with_val_round(PREC, r, round).0;
    op(&mut x, round);
    x.to_rational().expect("finite")
}

/// `exp(x)` rounded up (`Round::Up`) or down, as a rational.
fn exp_rounded(x: &Rational, round: Round) -> Rational {
    outward(x, round, |f, r| {
        f.exp_round(r);
    })
}

/// `ln(x)` rounded up or down, as a rational (`x > 0`).
fn ln_rounded(x: &Rational, round: Round) -> Rational {
    outward(x, round, |f, r| {
        f.ln_round(r);
    })
}

/// `(u, eps_t, lambda)` of `format`, exactly.
fn constants(format: Format) -> (Rational, Rational, Rational) {
    (
        q(format.unit_roundoff()),
        q(transcendental_accuracy(format)),
        q(format.lambda()),
    )
}

/// The Softmax margin's defining inequality at `g`,
/// `(exp(-(1-u) g)(1+eps) + lambda)(1+u)^2 < (1-eps-lambda)(1-u)^2`, with the exponential
/// rounded up (`Round::Up`: `true` proves it holds) or down (`false` proves it fails).
fn softmax_inequality(format: Format, g: f64, round: Round) -> bool {
    let (u, eps, lambda) = constants(format);
    let one = || Rational::from(1);
    let d = (one() - &u) * q(g);
    let e = exp_rounded(&-d, round);
    let lhs = (e * (one() + &eps) + &lambda) * (one() + &u).pow(2u32);
    let rhs = (one() - &eps - &lambda) * (one() - &u).pow(2u32);
    lhs < rhs
}

/// `S_max = K (1 + eps + lambda)(1 + u)^(K-1)` and `S_min = (1 - eps - lambda)(1 - u)^(K-1)`,
/// the bounds on the runtime's softmax sum.
fn sum_bounds(format: Format, classes: u32) -> (Rational, Rational) {
    let (u, eps, lambda) = constants(format);
    let one = || Rational::from(1);
    let s_max = Rational::from(classes) * (one() + &eps + &lambda) * (one() + &u).pow(classes - 1);
    let s_min = (one() - &eps - &lambda) * (one() - &u).pow(classes - 1);
    (s_max, s_min)
}

/// `L_max = (1 + eps) max(ln S_max, -ln S_min) + eps`, the logarithms rounded up (an upper
/// bound on the runtime's `|log S|`) or down.
fn log_sum_bound(format: Format, classes: u32, round: Round) -> Rational {
    let (_, eps, _) = constants(format);
    let (s_max, s_min) = sum_bounds(format, classes);
    let other = if round == Round::Up {
        Round::Down
    } else {
        Round::Up
    };
    let hi = ln_rounded(&s_max, round);
    let neg_lo = -ln_rounded(&s_min, other);
    hi.max(neg_lo) * (Rational::from(1) + &eps) + eps
}

/// The LogSoftmax margin's defining inequality at `g`:
/// `D (1 - 2u - u^2) > (3 + u)(u L_max + lambda)` with `D = (1 - u) g`, `L_max` rounded up
/// (`true` proves it holds) or down (`false` proves it fails).
fn log_softmax_inequality(format: Format, classes: u32, g: f64, round: Round) -> bool {
    let (u, _, lambda) = constants(format);
    let one = || Rational::from(1);
    let d = (one() - &u) * q(g);
    let lhs = d * (one() - Rational::from(2) * &u - Rational::from(&u * &u));
    let rhs = (Rational::from(3) + &u) * (&u * log_sum_bound(format, classes, round) + &lambda);
    lhs > rhs
}

/// Every head margin satisfies its defining inequality in exact arithmetic, and a margin smaller
/// by a relative `2^-40` does not (the margin is that inequality's solution rounded up, not a
/// loose bound); the Softmax margin exists exactly when the top probability stays normal,
/// `(1 - eps - lambda)(1 - u) / S_max > lambda`.
#[test]
fn the_head_margins_satisfy_their_defining_inequalities_in_exact_arithmetic() {
    let below = |g: f64| g * (1.0 - 2f64.powi(-40));
    for format in Format::ALL {
        for classes in [2u32, 3, 10, 100, 1000, 10_000, 100_000] {
            let k = u64::from(classes);
            let name = format!("{format}, {classes} classes");
            let (u, eps, lambda) = constants(format);
            let (s_max, _) = sum_bounds(format, classes);
            let top = (Rational::from(1) - &eps - &lambda) * (Rational::from(1) - &u) / s_max;
            let softmax = softmax_margin(format, k);
            assert_eq!(softmax.is_some(), top > lambda, "{name}: {softmax:?}");
            if let Some(g) = softmax {
                assert!(
                    softmax_inequality(format, g, Round::Up),
                    "{name}: Softmax {g:e}"
                );
                assert!(
                    !softmax_inequality(format, below(g), Round::Down),
                    "{name}: {g:e}"
                );
            }
            let g = log_softmax_margin(format, k);
            assert!(
                log_softmax_inequality(format, classes, g, Round::Up),
                "{name}: LogSoftmax {g:e}"
            );
            assert!(
                !log_softmax_inequality(format, classes, below(g), Round::Down),
                "{name}: LogSoftmax {g:e}"
            );
            // a head's margin is the largest of its ops'
            let both = head_margin(&[HeadOp::Softmax, HeadOp::LogSoftmax], format, k);
            assert_eq!(both, softmax.map(|s| s.max(g)), "{name}");
            if classes == 10 {
                eprintln!(
                    "{format}: eps_t {:.3e}; 10 classes: Softmax margin {:.4e}, LogSoftmax \
                     margin {:.4e}",
                    transcendental_accuracy(format),
                    softmax.unwrap_or(f64::NAN),
                    log_softmax_margin(format, k)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// End to end: the certificates of a Softmax-headed model
// ---------------------------------------------------------------------------------------------

/// `x[N, 4] -> Gemm([I_4; 0.5 I_4]) -> Relu -> Gemm([e_0; e_1; e_2]) -> logits` (zero biases):
/// for `x >= 0` the logit of class `c` is exactly `x_c`. With `softmax`, a Softmax head
/// `/head/Softmax` reads the logits and its output `probs` is the graph's.
fn identity_classifier(softmax: bool) -> ModelBuilder {
    let mut w1 = vec![0.0f32; 8 * 4];
    for j in 0..4 {
        w1[j * 4 + j] = 1.0;
        w1[(4 + j) * 4 + j] = 0.5;
    }
    let mut w2 = vec![0.0f32; 3 * 8];
    for c in 0..3 {
        w2[c * 8 + c] = 1.0;
    }
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[4])
        .init_f32("fc1.weight", &[8, 4], &w1)
        .init_f32("fc1.bias", &[8], &[0.0; 8])
        .init_f32("fc2.weight", &[3, 8], &w2)
        .init_f32("fc2.bias", &[3], &[0.0; 3])
        .node(
            "Gemm",
            "/fc1/Gemm",
            &["x", "fc1.weight", "fc1.bias"],
            &["h"],
            vec![attr_int("transB", 1)],
        )
        .node("Relu", "/act/Relu", &["h"], &["r"], vec![])
        .node(
            "Gemm",
            "/fc2/Gemm",
            &["r", "fc2.weight", "fc2.bias"],
            &["logits"],
            vec![attr_int("transB", 1)],
        );
    if softmax {
        b.node(
            "Softmax",
            "/head/Softmax",
            &["logits"],
            &["probs"],
            vec![attr_int("axis", 1)],
        );
        b.output_f32("probs", 3);
    } else {
        b.output_f32("logits", 3);
    }
    b
}

/// Points `(1, 1 - d, 0.25, 0)` of class 0 whose logit gap `d` runs from `g / 2` to `3 g`
/// (`g` the float32 Softmax margin for 3 classes) in steps of `g / 16`, then gaps of 0.5.
fn points_around_the_margin(g: f64) -> Vec<f64> {
    let gaps = (0..=40)
        .map(|k| g * (0.5 + k as f64 / 16.0))
        .chain([0.5, 0.5]);
    gaps.flat_map(|d| [1.0, round_down(1.0 - d, Format::Float32), 0.25, 0.0])
        .collect()
}

/// Every sound mode's certificate for the Softmax-headed model is the plain model's less the
/// Softmax margin `g`: per point, the slack (`min_j c_j - L eps - b_j - g`) is the plain slack
/// minus `g` (rounded down), so a point whose logit gap exceeds the plain certificate's bound
/// `b = gap - slack` but not `b + g` is certified without the head and refused (`Margin`) with
/// it, while gaps above `b + g` are certified either way. Radius 0: the bound is the
/// floating-point deviation alone.
#[test]
fn a_softmax_head_costs_its_margin_in_every_sound_mode() {
    let dir = tmp();
    let g = softmax_margin(Format::Float32, 3).unwrap();
    let x = points_around_the_margin(g);
    let plain = identity_classifier(false).write(dir.path(), "plain.onnx");
    let head = identity_classifier(true).write(dir.path(), "softmax.onnx");
    let (plain, head) = (prepare(&plain, &x, 4, true), prepare(&head, &x, 4, true));
    assert_eq!(head.net.head, [HeadOp::Softmax]);
    assert_eq!(head.bounds.as_ref().unwrap().head_margin, g);
    assert_eq!(plain.bounds.as_ref().unwrap().head_margin, 0.0);
    assert_eq!(head.logits, plain.logits);
    let radius = Radius::parse_decimal("0").unwrap();
    let (plain_out, head_out) = (
        run::certify(&plain, &radius, &Mode::SOUND).unwrap(),
        run::certify(&head, &radius, &Mode::SOUND).unwrap(),
    );
    for mode in Mode::SOUND {
        let (p, h) = (plain_out.mode(mode).unwrap(), head_out.mode(mode).unwrap());
        let (mut refused_by_the_head, mut certified_by_both) = (0, 0);
        for i in 0..plain.n() {
            let logits = &plain.logits[i * 3..i * 3 + 3];
            assert_eq!(plain.predictions[i], Some(0), "point {i}");
            let gap = logits[0] - logits[1];
            let (sp, sh) = (p.slacks[i], h.slacks[i]);
            let bound = gap - sp;
            // the head's slack is the plain one less g, rounded down
            assert!(sh <= sp - g, "{mode} point {i}: {sh:e} vs {sp:e} - {g:e}");
            assert!(sh >= (sp - g) - 1e-15 * (sp.abs() + g), "{mode} point {i}");
            assert_eq!(h.verdicts[i], sh > 0.0, "{mode} point {i}");
            if h.verdicts[i] {
                assert!(gap > bound + g, "{mode} point {i}");
                certified_by_both += 1;
            } else if p.verdicts[i] {
                // the gap lies in (b, b + g]: certified without the head only
                assert!(gap <= bound + g * (1.0 + 1e-9), "{mode} point {i}");
                assert_eq!(h.refusal_of[i], Some(Refusal::Margin), "{mode} point {i}");
                refused_by_the_head += 1;
            }
        }
        eprintln!(
            "{mode}: margin {g:.4e}; {refused_by_the_head} points certified only without the \
             head, {certified_by_both} with it"
        );
        assert!(refused_by_the_head >= 4, "{mode}: {refused_by_the_head}");
        assert!(certified_by_both >= 4, "{mode}: {certified_by_both}");
    }
}

/// `lipfp certify` on a Softmax-headed model notes the head and its margin in the report (the
/// console's and the JSON one), and the margin makes it certify fewer points than the same
/// network without the head.
#[test]
fn lipfp_certify_names_the_head_and_its_margin() {
    let dir = tmp();
    let g = softmax_margin(Format::Float32, 3).unwrap();
    let x = points_around_the_margin(g);
    let inputs = dir.path().join("x.npy");
    runtime::write_f64_npy(&inputs, x.len() / 4, &[4], &x);
    let note = format!(
        "classifier head Softmax: the certified class is the one it ranks first; every sound \
         mode requires a logit margin above {g:.3e}"
    );
    let mut certified = Vec::new();
    for (file, softmax) in [("plain.onnx", false), ("softmax.onnx", true)] {
        let model = identity_classifier(softmax).write(dir.path(), file);
        let json = dir.path().join(format!("{file}.json"));
        let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
            .args([
                OsStr::new("certify"),
                OsStr::new("--model"),
                model.as_os_str(),
            ])
            .args([OsStr::new("--inputs"), inputs.as_os_str()])
            .args(["--epsilon", "0", "--mode", "standard", "--json"])
            .arg(&json)
            .output()
            .expect("run lipfp");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let gate = &report["gates"][0];
        let notes: Vec<&str> = gate["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let noted = notes.iter().any(|n| n.contains(&note));
        assert_eq!(noted, softmax, "{file}: {notes:?}");
        assert_eq!(
            stdout.contains("classifier head Softmax"),
            softmax,
            "{file}: {stdout}"
        );
        certified.push(gate["modes"]["standard"]["certified"].as_u64().unwrap());
    }
    assert!(certified[1] < certified[0], "{certified:?}");
    assert!(certified[1] > 0, "{certified:?}");
}

/// A float32 network whose logits are cast to float16 before a Softmax: the head runs in
/// float16, so its margin must be float16's (about 1e-2 for 3 classes), not float32's (3.1e-5);
/// else lipfp may certify points whose probabilities onnxruntime rounds to a tie. lipfp must
/// refuse the model or certify no such point. Points: class 1 on top at `b` (a float16 value in
/// [0.05, 1.95)), class 0 one to twelve float16 ulps below, class 2 there too or at 0; radius 0.
///
/// Found by this test: lipfp (ecd7663) accepted the model with the float32 margin and certified
/// 24 of 4000 points whose float16 probabilities onnxruntime ties, e.g. x = (0.057342529296875,
/// 0.05755615234375, 0, 0): logit gap 2.1e-4, Standard slack 5.7e-5, probabilities [0.3396,
/// 0.3396, 0.3208]. lipfp now refuses a head on narrowed logits (certify with --format float16).
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn a_head_reading_logits_cast_to_a_narrower_format_is_certified_soundly() {
    let dir = tmp();
    let mut b = identity_classifier(false);
    b.outputs.clear();
    let to_half = vec![attr_int("to", DataType::Float16 as i64)];
    b.node("Cast", "/cast/Cast", &["logits"], &["half"], to_half)
        .node("Softmax", "/head/Softmax", &["half"], &["probs"], vec![])
        .output("probs", DataType::Float16, Some(&batched(&[3])));
    let path = b.write(dir.path(), "half_head.onnx");
    if let Err(e) = model::load(&path, Format::Float32, false) {
        // lipfp refuses the head (its margin would be float16's): sound, and it must say why
        let msg = e.to_string();
        assert!(msg.contains("cast to float16 before the head"), "{msg}");
        assert!(model::load(&path, Format::Float16, false).is_ok());
        return;
    }
    let mut rng = Lcg::new(1);
    let mut x = Vec::new();
    for _ in 0..4000 {
        let top = to_nearest(0.05 + 1.9 * rng.unit_f64(), Format::Float16);
        let ulp = top - next_below(top, Format::Float16);
        let lower = top - (1 + rng.next_u64() % 12) as f64 * ulp;
        let third = if rng.unit_f64() < 0.5 { lower } else { 0.0 };
        x.extend([lower, top, third, 0.0]);
    }
    let subject = prepare(&path, &x, 4, false);
    let radius = Radius::parse_decimal("0").unwrap();
    let outcome = run::certify(&subject, &radius, &[Mode::Standard]).unwrap();
    let verdicts = &outcome.mode(Mode::Standard).unwrap().verdicts;
    let outs = ort_outputs(&[(path.as_path(), 4, &x[..])]);
    let probs = &outs[0][0];
    let tied: Vec<usize> = (0..subject.n())
        .filter(|&i| verdicts[i] && probs.row(i)[1] <= probs.row(i)[0])
        .collect();
    assert!(
        tied.is_empty(),
        "{} of {} certified points have float16 probabilities onnxruntime does not rank \
         strictly, e.g. x = {:?}: {:?}",
        tied.len(),
        verdicts.iter().filter(|v| **v).count(),
        &x[tied[0] * 4..tied[0] * 4 + 4],
        probs.row(tied[0])
    );
}
