//! The exporters' elementwise affine steps that `tests/onnx/refusals.rs` used to refuse load as
//! affine layers of the chain (src/onnx/model/affine.rs): an input normalisation (`Sub`/`Div`, a
//! scaling `Mul`, a constant `Add`, skl2onnx's `Scaler`, a `BatchNormalization` of the input),
//! a `BatchNormalization` after a layer's bias, and a constant step after a ReLU. Each check:
//! the model loads, the step is one affine layer with the ops and constants as written, and the
//! dense layers around it are the plain classifier's. What stays refused is in
//! `tests/onnx/refusals.rs`; the error bounds of the steps are in `tests/oracles/affine_steps.rs`.

use std::path::Path;

use crate::common::classifiers::*;
use crate::common::onnx_builder::*;
use lipfp::arith::format::Format;
use lipfp::onnx::model::{self, Activation, DenseNet, ElementOp, HeadOp};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn load(path: &Path) -> DenseNet {
    model::load(path, Format::Float32, false).unwrap_or_else(|e| panic!("{e}"))
}

/// `v` as float32 values, `n` times.
fn f32s(v: f32, n: usize) -> Vec<f64> {
    vec![f64::from(v); n]
}

/// The net is one affine layer of `width` features with `ops` (read from `nodes`) and no
/// activation, then the plain classifier's two dense layers on 12 inputs.
fn assert_step_then_classifier(net: &DenseNet, width: usize, ops: &[ElementOp], nodes: &[&str]) {
    assert_eq!(net.widths(), [width, width, 8, 3]);
    let step = net.layers[0].affine.as_ref().expect("layer 0 is the step");
    assert_eq!((step.width, step.ops.as_slice()), (width, ops));
    assert_eq!(net.layers[0].act, Activation::Identity);
    assert_eq!(net.layers[0].nodes, nodes);
    assert_plain_layers(net, 1);
}

/// Layers `first` and `first + 1` are the plain classifier's dense layers (`/fc0`, `/fc1`).
fn assert_plain_layers(net: &DenseNet, first: usize) {
    let dir = tmp();
    let plain = load(&plain_model().write(dir.path(), "plain.onnx"));
    for (k, p) in plain.layers.iter().enumerate() {
        let l = &net.layers[first + k];
        assert!(l.affine.is_none(), "layer {}", first + k);
        assert_eq!(
            (&l.w, &l.b, l.act),
            (&p.w, &p.b, p.act),
            "layer {}",
            first + k
        );
    }
}

/// `x[N, 12]` -> `Sub(x, mean)` -> `Div(., std)` -> the classifier.
fn normalised_classifier() -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("mean", &[12], &[0.5; 12]);
    b.init_f32("std", &[12], &[0.25; 12]);
    b.node("Sub", "/norm/Sub", &["x", "mean"], &["s"], vec![]);
    b.node("Div", "/norm/Div", &["s", "std"], &["xn"], vec![]);
    classifier_from(&mut b, "xn", 3);
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_sub_div_normalisation_is_one_affine_layer() {
    let dir = tmp();
    let net = load(&normalised_classifier().write(dir.path(), "m.onnx"));
    let ops = [
        ElementOp::Add(f32s(-0.5, 12)),
        ElementOp::Div(f32s(0.25, 12)),
    ];
    assert_step_then_classifier(&net, 12, &ops, &["/norm/Sub", "/norm/Div"]);
    assert!(net.head.is_empty());
}

/// One value for every feature: `Mul(scale, x)` (constant first) and a per-feature `Add`.
#[test]
fn a_scaling_or_a_shift_of_the_input_is_an_affine_layer() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("scale", &[], &[1.0 / 255.0]);
    b.node("Mul", "/Mul", &["scale", "x"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "mul.onnx"));
    let ops = [ElementOp::Mul(f32s(1.0 / 255.0, 12))];
    assert_step_then_classifier(&net, 12, &ops, &["/Mul"]);

    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("shift", &[1, 12], &[0.5; 12]);
    b.node("Add", "/Add", &["x", "shift"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "add.onnx"));
    assert_step_then_classifier(&net, 12, &[ElementOp::Add(f32s(0.5, 12))], &["/Add"]);
}

/// On `x[N, 3, 4]` one value for every feature is a step over the 12 features.
#[test]
fn a_single_constant_on_a_rank_3_input_is_an_affine_layer() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[3, 4]);
    b.init_f32("mean", &[1, 1, 1], &[0.5]);
    b.node("Sub", "/norm/Sub", &["x", "mean"], &["xs"], vec![]);
    b.init_i64("shape", &[2], &[-1, 12]);
    b.node("Reshape", "/Reshape", &["xs", "shape"], &["f"], vec![]);
    classifier_from(&mut b, "f", 3);
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "m.onnx"));
    assert_eq!(net.input_shape, [3, 4]);
    assert_step_then_classifier(&net, 12, &[ElementOp::Add(f32s(-0.5, 12))], &["/norm/Sub"]);
}

/// skl2onnx's `Scaler`, `(x - offset) * scale`; with the `Softmax` of a
/// `Pipeline(StandardScaler, MLPClassifier)` too.
#[test]
fn a_scaler_is_an_affine_layer() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.import_domain("ai.onnx.ml", 1);
    b.input_f32("x", &[12]);
    let attrs = vec![
        attr_floats("offset", &[0.5; 12]),
        attr_floats("scale", &[2.0; 12]),
    ];
    b.push(ml_node("Scaler", &["x"], "variable", attrs));
    b.nodes.last_mut().unwrap().name = "Scaler".into();
    classifier_from(&mut b, "variable", 3);
    b.output_f32("logits", 3);
    let ops = [
        ElementOp::Add(f32s(-0.5, 12)),
        ElementOp::Mul(f32s(2.0, 12)),
    ];
    let net = load(&b.write(dir.path(), "m.onnx"));
    assert_step_then_classifier(&net, 12, &ops, &["Scaler"]);
    assert!(net.head.is_empty());
    b.outputs.clear();
    b.node(
        "Softmax",
        "Softmax",
        &["logits"],
        &["probabilities"],
        vec![],
    );
    b.output_f32("probabilities", 3);
    let net = load(&b.write(dir.path(), "pipeline.onnx"));
    assert_step_then_classifier(&net, 12, &ops, &["Scaler"]);
    assert_eq!(net.head, [HeadOp::Softmax]);
}

/// The BatchNormalization of `common::classifiers::batch_norm` over `n` features.
fn bn_op(n: usize) -> ElementOp {
    ElementOp::BatchNorm {
        scale: f32s(1.0, n),
        bias: f32s(0.0, n),
        mean: f32s(0.1, n),
        var: f32s(2.0, n),
        epsilon: f64::from(1e-5f32),
    }
}

#[test]
fn a_batch_normalization_after_a_layer_or_on_the_input_is_an_affine_layer() {
    let dir = tmp();
    // after a layer's bias, before its ReLU: a layer of its own, with the ReLU
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    batch_norm(&mut b, "bn", "h", 8, "bn_out");
    b.node("Relu", "/act0/Relu", &["bn_out"], &["r"], vec![]);
    gemm(&mut b, "fc1", "r", (8, 3), "logits");
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "m.onnx"));
    assert_eq!(net.widths(), [12, 8, 8, 3]);
    let acts: Vec<Activation> = net.layers.iter().map(|l| l.act).collect();
    assert_eq!(
        acts,
        [Activation::Identity, Activation::Relu, Activation::Identity]
    );
    let step = net.layers[1].affine.as_ref().expect("layer 1 is the step");
    assert_eq!((step.width, step.ops.as_slice()), (8, &[bn_op(8)][..]));
    assert_eq!(
        net.layers[1].nodes,
        ["/bn/BatchNormalization", "/act0/Relu"]
    );
    let plain = load(&plain_model().write(dir.path(), "plain.onnx"));
    for (k, p) in [(0, &plain.layers[0]), (2, &plain.layers[1])] {
        let l = &net.layers[k];
        assert!(l.affine.is_none(), "layer {k}");
        assert_eq!((&l.w, &l.b), (&p.w, &p.b), "layer {k}");
    }
    // on the input: before the first layer
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    batch_norm(&mut b, "bn", "x", 12, "bn_out");
    classifier_from(&mut b, "bn_out", 3);
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "input_bn.onnx"));
    assert_step_then_classifier(&net, 12, &[bn_op(12)], &["/bn/BatchNormalization"]);
}

#[test]
fn a_constant_step_after_a_relu_is_an_affine_layer_before_the_next() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    b.node("Relu", "/act0/Relu", &["h"], &["r"], vec![]);
    b.init_f32("shift", &[8], &[0.5; 8]);
    b.node("Add", "/shift/Add", &["r", "shift"], &["s"], vec![]);
    gemm(&mut b, "fc1", "s", (8, 3), "logits");
    b.output_f32("logits", 3);
    let net = load(&b.write(dir.path(), "m.onnx"));
    assert_eq!(net.widths(), [12, 8, 8, 3]);
    let step = net.layers[1].affine.as_ref().expect("layer 1 is the step");
    assert_eq!(step.ops, [ElementOp::Add(f32s(0.5, 8))]);
    assert_eq!(net.layers[1].act, Activation::Identity);
    assert_eq!(net.layers[0].act, Activation::Relu);
    let plain = load(&plain_model().write(dir.path(), "plain.onnx"));
    for (k, p) in [(0, &plain.layers[0]), (2, &plain.layers[1])] {
        let l = &net.layers[k];
        assert_eq!((&l.w, &l.b, l.act), (&p.w, &p.b, p.act), "layer {k}");
    }
}
