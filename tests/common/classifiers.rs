//! Small classifiers with and without heads, shared by `tests/onnx/refusals.rs` and `tests/onnx/heads.rs`:
//! `x[N, 12] -> /fc0/Gemm (12 -> 8) -> /act0/Relu -> /fc1/Gemm (8 -> classes)` with logits
//! `logits`, then whatever head a test puts after them.

#![allow(dead_code)]

use super::onnx_builder::*;
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::onnx::reader::proto::{AttributeProto, NodeProto, ValueInfoProto};

/// `Gemm(x, W[m, n], b, transB = 1)` named `/{name}/Gemm` with output `out`.
pub fn gemm(b: &mut ModelBuilder, name: &str, x: &str, (n, m): (usize, usize), out: &str) {
    let mut rng = Lcg::new(n as u64 * 31 + m as u64);
    let (w, bias) = (format!("{name}.weight"), format!("{name}.bias"));
    b.init_f32(&w, &[m, n], &rng.f32s(m * n, 0.5));
    b.init_f32(&bias, &[m], &rng.f32s(m, 0.1));
    b.node(
        "Gemm",
        &format!("/{name}/Gemm"),
        &[x, &w, &bias],
        &[out],
        vec![attr_int("transB", 1)],
    );
}

/// `x[N, 12]` (already declared) -> `/fc0/Gemm` (12 -> 8) -> `/act0/Relu` -> `/fc1/Gemm`
/// (8 -> `classes`) with output `logits`.
pub fn classifier_from(b: &mut ModelBuilder, x: &str, classes: usize) {
    gemm(b, "fc0", x, (12, 8), "h");
    b.node("Relu", "/act0/Relu", &["h"], &["r"], vec![]);
    gemm(b, "fc1", "r", (8, classes), "logits");
}

/// A classifier of 3 classes on `x[N, 12]` whose logits `logits` are read by `head`, which
/// returns the graph output's name (a float32 `[N, 3]` output).
pub fn with_head(head: impl FnOnce(&mut ModelBuilder) -> String) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    classifier_from(&mut b, "x", 3);
    let out = head(&mut b);
    b.output_f32(&out, 3);
    b
}

/// The classifier without a head: the logits are the output.
pub fn plain_model() -> ModelBuilder {
    with_head(|_| "logits".into())
}

/// The classifier with a one-input head `op` (`Softmax`, `LogSoftmax`, `Hardmax`, ...) named
/// `/head/{op}` over `axis`, output `scores`.
pub fn scores_model(op: &str, axis: i64) -> ModelBuilder {
    with_head(|b| {
        let attrs = vec![attr_int("axis", axis)];
        b.node(op, &format!("/head/{op}"), &["logits"], &["scores"], attrs);
        "scores".into()
    })
}

/// The classifier with a `Softmax` head (`/softmax/Softmax`, axis 1, output `probs`).
pub fn softmax_model() -> ModelBuilder {
    with_head(|b| {
        let attrs = vec![attr_int("axis", 1)];
        b.node(
            "Softmax",
            "/softmax/Softmax",
            &["logits"],
            &["probs"],
            attrs,
        );
        "probs".into()
    })
}

/// The classifier with a `LogSoftmax` head (`/LogSoftmax`, axis -1, output `logp`).
pub fn log_softmax_model() -> ModelBuilder {
    with_head(|b| {
        let attrs = vec![attr_int("axis", -1)];
        b.node("LogSoftmax", "/LogSoftmax", &["logits"], &["logp"], attrs);
        "logp".into()
    })
}

/// The classifier with an `ArgMax` head (`/ArgMax`, keepdims 0): the int64 label `[N]` is the
/// output.
pub fn argmax_model() -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    classifier_from(&mut b, "x", 3);
    let attrs = vec![attr_int("axis", 1), attr_int("keepdims", 0)];
    b.node("ArgMax", "/ArgMax", &["logits"], &["label"], attrs);
    b.output("label", DataType::Int64, Some(&[batch()]));
    b
}

/// A node of the `ai.onnx.ml` domain.
pub fn ml_node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    let mut n = node(op, op, inputs, &[output], attrs);
    n.domain = "ai.onnx.ml".into();
    n
}

/// skl2onnx's MLPClassifier of 3 classes on `float_input[N, 12]` (MatMul + Add layers, logits
/// `out_activations_result_in`), as skl2onnx 1.x writes it: `Softmax`, then the label output
/// `output_label` (`ArgMax`, `ArrayFeatureExtractor` over the int64 class labels `labels`,
/// `Reshape` to `[N]`, two `Cast`s to int64) and, with `zipmap`, the probability output
/// `output_probability` (`ZipMap`; else the probabilities themselves).
pub fn skl2onnx_mlp(labels: &[i64], zipmap: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.opset(21);
    b.import_domain("ai.onnx.ml", 1);
    b.input_f32("float_input", &[12]);
    let mut rng = Lcg::new(7);
    for (k, (n, m)) in [(12, 8), (8, 3)].into_iter().enumerate() {
        let x = if k == 0 {
            "float_input"
        } else {
            "next_activations"
        };
        let (coef, bias) = (format!("coefficient{k}"), format!("intercepts{k}"));
        b.init_f32(&coef, &[n, m], &rng.f32s(n * m, 0.5));
        b.init_f32(&bias, &[m], &rng.f32s(m, 0.1));
        let product = format!("mul_result{k}");
        b.node(
            "MatMul",
            &format!("MatMul{k}"),
            &[x, &coef],
            &[&product],
            vec![],
        );
        let sum = if k == 0 {
            "add_result0"
        } else {
            "out_activations_result_in"
        };
        b.node(
            "Add",
            &format!("Add{k}"),
            &[&product, &bias],
            &[sum],
            vec![],
        );
        if k == 0 {
            b.node("Relu", "Relu", &[sum], &["next_activations"], vec![]);
        }
    }
    b.node(
        "Softmax",
        "Softmax",
        &["out_activations_result_in"],
        &["out_activations_result"],
        vec![attr_int("axis", 1)],
    );
    b.node(
        "ArgMax",
        "ArgMax",
        &["out_activations_result"],
        &["argmax_output"],
        vec![attr_int("axis", 1)],
    );
    b.init_i64("classes", &[labels.len()], labels);
    b.push(ml_node(
        "ArrayFeatureExtractor",
        &["classes", "argmax_output"],
        "array_feature_extractor_result",
        vec![],
    ));
    b.init_i64("shape_tensor", &[1], &[-1]);
    b.node(
        "Reshape",
        "Reshape",
        &["array_feature_extractor_result", "shape_tensor"],
        &["reshaped_result"],
        vec![],
    );
    b.node(
        "Cast",
        "Cast1",
        &["reshaped_result"],
        &["label"],
        vec![attr_int("to", DataType::Int64 as i64)],
    );
    b.node(
        "Cast",
        "Cast2",
        &["label"],
        &["output_label"],
        vec![attr_int("to", DataType::Int64 as i64)],
    );
    b.output("output_label", DataType::Int64, Some(&[batch()]));
    if zipmap {
        let classes = attr_ints("classlabels_int64s", labels);
        b.push(ml_node(
            "ZipMap",
            &["out_activations_result"],
            "output_probability",
            vec![classes],
        ));
        // a sequence of maps: declared without a tensor type, as the loader does not read it
        b.outputs.push(ValueInfoProto {
            name: "output_probability".into(),
            ..Default::default()
        });
    } else {
        b.output_f32("out_activations_result", labels.len());
    }
    b
}

/// A `BatchNormalization` named `/{name}/BatchNormalization` of `x` (`n` features) into `out`,
/// its four constant inputs `{name}.weight`, `.bias`, `.running_mean`, `.running_var` (1, 0,
/// 0.1 and 2 for every feature, as PyTorch names them) and epsilon 1e-5.
pub fn batch_norm(b: &mut ModelBuilder, name: &str, x: &str, n: usize, out: &str) {
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
