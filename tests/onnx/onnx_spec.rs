//! The loader reads ONNX as the specification (and onnxruntime) does, and refuses what is
//! ambiguous or malformed before it reads any tensor value (issue 10, "ONNX per spec" and
//! "Bounded resources"):
//!
//! * attributes: any nonzero `transB` transposes; an attribute of the wrong type, an unknown
//!   attribute (a typo), an attribute given twice, an attribute of another opset and an
//!   out-of-spec value are refused naming the node — never read as the default;
//! * names: duplicate initializers, a value produced twice, a graph input that contradicts the
//!   initializer of the same name, a missing or doubled default-domain opset are refused; an
//!   initializer that is also a graph input is read as its stored value (what onnxruntime runs
//!   when the caller does not feed that input);
//! * storage: declared dims are checked against the model and against the bytes that hold them
//!   (raw data, typed fields, external file regions) before anything is read: a 1.6 GB external
//!   weight that cannot fit is refused in well under 5 s and 600 MB, a tensor claiming 2^40
//!   elements is refused without allocating.
//!
//! Where lipfp accepts a model, the logits are compared with onnxruntime's (`NOT RUN` without a
//! Python with onnxruntime; see `tests/common/runtime.rs`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::onnx_builder::*;
use crate::common::runtime::{argmax, ort_logits, python};
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::engine::exec::Executor;
use lipfp::onnx::model::{self, DenseNet};
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::onnx::reader::proto::{AttributeProto, TensorProto};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn load(path: &Path) -> DenseNet {
    model::load(path, Format::Float32, false).unwrap_or_else(|e| panic!("load: {e}"))
}

/// The Display of the error `load` must return.
fn load_err(path: &Path) -> String {
    match model::load(path, Format::Float32, false) {
        Ok(net) => panic!(
            "{} loaded as {:?} but must be refused",
            path.display(),
            net.widths()
        ),
        Err(e) => e.to_string(),
    }
}

fn assert_contains(msg: &str, needles: &[&str]) {
    for n in needles {
        assert!(msg.contains(n), "message does not contain {n:?}: {msg}");
    }
}

/// The message names the node and its op type, and contains every needle.
fn assert_at_node(msg: &str, node: &str, op: &str, needles: &[&str]) {
    assert_contains(msg, &[&format!("node `{node}` (op {op})")]);
    assert_contains(msg, needles);
}

/// An attribute with an explicit (possibly wrong) type code.
fn attr_typed(mut a: AttributeProto, ty: i32) -> AttributeProto {
    a.r#type = ty;
    a
}

/// The `AttributeProto.type` code of INT, FLOAT and INTS.
const INT: i32 = 2;
const FLOAT: i32 = 1;

/// `x [N, 4] -> Gemm "fc"(x, W, B) -> y [N, m]` with `W` stored with `w_dims` (row-major
/// values `0..` from an LCG) and the Gemm's attributes `attrs`; returns the builder and `W`.
fn one_gemm(w_dims: [usize; 2], m: usize, attrs: Vec<AttributeProto>) -> (ModelBuilder, Vec<f32>) {
    let mut rng = Lcg::new(1);
    let w = rng.f32s(w_dims[0] * w_dims[1], 1.0);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[4]);
    b.init_f32("W", &w_dims, &w);
    b.init_f32("B", &[m], &rng.f32s(m, 0.1));
    b.node("Gemm", "fc", &["x", "W", "B"], &["y"], attrs);
    b.output_f32("y", m);
    (b, w)
}

/// A square `[4, 4]` Gemm: reading a transposition attribute wrongly still loads, silently.
fn square_gemm(attrs: Vec<AttributeProto>) -> ModelBuilder {
    one_gemm([4, 4], 4, attrs).0
}

/// lipfp's centre logits of `net` in its own format for `rows` inputs (row-major).
fn lipfp_logits(net: &DenseNet, x: &[f64]) -> Vec<f64> {
    let em = ExecutionModel::deployed(net.format, None, false).expect("an execution model");
    Executor::new(net, &em).logits(x, net.input_dim())
}

/// lipfp's and onnxruntime's logits agree (up to summation order) and give the same classes.
fn assert_matches_onnxruntime(path: &Path, net: &DenseNet, rows: usize, seed: u64) {
    let py = python();
    let dim = net.input_dim();
    let x: Vec<f64> = Lcg::new(seed)
        .f32s(rows * dim, 1.0)
        .into_iter()
        .map(f64::from)
        .collect();
    let ours = lipfp_logits(net, &x);
    let theirs = ort_logits(&py, path, rows, dim, &x, &[]);
    assert_eq!(ours.len(), theirs.len(), "number of logits");
    for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        let tol = 1e-5 * a.abs().max(b.abs()) + 1e-6;
        assert!(
            (a - b).abs() <= tol,
            "logit {k}: lipfp {a:e} vs onnxruntime {b:e}"
        );
    }
    let c = net.classes();
    for r in 0..rows {
        let (o, t) = (&ours[r * c..(r + 1) * c], &theirs[r * c..(r + 1) * c]);
        assert_eq!(argmax(o), argmax(t), "row {r}: class");
    }
}

// ---------------------------------------------------------------------------------------------
// Attributes
// ---------------------------------------------------------------------------------------------

#[test]
fn any_nonzero_trans_b_transposes() {
    let dir = tmp();
    for t in [1, 2, 5, -1] {
        let (b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", t)]);
        let net = load(&b.write(dir.path(), &format!("t{t}.onnx")));
        for i in 0..3 {
            for j in 0..4 {
                assert_eq!(
                    net.layers[0].w[[i, j]],
                    f64::from(w[i * 4 + j]),
                    "transB = {t}: W[{i}, {j}]"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn trans_b_5_logits_match_onnxruntime() {
    let dir = tmp();
    let mut rng = Lcg::new(7);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[6]);
    b.init_f32("W0", &[10, 6], &rng.f32s(60, 0.6));
    b.init_f32("B0", &[10], &rng.f32s(10, 0.2));
    b.init_f32("W1", &[3, 10], &rng.f32s(30, 0.5));
    b.init_f32("B1", &[3], &rng.f32s(3, 0.2));
    b.node(
        "Gemm",
        "fc0",
        &["x", "W0", "B0"],
        &["h"],
        vec![attr_int("transB", 5)],
    );
    b.node("Relu", "act0", &["h"], &["r"], vec![]);
    b.node(
        "Gemm",
        "fc1",
        &["r", "W1", "B1"],
        &["y"],
        vec![attr_int("transB", -1)],
    );
    b.output_f32("y", 3);
    let path = b.write(dir.path(), "trans_b5.onnx");
    let net = load(&path);
    assert_eq!(net.widths(), [6, 10, 3]);
    assert_matches_onnxruntime(&path, &net, 64, 8);
}

#[test]
fn an_attribute_of_the_wrong_type_is_refused_not_defaulted() {
    let dir = tmp();
    let cases = [
        (
            attr_typed(attr_float("transB", 1.0), FLOAT),
            "attribute `transB` has type FLOAT; the specification says INT",
        ),
        (
            attr_typed(attr_float("transA", 1.0), FLOAT),
            "attribute `transA` has type FLOAT; the specification says INT",
        ),
        (
            attr_typed(attr_int("alpha", 1), INT),
            "attribute `alpha` has type INT; the specification says FLOAT",
        ),
        (
            // a type code left UNDEFINED is refused as onnxruntime refuses it
            attr_typed(attr_int("transB", 1), 0),
            "attribute `transB` has type UNDEFINED",
        ),
    ];
    for (k, (a, needle)) in cases.into_iter().enumerate() {
        let path = square_gemm(vec![a]).write(dir.path(), &format!("m{k}.onnx"));
        assert_at_node(&load_err(&path), "fc", "Gemm", &[needle]);
    }
    // a nonzero transA is refused, not read as "no transpose"
    let path = square_gemm(vec![attr_int("transA", 5)]).write(dir.path(), "ta.onnx");
    assert_at_node(&load_err(&path), "fc", "Gemm", &["transA = 5"]);
}

#[test]
fn unknown_and_repeated_attributes_are_refused() {
    let dir = tmp();
    let path = square_gemm(vec![attr_int("transb", 1)]).write(dir.path(), "typo.onnx");
    assert_at_node(
        &load_err(&path),
        "fc",
        "Gemm",
        &["unknown attribute `transb`", "alpha, beta, transA, transB"],
    );
    let path = square_gemm(vec![attr_int("transB", 1), attr_int("transB", 0)])
        .write(dir.path(), "twice.onnx");
    assert_at_node(
        &load_err(&path),
        "fc",
        "Gemm",
        &["attribute `transB` is given more than once"],
    );
}

#[test]
fn input_and_output_counts_follow_the_schema() {
    let dir = tmp();
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.nodes[0].input.push("W".into());
    let msg = load_err(&b.write(dir.path(), "four_inputs.onnx"));
    assert_at_node(&msg, "fc", "Gemm", &["has 4 inputs", "2 to 3"]);

    // before opset 11 a Gemm needs its C input
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.opset(9);
    b.nodes[0].input.truncate(2);
    let msg = load_err(&b.write(dir.path(), "opset9.onnx"));
    assert_at_node(&msg, "fc", "Gemm", &["has 2 inputs", "at opset 9"]);

    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.nodes[0].output[0] = "h".into();
    b.node("Relu", "act", &["h"], &["y", "extra"], vec![]);
    let msg = load_err(&b.write(dir.path(), "two_outputs.onnx"));
    assert_at_node(&msg, "act", "Relu", &["has 2 outputs"]);
}

/// `x [N, 3, 4] -> Flatten(attrs) -> Gemm(W [2, 12], transB = 1) -> y [N, 2]`.
fn flatten_model(attrs: Vec<AttributeProto>) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input("x", DataType::Float, &batched(&[3, 4]));
    b.node("Flatten", "flat", &["x"], &["f"], attrs);
    b.init_f32("W", &[2, 12], &Lcg::new(3).f32s(24, 1.0));
    b.node(
        "Gemm",
        "fc",
        &["f", "W"],
        &["y"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("y", 2);
    b
}

#[test]
fn flatten_axis_follows_the_specification() {
    let dir = tmp();
    // axis -2 of a rank-3 input is axis 1
    let net = load(&flatten_model(vec![attr_int("axis", -2)]).write(dir.path(), "neg.onnx"));
    assert_eq!(net.widths(), [12, 2]);
    let path = flatten_model(vec![attr_typed(attr_float("axis", 1.0), FLOAT)])
        .write(dir.path(), "float.onnx");
    assert_at_node(
        &load_err(&path),
        "flat",
        "Flatten",
        &["`axis` has type FLOAT"],
    );
    let path = flatten_model(vec![attr_int("axis", 2)]).write(dir.path(), "two.onnx");
    assert_at_node(&load_err(&path), "flat", "Flatten", &["axis = 2"]);
}

/// `x [N, 3, 4] -> Reshape(x, target, attrs) -> Gemm(W [2, 12]) -> y` at `opset`.
fn reshape_model(opset: i64, target: &[i64], attrs: Vec<AttributeProto>) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.opset(opset);
    b.input("x", DataType::Float, &batched(&[3, 4]));
    b.init_i64("shape", &[target.len()], target);
    b.node("Reshape", "view", &["x", "shape"], &["f"], attrs);
    b.init_f32("W", &[2, 12], &Lcg::new(3).f32s(24, 1.0));
    b.node(
        "Gemm",
        "fc",
        &["f", "W"],
        &["y"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("y", 2);
    b
}

#[test]
fn reshape_allowzero_is_0_or_1_and_exists_from_opset_14() {
    let dir = tmp();
    let ok = reshape_model(18, &[-1, 12], vec![attr_int("allowzero", 1)]);
    assert_eq!(load(&ok.write(dir.path(), "ok.onnx")).widths(), [12, 2]);
    let path =
        reshape_model(18, &[0, 12], vec![attr_int("allowzero", 2)]).write(dir.path(), "two.onnx");
    assert_at_node(&load_err(&path), "view", "Reshape", &["allowzero = 2"]);
    let path = reshape_model(
        18,
        &[0, 12],
        vec![attr_typed(attr_float("allowzero", 0.0), FLOAT)],
    )
    .write(dir.path(), "float.onnx");
    assert_at_node(
        &load_err(&path),
        "view",
        "Reshape",
        &["`allowzero` has type FLOAT"],
    );
    let path = reshape_model(13, &[-1, 12], vec![attr_int("allowzero", 0)])
        .write(dir.path(), "opset13.onnx");
    assert_at_node(
        &load_err(&path),
        "view",
        "Reshape",
        &["unknown attribute `allowzero` (at opset 13"],
    );
}

#[test]
fn cast_to_must_name_an_element_type() {
    let dir = tmp();
    let with_cast = |attrs: Vec<AttributeProto>| {
        let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
        b.nodes[0].input[0] = "xc".into();
        b.nodes
            .insert(0, node("Cast", "cast", &["x"], &["xc"], attrs));
        b
    };
    assert_eq!(
        load(&with_cast(vec![attr_int("to", 1)]).write(dir.path(), "ok.onnx")).widths(),
        [4, 3]
    );
    // 2^32 + 1 truncated to 32 bits would read as 1 (float)
    let path = with_cast(vec![attr_int("to", (1 << 32) + 1)]).write(dir.path(), "big.onnx");
    assert_at_node(&load_err(&path), "cast", "Cast", &["to = 4294967297"]);
    let path = with_cast(vec![]).write(dir.path(), "none.onnx");
    assert_at_node(&load_err(&path), "cast", "Cast", &["`to` is required"]);
    let path =
        with_cast(vec![attr_typed(attr_float("to", 1.0), FLOAT)]).write(dir.path(), "float.onnx");
    assert_at_node(&load_err(&path), "cast", "Cast", &["`to` has type FLOAT"]);
}

/// TorchScript's `x.view(x.size(0), -1)`: Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
/// with the given attributes (and at opset 13 or later the Unsqueeze axes as an input).
fn view_chain(
    opset: i64,
    gather: Vec<AttributeProto>,
    unsqueeze_axes: &[i64],
    concat: Vec<AttributeProto>,
) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.opset(opset);
    b.input("x", DataType::Float, &batched(&[3, 4]));
    b.node("Shape", "shape", &["x"], &["s"], vec![]);
    b.init(tensor_i64("zero", &[], &[0]));
    b.node("Gather", "gather", &["s", "zero"], &["n"], gather);
    if opset >= 13 {
        b.init_i64("axes", &[unsqueeze_axes.len()], unsqueeze_axes);
        b.node("Unsqueeze", "unsqueeze", &["n", "axes"], &["n1"], vec![]);
    } else {
        b.node(
            "Unsqueeze",
            "unsqueeze",
            &["n"],
            &["n1"],
            vec![attr_ints("axes", unsqueeze_axes)],
        );
    }
    b.init_i64("rest", &[1], &[-1]);
    b.node("Concat", "concat", &["n1", "rest"], &["target"], concat);
    b.node("Reshape", "view", &["x", "target"], &["f"], vec![]);
    b.init_f32("W", &[2, 12], &Lcg::new(3).f32s(24, 1.0));
    b.node(
        "Gemm",
        "fc",
        &["f", "W"],
        &["y"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("y", 2);
    b
}

#[test]
fn gather_and_concat_axes_follow_the_specification() {
    let dir = tmp();
    let axis = |v| vec![attr_int("axis", v)];
    // axis -1 of a 1-D shape vector is axis 0
    let ok = view_chain(13, axis(-1), &[0], axis(-1));
    assert_eq!(load(&ok.write(dir.path(), "ok.onnx")).widths(), [12, 2]);

    let float_axis = vec![attr_typed(attr_float("axis", 1.0), FLOAT)];
    let path = view_chain(13, float_axis, &[0], axis(0)).write(dir.path(), "g.onnx");
    assert_at_node(
        &load_err(&path),
        "gather",
        "Gather",
        &["`axis` has type FLOAT"],
    );

    let path = view_chain(13, axis(0), &[0], axis(1)).write(dir.path(), "c1.onnx");
    assert_at_node(&load_err(&path), "concat", "Concat", &["axis = 1"]);
    let path = view_chain(13, axis(0), &[0], vec![]).write(dir.path(), "c.onnx");
    assert_at_node(
        &load_err(&path),
        "concat",
        "Concat",
        &["`axis` is required"],
    );
}

#[test]
fn unsqueeze_axes_follow_the_specification() {
    let dir = tmp();
    let axis0 = || vec![attr_int("axis", 0)];
    for (opset, axes) in [(13, [-1]), (11, [0])] {
        let ok = view_chain(opset, axis0(), &axes, axis0());
        let net = load(&ok.write(dir.path(), &format!("ok{opset}.onnx")));
        assert_eq!(net.widths(), [12, 2]);
    }
    // a scalar unsqueezed has rank 1: axis 1 is out of range (onnxruntime fails on it)
    for opset in [13, 11] {
        let path = view_chain(opset, axis0(), &[1], axis0()).write(dir.path(), "bad.onnx");
        assert_at_node(
            &load_err(&path),
            "unsqueeze",
            "Unsqueeze",
            &["axis 1 is out of range"],
        );
    }
    // before opset 13 the axes are an INTS attribute
    let mut b = view_chain(11, axis0(), &[0], axis0());
    let u = b
        .nodes
        .iter_mut()
        .find(|n| n.op_type == "Unsqueeze")
        .expect("the Unsqueeze node");
    u.attribute = vec![attr_typed(attr_ints("axes", &[0]), INT)];
    let msg = load_err(&b.write(dir.path(), "int.onnx"));
    assert_at_node(&msg, "unsqueeze", "Unsqueeze", &["`axes` has type INT"]);
}

#[test]
fn squeeze_of_the_activation_names_its_axes_and_keeps_the_batch() {
    let dir = tmp();
    let model = |attrs: Vec<AttributeProto>| {
        let mut b = ModelBuilder::new();
        b.opset(11);
        b.input("x", DataType::Float, &batched(&[1, 12]));
        b.node("Squeeze", "squeeze", &["x"], &["f"], attrs);
        b.init_f32("W", &[2, 12], &Lcg::new(3).f32s(24, 1.0));
        b.node(
            "Gemm",
            "fc",
            &["f", "W"],
            &["y"],
            vec![attr_int("transB", 1)],
        );
        b.output_f32("y", 2);
        b
    };
    let net = load(&model(vec![attr_ints("axes", &[1])]).write(dir.path(), "ok.onnx"));
    assert_eq!(net.widths(), [12, 2]);
    let path = model(vec![attr_ints("axes", &[0])]).write(dir.path(), "batch.onnx");
    assert_at_node(
        &load_err(&path),
        "squeeze",
        "Squeeze",
        &["axis 0 does not have size 1"],
    );
    let path = model(vec![]).write(dir.path(), "none.onnx");
    assert_at_node(&load_err(&path), "squeeze", "Squeeze", &["needs axes"]);
}

#[test]
fn dropout_attributes_are_those_of_the_models_opset() {
    let dir = tmp();
    let model = |opset: i64| {
        let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
        b.opset(opset);
        b.nodes[0].input[0] = "xd".into();
        b.nodes.insert(
            0,
            node(
                "Dropout",
                "drop",
                &["x"],
                &["xd"],
                vec![attr_float("ratio", 0.5)],
            ),
        );
        b
    };
    assert_eq!(
        load(&model(11).write(dir.path(), "o11.onnx")).widths(),
        [4, 3]
    );
    let msg = load_err(&model(17).write(dir.path(), "o17.onnx"));
    assert_at_node(
        &msg,
        "drop",
        "Dropout",
        &["unknown attribute `ratio` (at opset 17, Dropout has seed)"],
    );
}

#[test]
fn a_constant_has_exactly_one_value() {
    let dir = tmp();
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.initializers.retain(|t| t.name != "W");
    let value = attr_tensor("value", tensor_f32("", &[3, 4], &w));
    b.nodes
        .insert(0, node("Constant", "const_w", &[], &["W"], vec![value]));
    assert_eq!(load(&b.write(dir.path(), "ok.onnx")).widths(), [4, 3]);
    b.nodes[0].attribute.push(attr_float("value_float", 2.0));
    let msg = load_err(&b.write(dir.path(), "two.onnx"));
    assert_at_node(
        &msg,
        "const_w",
        "Constant",
        &["exactly one value attribute", "value_float"],
    );
    b.nodes[0].attribute = vec![attr_typed(attr_float("value_float", 2.0), INT)];
    let msg = load_err(&b.write(dir.path(), "typed.onnx"));
    assert_at_node(&msg, "const_w", "Constant", &["`value_float` has type INT"]);
}

// ---------------------------------------------------------------------------------------------
// One definition per name
// ---------------------------------------------------------------------------------------------

#[test]
fn a_duplicate_initializer_is_refused_naming_it() {
    let dir = tmp();
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    let negated: Vec<f32> = w.iter().map(|x| -x).collect();
    b.init_f32("W", &[3, 4], &negated);
    let msg = load_err(&b.write(dir.path(), "dup.onnx"));
    assert_contains(&msg, &["initializer `W` is defined more than once"]);
}

/// A model whose weight `W` is an initializer and also a graph input (its default).
fn initializer_input_model(dir: &Path) -> (std::path::PathBuf, Vec<f32>) {
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.inputs.push(value_info(
        "W",
        DataType::Float,
        Some(&[D::Fixed(3), D::Fixed(4)]),
    ));
    (b.write(dir, "default.onnx"), w)
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn an_initializer_default_matches_onnxruntime() {
    let dir = tmp();
    let (path, _) = initializer_input_model(dir.path());
    assert_matches_onnxruntime(&path, &load(&path), 16, 9);
}

#[test]
fn an_initializer_that_is_also_an_input_is_its_stored_default() {
    let dir = tmp();
    // read as its stored value, which is what onnxruntime runs when the caller feeds only x
    let (path, w) = initializer_input_model(dir.path());
    let net = load(&path);
    assert_eq!(net.input_name, "x");
    assert_eq!(net.layers[0].w[[2, 3]], f64::from(w[11]));

    // a declaration that contradicts the initializer is refused (onnxruntime refuses it too)
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.inputs.push(value_info(
        "W",
        DataType::Float,
        Some(&[D::Fixed(4), D::Fixed(3)]),
    ));
    let msg = load_err(&b.write(dir.path(), "shape.onnx"));
    assert_contains(&msg, &["graph input `W`", "declared [4, 3]", "[3, 4]"]);
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.inputs.push(value_info("W", DataType::Double, None));
    let msg = load_err(&b.write(dir.path(), "type.onnx"));
    assert_contains(
        &msg,
        &["graph input `W`", "declared double", "initializer is float"],
    );
}

#[test]
fn a_value_is_produced_once() {
    let dir = tmp();
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.nodes[0].input[0] = "h".into();
    b.nodes
        .insert(0, node("Identity", "first", &["x"], &["h"], vec![]));
    b.nodes
        .insert(1, node("Identity", "second", &["x"], &["h"], vec![]));
    let msg = load_err(&b.write(dir.path(), "twice.onnx"));
    assert_at_node(
        &msg,
        "second",
        "Identity",
        &["output `h` is already defined by node `first`"],
    );

    // a Constant that redefines an initializer
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.nodes
        .insert(0, node("Constant", "shadow", &[], &["W"], vec![]));
    b.nodes[0]
        .attribute
        .push(attr_tensor("value", tensor_f32("", &[3, 4], &w)));
    let msg = load_err(&b.write(dir.path(), "shadow.onnx"));
    assert_at_node(
        &msg,
        "shadow",
        "Constant",
        &["output `W` is already defined by an initializer"],
    );
}

#[test]
fn the_default_opset_is_imported_exactly_once() {
    let dir = tmp();
    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.opsets.clear();
    assert_contains(
        &load_err(&b.write(dir.path(), "none.onnx")),
        &["imports no default-domain"],
    );
    b.opsets = vec![(String::new(), 17), ("ai.onnx".into(), 13)];
    assert_contains(
        &load_err(&b.write(dir.path(), "twice.onnx")),
        &["more than once", "[17, 13]"],
    );
}

// ---------------------------------------------------------------------------------------------
// Storage: checked before anything is read
// ---------------------------------------------------------------------------------------------

#[test]
fn tensor_storage_is_unambiguous() {
    let dir = tmp();
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.initializers[0].float_data = w.clone();
    let msg = load_err(&b.write(dir.path(), "both.onnx"));
    assert_contains(&msg, &["initializer `W`", "both raw_data and float_data"]);

    let (mut b, _) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    b.initializers[0].external_data =
        tensor_external("", DataType::Float, &[], &[("location", "w.bin")]).external_data;
    let msg = load_err(&b.write(dir.path(), "stray.onnx"));
    assert_contains(
        &msg,
        &["initializer `W`", "without data_location = EXTERNAL"],
    );
}

/// Replace initializer `name` of `b` by `t`.
fn replace_init(b: &mut ModelBuilder, name: &str, t: TensorProto) {
    let slot = b
        .initializers
        .iter_mut()
        .find(|i| i.name == name)
        .expect("the initializer");
    *slot = t;
}

/// `external_data` entries, in order.
type Keys<'k> = &'k [(&'k str, &'k str)];

#[test]
fn external_weights_are_checked_against_their_file_region_before_reading() {
    let dir = tmp();
    let (mut b, w) = one_gemm([3, 4], 3, vec![attr_int("transB", 1)]);
    // 4096 bytes of padding, then the 48 bytes of W
    let mut bytes = vec![0xAB_u8; 4096];
    bytes.extend(w.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(dir.path().join("w.bin"), &bytes).unwrap();
    let ext = |keys: &[(&str, &str)]| tensor_external("W", DataType::Float, &[3, 4], keys);

    replace_init(
        &mut b,
        "W",
        ext(&[("location", "w.bin"), ("offset", "4096"), ("length", "48")]),
    );
    let net = load(&b.write(dir.path(), "ok.onnx"));
    assert_eq!(net.layers[0].w[[1, 2]], f64::from(w[6]));

    let refusals: [(Keys, &[&str]); 5] = [
        (
            &[("location", "w.bin"), ("offset", "4096"), ("length", "40")],
            &["holds 40 bytes from offset 4096", "need 48 bytes"],
        ),
        (
            // without a length the region runs to the end of the file
            &[("location", "w.bin"), ("offset", "4000")],
            &["holds 144 bytes from offset 4000", "need 48 bytes"],
        ),
        (
            &[("location", "w.bin"), ("offset", "4100"), ("length", "48")],
            &["lies outside the file (4144 bytes)"],
        ),
        (
            &[
                ("location", "w.bin"),
                ("location", "other.bin"),
                ("offset", "4096"),
            ],
            &["key `location` is given more than once"],
        ),
        (
            &[
                ("location", "../w.bin"),
                ("offset", "4096"),
                ("length", "48"),
            ],
            &["must be a relative path inside the model's directory"],
        ),
    ];
    for (k, (keys, needles)) in refusals.into_iter().enumerate() {
        replace_init(&mut b, "W", ext(keys));
        let msg = load_err(&b.write(dir.path(), &format!("bad{k}.onnx")));
        assert_contains(&msg, &["initializer `W`"]);
        assert_contains(&msg, needles);
    }
}

/// `lipfp inspect model` under `/usr/bin/time -v` when it exists: exit code, stderr, wall
/// time, and peak resident set size in KiB (`None` without `/usr/bin/time`).
fn inspect_measured(model: &Path) -> (i32, String, Duration, Option<u64>) {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.arg("-v").arg(env!("CARGO_BIN_EXE_lipfp"));
        c
    } else {
        eprintln!("NOT MEASURED: peak memory (no /usr/bin/time)");
        Command::new(env!("CARGO_BIN_EXE_lipfp"))
    };
    cmd.arg("inspect")
        .arg(model)
        .env("LIPFP_CACHE_DIR", model.with_extension("cache"));
    let start = Instant::now();
    let out = cmd.output().expect("run lipfp");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok());
    (out.status.code().unwrap_or(-1), stderr, elapsed, rss)
}

/// A sparse all-zero file of `len` bytes, or `None` (after saying so) when the file system
/// cannot hold one.
fn sparse_file(path: &Path, len: u64) -> Option<()> {
    let f = std::fs::File::create(path).expect("create the weight file");
    match f.set_len(len) {
        Ok(()) => Some(()),
        Err(e) => {
            eprintln!("NOT RUN: cannot create a sparse file of {len} bytes here: {e}");
            None
        }
    }
}

/// The refusal of `model` is an exit 2 naming `needles`, in under 5 s and 600 MB.
fn assert_refused_fast_and_small(model: &Path, needles: &[&str]) {
    let (code, stderr, elapsed, rss) = inspect_measured(model);
    eprintln!(
        "{}: exit {code} in {elapsed:?}, peak RSS {rss:?} KiB",
        model.display()
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    if let Some(kib) = rss {
        assert!(kib < 600 * 1024, "peak RSS {kib} KiB");
    }
    assert_eq!(code, 2, "exit code; stderr:\n{stderr}");
    assert_contains(&stderr, needles);
}

#[test]
fn a_1_6_gb_external_weight_that_cannot_fit_is_refused_before_it_is_read() {
    let dir = tmp();
    const BYTES: u64 = 1_600_000_000;
    if sparse_file(&dir.path().join("big.bin"), BYTES).is_none() {
        return;
    }
    let model = |w: TensorProto, elem: DataType| {
        let mut b = ModelBuilder::new();
        b.input("x", elem, &batched(&[4]));
        b.init(w);
        b.node(
            "Gemm",
            "fc",
            &["x", "W"],
            &["y"],
            vec![attr_int("transB", 1)],
        );
        b.output("y", elem, Some(&batched(&[2])));
        b
    };
    // dims that match the file (2 x 10^8 float64 values) but not the model's 4 inputs
    let w = tensor_external(
        "W",
        DataType::Double,
        &[2, 100_000_000],
        &[("location", "big.bin")],
    );
    let path = model(w, DataType::Double).write(dir.path(), "shape.onnx");
    assert_refused_fast_and_small(
        &path,
        &["node `fc` (op Gemm)", "weight `W` of dims [2, 100000000]"],
    );
    // dims that fit the model but not the file region
    let w = tensor_external("W", DataType::Float, &[2, 4], &[("location", "big.bin")]);
    let path = model(w, DataType::Float).write(dir.path(), "region.onnx");
    assert_refused_fast_and_small(
        &path,
        &["initializer `W`", "holds 1600000000 bytes", "need 32 bytes"],
    );
}

#[test]
fn a_tensor_claiming_2_40_elements_is_refused_before_allocating() {
    let dir = tmp();
    // 2^40 float32 values: a sparse file of 4 TiB that matches the claim exactly
    if sparse_file(&dir.path().join("huge.bin"), 4 << 40).is_none() {
        return;
    }
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[1 << 20]);
    b.init(tensor_external(
        "W",
        DataType::Float,
        &[1 << 20, 1 << 20],
        &[("location", "huge.bin")],
    ));
    b.node(
        "Gemm",
        "fc",
        &["x", "W"],
        &["y"],
        vec![attr_int("transB", 1)],
    );
    b.output_f32("y", 1 << 20);
    let path = b.write(dir.path(), "huge.onnx");
    assert_refused_fast_and_small(
        &path,
        &[
            "initializer `W`",
            "1099511627776 elements",
            "at most 268435456",
        ],
    );
    // the same claim in a model's own bytes, and dims whose product overflows
    for (k, dims) in [vec![1 << 20, 1 << 20], vec![1 << 32, 1 << 32]]
        .into_iter()
        .enumerate()
    {
        let mut t = tensor_f32("W", &[1], &[0.0]);
        t.dims = dims;
        replace_init(&mut b, "W", t);
        let msg = load_err(&b.write(dir.path(), &format!("claim{k}.onnx")));
        assert_contains(&msg, &["initializer `W`"]);
        assert!(
            msg.contains("at most") || msg.contains("overflows"),
            "{msg}"
        );
    }
}
