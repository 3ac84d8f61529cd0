//! Refusals that help: what lipfp does not read is refused in one paragraph naming the node, its
//! op type and, for ops outside the supported set, that set, with the reason and, where one is
//! known, the cure. Classifier heads lipfp does not read (Hardmax, a ZipMap of the logits) and
//! outputs beside the logits get the exact command that cuts the model at the logits; the heads
//! lipfp reads are in `tests/onnx/heads.rs`. Elementwise affine steps are read
//! (`tests/oracles/affine_models.rs`); the ones still refused are here: a step between a MatMul and its
//! bias, after the output layer, a constant divided by the activation, per-feature constants on
//! a rank-3 activation, a narrowing cast after a step, BatchNormalization in training mode or
//! with `var + epsilon <= 0`, a division by zero, a head on logits cast to a narrower type.
//! With a Python that has onnx (`$LIPFP_PYTHON`, see `build.rs`) the commands are run, on these
//! models and on the refused real exports of `tests/corpus`, and what they write is loaded.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::classifiers::*;
use crate::common::onnx_builder::*;
use crate::common::runtime;
use lipfp::arith::format::Format;
use lipfp::engine::run::{self, ReferencePlan, SubjectSpec};
use lipfp::onnx::model::{self, supported_ops, DenseNet};
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::onnx::reader::proto::FunctionProto;
use lipfp::progress::Progress;

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
        msg.contains(supported_ops()),
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

// Softmax, LogSoftmax, ArgMax and skl2onnx's outputs are read (tests/onnx/heads.rs); these heads are
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
    // ops lipfp reads elsewhere, and one it reads nowhere (TopK): the head's reason
    for op in ["Relu", "Softmax", "TopK"] {
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

// ---------------------------------------------------------------------------------------------
// Elementwise steps lipfp still refuses (the ones it reads are in tests/oracles/affine_models.rs)
// ---------------------------------------------------------------------------------------------

/// One paragraph naming the node and its op type, containing every needle.
fn assert_step_refusal(msg: &str, node: &str, op: &str, needles: &[&str]) {
    assert!(
        msg.contains(&format!("node `{node}` (op {op})")),
        "message does not name node `{node}` (op {op}): {msg}"
    );
    assert!(!msg.contains('\n'), "message is not one paragraph: {msg}");
    for n in needles {
        assert!(msg.contains(n), "message does not contain {n:?}: {msg}");
    }
}

/// `x[N, 12]` -> `/fc0/MatMul` (12 -> 8) -> `step(b, "p") -> out` -> `/act0/Relu` -> `/fc1/Gemm`.
fn matmul_then(step: impl FnOnce(&mut ModelBuilder, &str) -> String) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("fc0.weight", &[12, 8], &Lcg::new(3).f32s(96, 0.5));
    b.node(
        "MatMul",
        "/fc0/MatMul",
        &["x", "fc0.weight"],
        &["p"],
        vec![],
    );
    let h = step(&mut b, "p");
    b.node("Relu", "/act0/Relu", &[&h], &["r"], vec![]);
    gemm(&mut b, "fc1", "r", (8, 3), "logits");
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_step_between_a_matmul_and_its_bias_is_refused() {
    let dir = tmp();
    let b = matmul_then(|b, p| {
        b.init_f32("k", &[8], &[2.0; 8]);
        b.init_f32("fc0.bias", &[8], &[0.1; 8]);
        b.node("Mul", "/scale/Mul", &[p, "k"], &["q"], vec![]);
        b.node("Add", "/fc0/Add", &["q", "fc0.bias"], &["h"], vec![]);
        "h".into()
    });
    let msg = load_err(&b.write(dir.path(), "m.onnx"));
    assert_step_refusal(
        &msg,
        "/scale/Mul",
        "Mul",
        &[
            "an elementwise step directly after a MatMul without bias is not read",
            "give the layer its bias (even zeros) before the step",
        ],
    );
}

/// The logits are the last dense layer's output: a step after it (a temperature before a
/// Softmax too) is refused, with how to fold it into the output layer.
#[test]
fn a_step_after_the_output_layer_is_refused() {
    let dir = tmp();
    for (op, softmax) in [("Mul", false), ("Div", true)] {
        let b = with_head(|b| {
            b.init_f32("t", &[], &[0.5]);
            let node = format!("/temperature/{op}");
            b.node(op, &node, &["logits", "t"], &["y"], vec![]);
            if !softmax {
                return "y".into();
            }
            let axis = vec![attr_int("axis", 1)];
            b.node("Softmax", "/head/Softmax", &["y"], &["p"], axis);
            "p".into()
        });
        let msg = load_err(&b.write(dir.path(), "m.onnx"));
        let what = format!("the graph ends with the elementwise step `/temperature/{op}`");
        for needle in [
            what.as_str(),
            "after the output layer",
            "fold it into the output layer (weight diag(a) W, bias a b + c)",
        ] {
            assert!(msg.contains(needle), "{op}: {needle:?}: {msg}");
        }
    }
}

/// `x[N, 12]`, `one = 1`, and `/Div` = `Div(one, v)` where `v` is the input, a layer's output
/// (`at = "layer"`) or a ReLU's output (`at = "relu"`).
fn constant_over_activation(at: &str) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("one", &[], &[1.0]);
    match at {
        "input" => {
            b.node("Div", "/Div", &["one", "x"], &["xs"], vec![]);
            classifier_from(&mut b, "xs", 3);
        }
        "layer" => {
            gemm(&mut b, "fc0", "x", (12, 8), "h");
            b.node("Div", "/Div", &["one", "h"], &["hd"], vec![]);
            b.node("Relu", "/act0/Relu", &["hd"], &["r"], vec![]);
            gemm(&mut b, "fc1", "r", (8, 3), "logits");
        }
        _ => {
            gemm(&mut b, "fc0", "x", (12, 8), "h");
            b.node("Relu", "/act0/Relu", &["h"], &["r"], vec![]);
            b.node("Div", "/Div", &["one", "r"], &["rd"], vec![]);
            gemm(&mut b, "fc1", "rd", (8, 3), "logits");
        }
    }
    b.output_f32("logits", 3);
    b
}

/// `Div(c, x)` (a constant divided by the activation) is not affine: refused, naming the node.
#[test]
fn a_constant_divided_by_the_activation_is_refused() {
    let dir = tmp();
    for at in ["input", "layer", "relu"] {
        let path = constant_over_activation(at).write(dir.path(), &format!("{at}.onnx"));
        let msg = load_err(&path);
        assert_refusal(&msg, "/Div", "Div", &[]);
    }
}

/// The reason `Div(c, x)` and `Mul(x, x)` are refused: not an affine map, not "a normalisation
/// step not supported yet" to fold into a layer or cut off.
#[test]
fn a_step_that_is_not_affine_says_so() {
    let dir = tmp();
    for at in ["input", "layer", "relu"] {
        let path = constant_over_activation(at).write(dir.path(), &format!("{at}.onnx"));
        let msg = load_err(&path);
        assert_refusal(&msg, "/Div", "Div", &["is not an affine map"]);
        for wrong in ["normalisation", "fold it", "a = 1/s", "not supported yet"] {
            assert!(!msg.contains(wrong), "{at}: {wrong:?}: {msg}");
        }
    }
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.node("Mul", "/Mul", &["x", "x"], &["xs"], vec![]);
    classifier_from(&mut b, "xs", 3);
    b.output_f32("logits", 3);
    let msg = load_err(&b.write(dir.path(), "square.onnx"));
    assert_refusal(
        &msg,
        "/Mul",
        "Mul",
        &["of two values computed from the network input"],
    );
    assert!(!msg.contains("normalisation"), "{msg}");
}

/// On `x[N, 3, 4]` a constant must broadcast to one value per feature without varying along
/// the batch (`[3, 4]`, `[1, 3, 4]`, `[3, 1]`, `[4]` are read: tests/oracles/affine_steps.rs); a flat
/// `[12]`, a transposed `[4, 3]` and a per-example `[2, 3, 4]` are refused.
#[test]
fn constants_that_do_not_broadcast_per_feature_are_refused() {
    let dir = tmp();
    for shape in [&[12usize][..], &[4, 3], &[2, 3, 4]] {
        let count: usize = shape.iter().product();
        let mut b = ModelBuilder::new();
        b.input_f32("x", &[3, 4]);
        b.init_f32("mean", shape, &vec![0.5; count]);
        b.node("Sub", "/norm/Sub", &["x", "mean"], &["xs"], vec![]);
        b.init_i64("shape", &[2], &[-1, 12]);
        b.node("Reshape", "/Reshape", &["xs", "shape"], &["f"], vec![]);
        classifier_from(&mut b, "f", 3);
        b.output_f32("logits", 3);
        let msg = load_err(&b.write(dir.path(), "m.onnx"));
        let what = format!(
            "constant `mean` of shape {shape:?} does not broadcast to one value per feature"
        );
        assert_step_refusal(
            &msg,
            "/norm/Sub",
            "Sub",
            &[&what, "[batch, 3, 4]", "not along the batch"],
        );
    }
}

/// A float32 model narrowing a step's output to float16 (on the input, or after a layer and
/// back to float32): the extra rounding is not in the step's error terms.
#[test]
fn a_narrowing_cast_after_a_step_is_refused() {
    let dir = tmp();
    let half = || vec![attr_int("to", DataType::Float16 as i64)];
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("mean", &[12], &[0.5; 12]);
    b.node("Sub", "/norm/Sub", &["x", "mean"], &["xs"], vec![]);
    b.node("Cast", "/Cast", &["xs"], &["xc"], half());
    classifier_from(&mut b, "xc", 3);
    b.output_f32("logits", 3);
    let input = b.write(dir.path(), "input.onnx");
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    b.init_f32("m8", &[8], &[0.5; 8]);
    b.node("Sub", "/shift/Sub", &["h", "m8"], &["hs"], vec![]);
    b.node("Cast", "/Cast", &["hs"], &["hc"], half());
    let to_float = vec![attr_int("to", DataType::Float as i64)];
    b.node("Cast", "/Cast_back", &["hc"], &["hf"], to_float);
    b.node("Relu", "/act0/Relu", &["hf"], &["r"], vec![]);
    gemm(&mut b, "fc1", "r", (8, 3), "logits");
    b.output_f32("logits", 3);
    let hidden = b.write(dir.path(), "hidden.onnx");
    for path in [input, hidden] {
        let msg = load_err(&path);
        assert_step_refusal(
            &msg,
            "/Cast",
            "Cast",
            &[
                "a narrowing cast to float16 after an elementwise step is not modelled",
                "certify in float16 or remove the cast",
            ],
        );
        // in float16 the cast rounds nothing
        model::load(&path, Format::Float16, false).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The classifier with a BatchNormalization after its first layer (`/bn/BatchNormalization`),
/// `edit` applied to that node.
fn batch_norm_model(edit: impl FnOnce(&mut lipfp::onnx::reader::proto::NodeProto)) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    gemm(&mut b, "fc0", "x", (12, 8), "h");
    batch_norm(&mut b, "bn", "h", 8, "bn_out");
    edit(b.nodes.last_mut().expect("the BatchNormalization"));
    b.node("Relu", "/act0/Relu", &["bn_out"], &["r"], vec![]);
    gemm(&mut b, "fc1", "r", (8, 3), "logits");
    b.output_f32("logits", 3);
    b
}

#[test]
fn a_batch_normalization_in_training_mode_is_refused() {
    let dir = tmp();
    let b = batch_norm_model(|n| n.attribute.push(attr_int("training_mode", 1)));
    let msg = load_err(&b.write(dir.path(), "training.onnx"));
    let node = "/bn/BatchNormalization";
    assert_step_refusal(
        &msg,
        node,
        "BatchNormalization",
        &["training_mode = 1 is not inference"],
    );
    // the running statistics as outputs (training mode before opset 14)
    let b = batch_norm_model(|n| n.output.extend(["mean_out".into(), "var_out".into()]));
    let msg = load_err(&b.write(dir.path(), "outputs.onnx"));
    assert_step_refusal(
        &msg,
        node,
        "BatchNormalization",
        &["inference mode takes five inputs (X, scale, B, mean, var) and one output"],
    );
}

#[test]
fn a_batch_normalization_whose_variance_plus_epsilon_is_not_positive_is_refused() {
    let dir = tmp();
    let cases: [(f32, f32, &str); 3] = [
        (-1.0, 1e-5, "= -1e0 with epsilon"),
        (0.0, 0.0, "= 0e0 with epsilon 0e0"),
        (-1e-5, 1e-5, "= -"),
    ];
    for (var, epsilon, shown) in cases {
        let mut b = batch_norm_model(|n| n.attribute = vec![attr_float("epsilon", epsilon)]);
        let mut v = [2.0f32; 8];
        v[5] = var;
        b.initializers.retain(|t| t.name != "bn.running_var");
        b.init_f32("bn.running_var", &[8], &v);
        let msg = load_err(&b.write(dir.path(), "m.onnx"));
        let what = format!("variance `bn.running_var`[5] {shown}");
        assert_step_refusal(
            &msg,
            "/bn/BatchNormalization",
            "BatchNormalization",
            &[&what, "var + epsilon must be positive"],
        );
    }
}

/// Under flush-to-zero a float16 BatchNorm with a zero variance and epsilon 1e-5 (subnormal in
/// float16) could compute sqrt(0) and divide by zero: refused; without flush-to-zero it is read,
/// with the float32 epsilon the runtime uses.
#[test]
fn a_batch_normalization_that_flush_to_zero_can_divide_by_zero_is_refused() {
    let dir = tmp();
    let mut b = batch_norm_model(|_| {});
    b.initializers.retain(|t| t.name != "bn.running_var");
    let mut v = [2.0f32; 8];
    v[3] = 0.0;
    b.init_f32("bn.running_var", &[8], &v);
    let path = b.write(dir.path(), "m.onnx");
    let msg = match model::load(&path, Format::Float16, true) {
        Ok(_) => panic!("loaded under flush-to-zero"),
        Err(e) => e.to_string(),
    };
    assert_step_refusal(
        &msg,
        "/bn/BatchNormalization",
        "BatchNormalization",
        &["variance `bn.running_var`[3]", "may flush to 0 in float16"],
    );
    let net = model::load(&path, Format::Float16, false).unwrap();
    let step = net.layers.iter().find_map(|l| l.affine.as_ref()).unwrap();
    let Some(lipfp::onnx::model::ElementOp::BatchNorm { epsilon, .. }) = step.ops.first() else {
        panic!("{:?}", step.ops)
    };
    assert_eq!(*epsilon, f64::from(1e-5f32));
    assert!(model::load(&path, Format::Float32, true).is_ok());
}

/// A divisor of zero, or one whose reciprocal overflows the format (a subnormal in float32).
#[test]
fn a_division_by_zero_is_refused() {
    let dir = tmp();
    for (d, shown) in [(0.0f32, "= 0e0"), (-0.0, "= -0e0"), (1e-39, "= 1.00000021")] {
        let mut b = ModelBuilder::new();
        b.input_f32("x", &[12]);
        let mut std = [0.25f32; 12];
        std[7] = d;
        b.init_f32("std", &[12], &std);
        b.node("Div", "/norm/Div", &["x", "std"], &["xs"], vec![]);
        classifier_from(&mut b, "xs", 3);
        b.output_f32("logits", 3);
        let msg = load_err(&b.write(dir.path(), "m.onnx"));
        let what = format!("divisor `std`[7] {shown}");
        assert_step_refusal(
            &msg,
            "/norm/Div",
            "Div",
            &[&what, "is zero or its reciprocal overflows float32"],
        );
    }
}

/// Logits cast to float16 before a Softmax in a float32 model: the head's margin would be
/// float16's (tests/onnx/heads.rs runs onnxruntime on it); certified in float16 it is read.
#[test]
fn a_head_on_logits_cast_to_a_narrower_type_is_refused() {
    let dir = tmp();
    let mut b = with_head(|b| {
        let to_half = vec![attr_int("to", DataType::Float16 as i64)];
        b.node("Cast", "/cast/Cast", &["logits"], &["half"], to_half);
        b.node("Softmax", "/head/Softmax", &["half"], &["probs"], vec![]);
        "probs".into()
    });
    b.outputs.clear();
    b.output("probs", DataType::Float16, Some(&batched(&[3])));
    let path = b.write(dir.path(), "m.onnx");
    let msg = load_err(&path);
    assert!(msg.contains("cast to float16 before the head"), "{msg}");
    assert!(msg.contains("/head/Softmax"), "{msg}");
    model::load(&path, Format::Float16, false).unwrap_or_else(|e| panic!("{e}"));
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
        opset_import: vec![lipfp::onnx::reader::proto::OperatorSetIdProto {
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
        "the graph has 2 outputs and `h` is neither the logits nor a classifier head computed \
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
        msg.contains("the graph has 2 outputs and `h` is neither the logits nor a classifier head"),
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
fn the_commands_that_cut_a_head_off_give_the_classifier() {
    let dir = tmp();
    let plain = plain_classifier(dir.path());
    let cases = [
        ("hardmax.onnx", hardmax_model()),
        ("hidden_output.onnx", hidden_output_model()),
        ("zipmap.onnx", zipmap_of_logits_model()),
    ];
    for (file, b) in cases {
        let path = b.write(dir.path(), file);
        run_cure(&load_err(&path));
        let net = load_sibling(&path, "logits");
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

/// The models and onnxruntime's classes of `tests/corpus` (see `tests/onnx/corpus.rs`).
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
        runtime: None,
        inputs: inputs.to_path_buf(),
        labels: None,
        gram_iterations: 12,
        reference: ReferencePlan::None,
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
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
