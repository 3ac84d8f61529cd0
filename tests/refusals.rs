//! Refusals that help: what lipfp does not read is refused in one paragraph naming the node, its
//! op type and the supported set, with the reason and, where one is known, the cure. Classifier
//! heads lipfp does not read (Hardmax, a ZipMap of the logits) and outputs beside the logits get
//! the exact command that cuts the model at the logits, input normalisations the command that
//! cuts them off and how to fold them into the first layer; the heads lipfp reads are in
//! `tests/heads.rs`. With a Python that has onnx (`$LIPFP_PYTHON`, see `build.rs`) the commands
//! are run, on these models and on the refused real exports of `tests/corpus`, and what they
//! write is loaded.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::classifiers::*;
use common::onnx_builder::*;
use common::runtime;
use lipfp::format::Format;
use lipfp::model::{self, DenseNet, SUPPORTED_OPS};
use lipfp::onnx::proto::tensor_proto::DataType;
use lipfp::onnx::proto::FunctionProto;
use lipfp::progress::Progress;
use lipfp::run::{self, SubjectSpec};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The Display of the error `load` must return.
fn load_err(path: &Path) -> String {
    match model::load(path, Format::Float32, false) {
        Ok(net) => panic!("{} loaded as {:?}", path.display(), net.widths()),
        Err(e) => e.to_string(),
    }
}

/// One paragraph naming the node, its op type and the supported set, containing every needle.
fn assert_refusal(msg: &str, node: &str, op: &str, needles: &[&str]) {
    assert!(
        msg.contains(&format!("node `{node}` (op {op})")),
        "message does not name node `{node}` (op {op}): {msg}"
    );
    assert!(
        msg.contains(SUPPORTED_OPS),
        "message does not list the supported ops: {msg}"
    );
    assert!(!msg.contains('\n'), "message is not one paragraph: {msg}");
    for n in needles {
        assert!(msg.contains(n), "message does not contain {n:?}: {msg}");
    }
}

/// The command `onnx.utils.extract_model(model, <stem>-<suffix>.onnx, [input], outputs)` as the
/// message gives it.
fn cut_command(model: &Path, suffix: &str, input: &str, outputs: &[&str]) -> String {
    let stem = model.file_stem().unwrap().to_string_lossy();
    let cut = model.with_file_name(format!("{stem}-{suffix}.onnx"));
    let outputs: Vec<String> = outputs.iter().map(|o| format!("'{o}'")).collect();
    format!(
        "`python -c \"import onnx.utils; onnx.utils.extract_model('{}', '{}', ['{input}'], [{}])\"`",
        model.display(),
        cut.display(),
        outputs.join(", ")
    )
}

/// The command that cuts an input normalisation off `model` at `input` (a float32
/// `[N, 12]` tensor), keeping `outputs`, as the message gives it.
fn unnormalise_command(model: &Path, input: &str, outputs: &[&str]) -> String {
    let stem = model.file_stem().unwrap().to_string_lossy();
    let cut = model.with_file_name(format!("{stem}-unnormalised.onnx"));
    let outputs: Vec<String> = outputs.iter().map(|o| format!("'{o}'")).collect();
    format!(
        "`python -c \"import onnx, onnx.utils; m = onnx.shape_inference.infer_shapes(onnx.load('{}')); \
         m.graph.value_info.append(onnx.helper.make_tensor_value_info('{input}', onnx.TensorProto.FLOAT, \
         ['N', 12])); onnx.save(onnx.utils.Extractor(m).extract_model(['{input}'], [{}]), '{}')\"`",
        model.display(),
        outputs.join(", "),
        cut.display()
    )
}

/// Run the `python -c "..."` command of `msg` in `sh` with the tests' Python.
fn run_cure(msg: &str) {
    let python = runtime::python();
    let start = msg
        .find("`python -c ")
        .expect("the message gives a command")
        + 1;
    let end = start + msg[start..].find('`').expect("the command ends");
    let args = msg[start..end].strip_prefix("python").unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("\"$0\"{args}"))
        .arg(&python)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{}: {}",
        &msg[start..end],
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The sibling `<stem>-<suffix>.onnx` of `model`, loaded.
fn load_sibling(model: &Path, suffix: &str) -> DenseNet {
    let stem = model.file_stem().unwrap().to_string_lossy();
    let path: PathBuf = model.with_file_name(format!("{stem}-{suffix}.onnx"));
    model::load(&path, Format::Float32, false).unwrap_or_else(|e| panic!("{e}"))
}

/// The network of `with_head` without its head.
fn plain_classifier(dir: &Path) -> DenseNet {
    let path = plain_model().write(dir, "plain.onnx");
    model::load(&path, Format::Float32, false).unwrap()
}

/// The classifier with a `Hardmax` head: its one-hot output ranks no class strictly first.
fn hardmax_model() -> ModelBuilder {
    scores_model("Hardmax", 1)
}

/// The classifier with its hidden activation `h` as a second output, after the logits.
fn hidden_output_model() -> ModelBuilder {
    let mut b = plain_model();
    b.output("h", DataType::Float, Some(&batched(&[8])));
    b
}

/// The classifier with a `ZipMap` of the logits (not of probabilities, as skl2onnx writes it).
fn zipmap_of_logits_model() -> ModelBuilder {
    let mut b = with_head(|b| {
        b.push(ml_node("ZipMap", &["logits"], "probs", vec![]));
        "probs".into()
    });
    b.import_domain("ai.onnx.ml", 1);
    b
}

// Softmax, LogSoftmax, ArgMax and skl2onnx's outputs are read (tests/heads.rs); these heads are
// not.

#[test]
fn a_hardmax_head_is_cut_at_the_logits() {
    let dir = tmp();
    let path = hardmax_model().write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = cut_command(&path, "logits", "x", &["logits"]);
    assert_refusal(
        &msg,
        "/head/Hardmax",
        "Hardmax",
        &["after the logits `logits`", "classifier head", &cut],
    );
}

#[test]
fn a_zipmap_of_the_logits_is_cut_at_the_logits() {
    let dir = tmp();
    let path = zipmap_of_logits_model().write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = cut_command(&path, "logits", "x", &["logits"]);
    assert_refusal(
        &msg,
        "ZipMap",
        "ai.onnx.ml:ZipMap",
        &["after the logits `logits`", &cut],
    );
}

#[test]
fn a_head_over_another_axis_than_the_classes_is_refused() {
    let dir = tmp();
    for op in ["Softmax", "LogSoftmax", "ArgMax"] {
        let path = scores_model(op, 0).write(dir.path(), &format!("{op}.onnx"));
        let msg = load_err(&path);
        let node = format!("node `/head/{op}` (op {op})");
        for needle in [
            node.as_str(),
            "axis = 0 is not the class axis of the [batch, classes] logits",
            "does not rank the classes",
        ] {
            assert!(msg.contains(needle), "{op}: {needle:?}: {msg}");
        }
    }
}

/// skl2onnx's label output maps the arg-max through the class labels: only the labels
/// `0..K-1` make it the class index a certificate is about.
#[test]
fn class_labels_other_than_the_class_indices_are_refused() {
    let dir = tmp();
    for labels in [&[3i64, 5, 7][..], &[1, 2, 3], &[0, 1]] {
        let path = skl2onnx_mlp(labels, true).write(dir.path(), "mlp.onnx");
        let msg = load_err(&path);
        for needle in [
            "node `ArrayFeatureExtractor` (op ArrayFeatureExtractor)",
            "the class labels `classes` are not the integers 0..2",
            "LabelEncoder",
        ] {
            assert!(msg.contains(needle), "{labels:?}: {needle:?}: {msg}");
        }
    }
}

/// After a head only ops that pass its value on are read, and a `Cast` only when exact.
#[test]
fn what_follows_a_head_must_pass_it_on_exactly() {
    let dir = tmp();
    let after = |op: &str, attrs| {
        with_head(|b| {
            b.node("Softmax", "/Softmax", &["logits"], &["p"], vec![]);
            b.node(op, &format!("/after/{op}"), &["p"], &["q"], attrs);
            "q".into()
        })
    };
    let to_half = vec![attr_int("to", DataType::Float16 as i64)];
    let msg = load_err(&after("Cast", to_half).write(dir.path(), "cast.onnx"));
    for needle in [
        "node `/after/Cast` (op Cast)",
        "a cast of the head's scores to float16 may round two classes to a tie",
    ] {
        assert!(msg.contains(needle), "{needle:?}: {msg}");
    }
    for op in ["Relu", "Softmax"] {
        let msg = load_err(&after(op, vec![]).write(dir.path(), "after.onnx"));
        let node = format!("node `/after/{op}` (op {op})");
        for needle in [
            node.as_str(),
            "`p` is an output of the classifier head",
            "reads only Identity, Reshape, Flatten, Squeeze, Unsqueeze, Cast, ArgMax after it",
        ] {
            assert!(msg.contains(needle), "{op}: {needle:?}: {msg}");
        }
    }
}

#[test]
fn a_head_that_does_not_read_the_logits_says_so() {
    let dir = tmp();
    let b = with_head(|b| {
        b.node("Relu", "/act1/Relu", &["logits"], &["r1"], vec![]);
        b.node("Softmax", "/softmax/Softmax", &["r1"], &["probs"], vec![]);
        "probs".into()
    });
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/softmax/Softmax",
        "Softmax",
        &["classifier head", "its input `r1` is not the logits"],
    );
    assert!(!msg.contains("extract_model"), "{msg}");
}

/// `x[N, 12]` -> `Sub(x, mean)` -> `Div(., std)` -> the classifier.
fn normalised_classifier() -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("mean", &[12], &[0.5; 12]);
    b.init_f32("std", &[12], &[0.25; 12]);
    b.node(
        "Sub",
        "/norm/Sub",
        &["x", "mean"],
        &["/norm/Sub_output_0"],
        vec![],
    );
    b.node(
        "Div",
        "/norm/Div",
        &["/norm/Sub_output_0", "std"],
        &["/norm/Div_output_0"],
        vec![],
    );
    classifier_from(&mut b, "/norm/Div_output_0", 3);
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_sub_div_normalisation_says_how_to_fold_it_or_cut_it_off() {
    let dir = tmp();
    let path = normalised_classifier().write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = unnormalise_command(&path, "/norm/Div_output_0", &["logits"]);
    assert_refusal(
        &msg,
        "/norm/Sub",
        "Sub",
        &[
            "on the network input `x` is an input normalisation step",
            "(x - m: x -> a*x + c with a = 1, c = -m)",
            "lipfp certifies in the model's input space",
            "not supported yet",
            "Fold the normalisation into the first layer (weight W diag(a), bias b + W c",
            "the radius then in the normalised space",
            &cut,
        ],
    );
}

#[test]
fn a_scaling_of_the_input_is_a_normalisation() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("scale", &[], &[1.0 / 255.0]);
    b.node("Mul", "/Mul", &["scale", "x"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let path = b.write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = unnormalise_command(&path, "xs", &["logits"]);
    assert_refusal(
        &msg,
        "/Mul",
        "Mul",
        &["input normalisation step", "a = s", &cut],
    );
    // a constant Add on the input too
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("shift", &[12], &[0.5; 12]);
    b.node("Add", "/Add", &["x", "shift"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "add.onnx"));
    assert_refusal(&msg, "/Add", "Add", &["input normalisation step", "c = m"]);
    // a constant divided by the input is not affine
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("one", &[], &[1.0]);
    b.node("Div", "/Div", &["one", "x"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "div.onnx"));
    assert_refusal(&msg, "/Div", "Div", &["not an affine map"]);
}

#[test]
fn a_scaler_is_a_normalisation() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.import_domain("ai.onnx.ml", 1);
    b.input_f32("x", &[12]);
    let mut scaler = node(
        "Scaler",
        "Scaler",
        &["x"],
        &["variable"],
        vec![
            attr_floats("offset", &[0.5; 12]),
            attr_floats("scale", &[2.0; 12]),
        ],
    );
    scaler.domain = "ai.onnx.ml".into();
    b.push(scaler);
    classifier_from(&mut b, "variable", 3);
    b.output_f32("logits", 3);
    let path = b.write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = unnormalise_command(&path, "variable", &["logits"]);
    assert_refusal(
        &msg,
        "Scaler",
        "ai.onnx.ml:Scaler",
        &["input normalisation step", "c = -offset * scale", &cut],
    );
    // with a classifier head too (skl2onnx's Pipeline(StandardScaler, MLPClassifier)), the
    // command cuts both off
    b.outputs.clear();
    b.node(
        "Softmax",
        "Softmax",
        &["logits"],
        &["probabilities"],
        vec![],
    );
    b.output_f32("probabilities", 3);
    let path = b.write(dir.path(), "pipeline.onnx");
    let msg = load_err(&path);
    let cut = unnormalise_command(&path, "variable", &["logits"]);
    assert_refusal(
        &msg,
        "Scaler",
        "ai.onnx.ml:Scaler",
        &[
            "(with the classifier head `Softmax`, at the logits `logits`)",
            &cut,
        ],
    );
}

/// The four constant inputs of a BatchNormalization over `n` features, named `{name}.*`.
fn batch_norm(b: &mut ModelBuilder, name: &str, x: &str, n: usize, out: &str) {
    let inputs: Vec<String> = ["weight", "bias", "running_mean", "running_var"]
        .iter()
        .map(|p| format!("{name}.{p}"))
        .collect();
    for (k, p) in inputs.iter().enumerate() {
        b.init_f32(p, &[n], &vec![[1.0, 0.0, 0.1, 2.0][k]; n]);
    }
    let mut all = vec![x];
    all.extend(inputs.iter().map(String::as_str));
    b.node(
        "BatchNormalization",
        &format!("/{name}/BatchNormalization"),
        &all,
        &[out],
        vec![attr_float("epsilon", 1e-5)],
    );
}

#[test]
fn a_batch_normalization_is_folded_into_its_layer_or_is_a_normalisation() {
    let dir = tmp();
    // after a layer: fold it into that layer
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    batch_norm(&mut b, "bn", "h", 8, "bn_out");
    b.node("Relu", "/act0/Relu", &["bn_out"], &["r"], vec![]);
    gemm(&mut b, "fc1", "r", (8, 3), "logits");
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/bn/BatchNormalization",
        "BatchNormalization",
        &[
            "after the dense layer `/fc0/Gemm`",
            "a = scale / sqrt(var + epsilon), c = B - a * mean",
            "fold it into that layer (weight diag(a) W, bias a*b + c)",
            "torch.nn.utils.fuse_linear_bn_eval(linear, bn)",
        ],
    );
    // on the input: a normalisation
    let path = input_batch_norm_model().write(dir.path(), "input_bn.onnx");
    let msg = load_err(&path);
    let cut = unnormalise_command(&path, "bn_out", &["logits"]);
    assert_refusal(
        &msg,
        "/bn/BatchNormalization",
        "BatchNormalization",
        &["input normalisation step", "input space", &cut],
    );
}

/// A BatchNormalization of the input, then the classifier.
fn input_batch_norm_model() -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    batch_norm(&mut b, "bn", "x", 12, "bn_out");
    classifier_from(&mut b, "bn_out", 3);
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_constant_step_after_a_relu_is_folded_into_the_next_layer() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    b.node("Relu", "/act0/Relu", &["h"], &["r"], vec![]);
    b.init_f32("shift", &[8], &[0.5; 8]);
    b.node("Add", "/shift/Add", &["r", "shift"], &["s"], vec![]);
    gemm(&mut b, "fc1", "s", (8, 3), "logits");
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/shift/Add",
        "Add",
        &[
            "a constant add is supported only as the bias directly after a MatMul without bias",
            "after a ReLU",
            "fold it into the next dense layer (weight W diag(a), bias b + W c)",
        ],
    );
}

#[test]
fn a_conv_says_only_dense_layers_are_certified() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[1, 4, 4]);
    let mut rng = Lcg::new(31);
    b.init_f32("conv.weight", &[2, 1, 3, 3], &rng.f32s(18, 0.5));
    b.init_f32("conv.bias", &[2], &rng.f32s(2, 0.1));
    b.node(
        "Conv",
        "/conv1/Conv",
        &["x", "conv.weight", "conv.bias"],
        &["c"],
        vec![attr_ints("kernel_shape", &[3, 3])],
    );
    b.node(
        "Flatten",
        "/Flatten",
        &["c"],
        &["f"],
        vec![attr_int("axis", 1)],
    );
    gemm(&mut b, "fc0", "f", (8, 3), "logits");
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/conv1/Conv",
        "Conv",
        &[
            "convolutional layer",
            "dense (fully connected) ReLU networks only",
            "equivalent dense layer",
        ],
    );
}

#[test]
fn smooth_activations_say_to_use_relu() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    b.node("Tanh", "/act0/Tanh", &["h"], &["t"], vec![]);
    gemm(&mut b, "fc1", "t", (8, 3), "logits");
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/act0/Tanh",
        "Tanh",
        &["activation lipfp does not model", "retrain with ReLU"],
    );
}

#[test]
fn a_sigmoid_on_a_single_logit_says_how_to_make_two() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    classifier_from(&mut b, "x", 1);
    b.node("Sigmoid", "/Sigmoid", &["logits"], &["p"], vec![]);
    b.output_f32("p", 1);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_refusal(
        &msg,
        "/Sigmoid",
        "Sigmoid",
        &[
            "single logit `logits`",
            "binary classifier",
            "second logit fixed at zero",
        ],
    );
}

/// A model-local function `LinearRelu` (Gemm + Relu) for the first layer, then a Gemm.
fn function_model() -> ModelBuilder {
    let mut rng = Lcg::new(34);
    let mut b = ModelBuilder::new();
    b.import_domain("pkg.local", 1);
    b.input_f32("x", &[12]);
    b.init_f32("W0", &[8, 12], &rng.f32s(96, 0.5));
    b.init_f32("B0", &[8], &rng.f32s(8, 0.1));
    b.function(FunctionProto {
        name: Some("LinearRelu".into()),
        domain: Some("pkg.local".into()),
        input: vec!["X".into(), "W".into(), "B".into()],
        output: vec!["Y".into()],
        node: vec![
            node(
                "Gemm",
                "g",
                &["X", "W", "B"],
                &["G"],
                vec![attr_int("transB", 1)],
            ),
            node("Relu", "r", &["G"], &["Y"], vec![]),
        ],
        opset_import: vec![lipfp::onnx::proto::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        ..Default::default()
    });
    let mut call = node(
        "LinearRelu",
        "/block0/LinearRelu",
        &["x", "W0", "B0"],
        &["h"],
        vec![],
    );
    call.domain = "pkg.local".into();
    b.push(call);
    gemm(&mut b, "fc1", "h", (8, 3), "logits");
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_model_local_function_says_how_to_inline_it() {
    let dir = tmp();
    let path = function_model().write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let inlined = dir.path().join("m-inlined.onnx");
    let command = format!(
        "`python -c \"import onnx, onnx.inliner; onnx.save(onnx.inliner.inline_local_functions(onnx.load('{}')), '{}')\"`",
        path.display(),
        inlined.display()
    );
    assert_refusal(
        &msg,
        "/block0/LinearRelu",
        "LinearRelu",
        &["model-local functions", &command],
    );
}

/// An output that is neither the logits nor a head computed from them (here a hidden
/// activation) is refused, naming the logits and the command that keeps only them.
#[test]
fn a_second_output_beside_the_logits_is_cut_off() {
    let dir = tmp();
    let path = hidden_output_model().write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    let cut = cut_command(&path, "logits", "x", &["logits"]);
    for needle in [
        "the graph has 2 outputs and not every one is the logits or a classifier head computed \
         from them (Softmax, LogSoftmax, ArgMax, ArrayFeatureExtractor, ZipMap)",
        "lipfp certifies one output, the logits `logits`",
        &cut,
    ] {
        assert!(msg.contains(needle), "{needle:?}: {msg}");
    }
    // beside a head too; the only output a hidden activation: not the end of the chain
    let mut b = softmax_model();
    b.output("h", DataType::Float, None);
    let msg = load_err(&b.write(dir.path(), "probs.onnx"));
    assert!(
        msg.contains("the graph has 2 outputs and not every one"),
        "{msg}"
    );
    let mut b = softmax_model();
    b.outputs.clear();
    b.output("h", DataType::Float, None);
    let msg = load_err(&b.write(dir.path(), "hidden.onnx"));
    assert!(
        msg.contains("graph output is not the end of the layer chain"),
        "{msg}"
    );
}

#[test]
fn non_constant_weights_and_optimised_graphs_say_what_to_export() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.input("W", DataType::Float, &[D::Fixed(12), D::Fixed(3)]);
    b.node("MatMul", "/fc0/MatMul", &["x", "W"], &["y"], vec![]);
    b.output_f32("y", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert!(msg.contains("node `/fc0/MatMul` (op MatMul)"), "{msg}");
    assert!(msg.contains("export_params=True"), "{msg}");

    let mut b = ModelBuilder::new();
    b.import_domain("com.microsoft", 1);
    b.input_f32("x", &[12]);
    b.init_f32("W", &[12, 3], &[0.5; 36]);
    let mut fused = node("FusedMatMul", "MatMul_0", &["x", "W"], &["y"], vec![]);
    fused.domain = "com.microsoft".into();
    b.push(fused);
    b.output_f32("y", 3);
    let msg = load_err(&b.write(dir.path(), "ort.onnx"));
    assert_refusal(
        &msg,
        "MatMul_0",
        "com.microsoft:FusedMatMul",
        &["onnxruntime contrib op", "certify the model as exported"],
    );
}

// ---------------------------------------------------------------------------------------------
// The commands run (a Python with onnx)
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn the_commands_that_cut_a_head_or_a_normalisation_off_give_the_classifier() {
    let dir = tmp();
    let plain = plain_classifier(dir.path());
    let cases = [
        ("hardmax.onnx", hardmax_model(), "logits"),
        ("hidden_output.onnx", hidden_output_model(), "logits"),
        ("zipmap.onnx", zipmap_of_logits_model(), "logits"),
        ("sub_div.onnx", normalised_classifier(), "unnormalised"),
        ("input_bn.onnx", input_batch_norm_model(), "unnormalised"),
    ];
    for (file, b, suffix) in cases {
        let path = b.write(dir.path(), file);
        run_cure(&load_err(&path));
        let net = load_sibling(&path, suffix);
        assert_eq!(net.hash(), plain.hash(), "{file}");
    }
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn the_command_that_inlines_functions_gives_a_model_lipfp_reads() {
    let dir = tmp();
    let path = function_model().write(dir.path(), "m.onnx");
    run_cure(&load_err(&path));
    assert_eq!(load_sibling(&path, "inlined").widths(), [12, 8, 3]);
}

/// The models and onnxruntime's classes of `tests/corpus` (see `tests/corpus.rs`).
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The model at `path` in the format it is stored in.
fn load_stored(path: &Path) -> Result<DenseNet, lipfp::error::LipfpError> {
    model::stored_format(path).and_then(|f| model::load(path, f, false))
}

/// lipfp's classes for the inputs in `inputs` (`.npy`) through the model at `path`.
fn classes(path: &Path, inputs: &Path) -> Vec<i64> {
    let spec = SubjectSpec {
        model: path.to_path_buf(),
        format: None,
        accumulate: None,
        ftz: false,
        inputs: inputs.to_path_buf(),
        labels: None,
        gram_iterations: 12,
        reference: false,
        shard: None,
    };
    let subject = run::prepare(&spec, &Progress::silent()).unwrap_or_else(|e| panic!("{e}"));
    subject
        .predictions
        .iter()
        .map(|p| p.map(|c| c as i64).unwrap_or(-1))
        .collect()
}

/// onnxruntime's classes for the corpus inputs of `name`.
fn ort_classes(name: &str) -> Vec<i64> {
    let bytes = std::fs::read(corpus().join(format!("{name}.ort_label.npy"))).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<i64>()
        .unwrap()
}

/// Every command a refusal gives runs and makes a model lipfp accepts; a model cut at the
/// logits gives onnxruntime's classes for the original. The refusals are crafted ones whose
/// original onnxruntime runs (the arg-max of its first output, a one-hot Hardmax or the logits,
/// on 64 sample points) and those of the real exports of `tests/corpus` (onnxruntime's
/// recorded classes), while the corpus still has refusals with a command.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn every_command_a_refusal_gives_makes_a_model_lipfp_accepts() {
    let dir = tmp();
    let python = runtime::python();
    let mut rng = Lcg::new(11);
    let x: Vec<f64> = (0..64 * 12).map(|_| 2.0 * rng.sym_f32() as f64).collect();
    let inputs = dir.path().join("x.npy");
    runtime::write_f64_npy(&inputs, 64, &[12], &x);
    for (file, b) in [
        ("hardmax.onnx", hardmax_model()),
        ("hidden_output.onnx", hidden_output_model()),
    ] {
        let path = b.write(dir.path(), file);
        run_cure(&load_err(&path));
        let cut = dir.path().join(file.replace(".onnx", "-logits.onnx"));
        load_stored(&cut).unwrap_or_else(|e| panic!("{file}: {e}"));
        let ort: Vec<i64> = runtime::ort_logits(&python, &path, 64, 12, &x, &[])
            .chunks(3)
            .map(|row| runtime::argmax(row) as i64)
            .collect();
        assert_eq!(classes(&cut, &inputs), ort, "{file}");
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(corpus().join("MANIFEST.json")).unwrap()).unwrap();
    for m in manifest["models"].as_array().expect("a model list") {
        let (name, file) = (m["name"].as_str().unwrap(), m["file"].as_str().unwrap());
        let path = dir.path().join(file);
        std::fs::copy(corpus().join(file), &path).unwrap();
        let Err(e) = load_stored(&path) else {
            continue;
        };
        let msg = e.to_string();
        if !msg.contains("`python -c ") {
            continue;
        }
        run_cure(&msg);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let logits = dir.path().join(format!("{stem}-logits.onnx"));
        let unnormalised = dir.path().join(format!("{stem}-unnormalised.onnx"));
        if logits.exists() {
            load_stored(&logits).unwrap_or_else(|e| panic!("{name}: {e}"));
            let x = corpus().join(format!("{name}.x.npy"));
            assert_eq!(classes(&logits, &x), ort_classes(name), "{name}");
        } else {
            load_stored(&unnormalised).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        eprintln!("{name}: refused, and the command's model is accepted");
    }
}
