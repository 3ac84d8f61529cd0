//! The graph shapes real exporters emit for dense ReLU classifiers (PyTorch dynamo and
//! TorchScript, tf2onnx, hand-written Gemm chains) load into the expected chain of dense layers,
//! with the weights as written, and compute the same logits as tract's executor. The shapes
//! that are not dense ReLU classifiers are rejected naming the node and its op type; a
//! BatchNormalization after a layer and a Softmax head are read.

use std::path::Path;

use crate::common::onnx_builder::*;
use crate::common::runtime::argmax;
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::engine::exec::Executor;
use lipfp::onnx::model::{self, supported_ops, Activation, DenseNet, ElementOp, HeadOp};
use lipfp::onnx::reader::proto::tensor_proto::DataType;
use lipfp::onnx::reader::proto::FunctionProto;
use lipfp::onnx::reader::run_with_tract;

/// Rows of random inputs compared against tract.
const ROWS: usize = 16;
/// Logits agree with tract up to `REL * max(|a|, |b|) + ABS` (summation order may differ).
const REL: f64 = 1e-5;
const ABS: f64 = 1e-6;

/// One layer as written to the model: `w` row-major `[m, n]` (outputs x inputs, the loader's
/// layout), `b` the bias or `None` when the graph has no bias for this layer.
#[derive(Clone, Debug)]
struct Layer {
    m: usize,
    n: usize,
    w: Vec<f64>,
    b: Option<Vec<f64>>,
}

impl Layer {
    /// Weights as float32 (they must be float32 values).
    fn w32(&self) -> Vec<f32> {
        to_f32_exact(&self.w)
    }
    /// Transposed weights `[n, m]` as float32 (MatMul / Gemm transB = 0 layout).
    fn wt32(&self) -> Vec<f32> {
        to_f32_exact(&self.wt())
    }
    /// Transposed weights `[n, m]`.
    fn wt(&self) -> Vec<f64> {
        let mut t = vec![0.0; self.m * self.n];
        for i in 0..self.m {
            for j in 0..self.n {
                t[j * self.m + i] = self.w[i * self.n + j];
            }
        }
        t
    }
    fn b32(&self) -> Vec<f32> {
        to_f32_exact(self.b.as_ref().expect("layer has a bias"))
    }
}

/// lipfp's centre execution of `net` in its own format, default execution model.
fn deployed_executor(net: &DenseNet) -> Executor {
    Executor::new(
        net,
        &ExecutionModel::deployed(net.format, None, false).expect("a valid execution model"),
    )
}

fn to_f32_exact(v: &[f64]) -> Vec<f32> {
    v.iter()
        .map(|&x| {
            let y = x as f32;
            assert_eq!(y as f64, x, "test weight {x} is not a float32 value");
            y
        })
        .collect()
}

/// Random float32-valued layers for `widths = [n_1, m_1, ..., m_L]`; `bias[k]` says whether
/// layer `k` has a bias.
fn random_layers(widths: &[usize], bias: &[bool], seed: u64) -> Vec<Layer> {
    assert_eq!(bias.len(), widths.len() - 1);
    let mut rng = Lcg::new(seed);
    widths
        .windows(2)
        .zip(bias)
        .map(|(w, &has_b)| {
            let (n, m) = (w[0], w[1]);
            let scale = 1.5 / (n as f32).sqrt();
            Layer {
                m,
                n,
                w: rng.f32s(m * n, scale).into_iter().map(f64::from).collect(),
                b: has_b.then(|| rng.f32s(m, 0.2).into_iter().map(f64::from).collect()),
            }
        })
        .collect()
}

/// Random layers whose values are float16 values.
fn random_layers_f16(widths: &[usize], seed: u64) -> Vec<Layer> {
    let mut l = random_layers(widths, &vec![true; widths.len() - 1], seed);
    for layer in &mut l {
        let r = |x: &mut f64| *x = half::f16::from_f32(*x as f32).to_f64();
        layer.w.iter_mut().for_each(r);
        layer.b.iter_mut().flatten().for_each(r);
    }
    l
}

fn f16s(v: &[f64]) -> Vec<half::f16> {
    v.iter()
        .map(|&x| {
            let h = half::f16::from_f32(x as f32);
            assert_eq!(h.to_f64(), x, "test weight {x} is not a float16 value");
            h
        })
        .collect()
}

/// Random layers with float64 values that are (almost all) not float32 values.
fn random_layers_f64(widths: &[usize], seed: u64) -> Vec<Layer> {
    let mut rng = Lcg::new(seed);
    widths
        .windows(2)
        .map(|w| {
            let (n, m) = (w[0], w[1]);
            let scale = 1.5 / (n as f64).sqrt();
            Layer {
                m,
                n,
                w: rng.f64s(m * n, scale),
                b: Some(rng.f64s(m, 0.2)),
            }
        })
        .collect()
}

const WIDTHS: [usize; 4] = [12, 8, 6, 3];

/// Emit the layers one after another with `layer` (which returns the layer's output name) and
/// a `Relu` after every layer but the last; returns the name of the last layer's output.
fn chain(
    b: &mut ModelBuilder,
    x: &str,
    layers: &[Layer],
    mut layer: impl FnMut(&mut ModelBuilder, usize, &str, &Layer) -> String,
) -> String {
    let mut cur = x.to_string();
    for (k, l) in layers.iter().enumerate() {
        cur = layer(b, k, &cur, l);
        if k + 1 < layers.len() {
            let out = format!("/act{k}/Relu_output_0");
            b.node("Relu", &format!("/act{k}/Relu"), &[&cur], &[&out], vec![]);
            cur = out;
        }
    }
    cur
}

/// `Gemm(x, W[m, n], b, transB = 1)` with float32 `raw_data` initializers (PyTorch's Linear).
fn gemm_trans_b1(b: &mut ModelBuilder, k: usize, x: &str, l: &Layer) -> String {
    let w = format!("fc{k}.weight");
    b.init_f32(&w, &[l.m, l.n], &l.w32());
    let mut inputs = vec![x.to_string(), w];
    if l.b.is_some() {
        let bias = format!("fc{k}.bias");
        b.init_f32(&bias, &[l.m], &l.b32());
        inputs.push(bias);
    }
    let out = format!("/fc{k}/Gemm_output_0");
    let inputs: Vec<&str> = inputs.iter().map(|s| s.as_str()).collect();
    b.node(
        "Gemm",
        &format!("/fc{k}/Gemm"),
        &inputs,
        &[&out],
        vec![
            attr_float("alpha", 1.0),
            attr_float("beta", 1.0),
            attr_int("transB", 1),
        ],
    );
    out
}

/// The nodes `MatMul(x, w)` then, with a bias, `Add(y, bias)` (or `Add(bias, y)` when
/// `bias_first`), named as tf2onnx names them; the tensors `w` and `bias` must already exist.
fn matmul_add_nodes(
    b: &mut ModelBuilder,
    k: usize,
    x: &str,
    w: &str,
    bias: Option<&str>,
    bias_first: bool,
) -> String {
    let y = format!("dense_{k}/MatMul:0");
    b.node(
        "MatMul",
        &format!("dense_{k}/MatMul"),
        &[x, w],
        &[&y],
        vec![],
    );
    let Some(bias) = bias else { return y };
    let out = format!("dense_{k}/BiasAdd:0");
    let ins = if bias_first {
        [bias, y.as_str()]
    } else {
        [y.as_str(), bias]
    };
    b.node("Add", &format!("dense_{k}/BiasAdd"), &ins, &[&out], vec![]);
    out
}

/// `MatMul(x, W^T[n, m])`, then `Add(y, bias)` (or `Add(bias, y)` when `bias_first`) unless
/// the layer has no bias.
fn matmul_add(b: &mut ModelBuilder, k: usize, x: &str, l: &Layer, bias_first: bool) -> String {
    let w = format!("dense_{k}/kernel");
    b.init_f32(&w, &[l.n, l.m], &l.wt32());
    let bias = format!("dense_{k}/bias");
    if l.b.is_some() {
        b.init_f32(&bias, &[l.m], &l.b32());
    }
    matmul_add_nodes(b, k, x, &w, l.b.as_ref().map(|_| bias.as_str()), bias_first)
}

/// `check_structure`: layers, widths, Relu on hidden layers and Identity on the output.
fn check_structure(net: &DenseNet, widths: &[usize]) {
    assert_eq!(net.layers.len(), widths.len() - 1, "number of layers");
    assert_eq!(net.widths(), widths, "widths");
    assert_eq!(net.input_dim(), widths[0]);
    assert_eq!(net.classes(), *widths.last().expect("widths"));
    for (k, l) in net.layers.iter().enumerate() {
        let want = if k + 1 < net.layers.len() {
            Activation::Relu
        } else {
            Activation::Identity
        };
        assert_eq!(l.act, want, "activation of layer {k}");
        assert_eq!(l.b.len(), l.m(), "bias length of layer {k}");
    }
}

/// The weights read equal `conv(written)` exactly (a missing bias reads as zeros).
fn check_weights(net: &DenseNet, layers: &[Layer], conv: impl Fn(f64) -> f64) {
    assert_eq!(net.layers.len(), layers.len());
    for (k, (got, want)) in net.layers.iter().zip(layers).enumerate() {
        assert_eq!(
            got.w.shape(),
            &[want.m, want.n],
            "weight shape of layer {k}"
        );
        for i in 0..want.m {
            for j in 0..want.n {
                let (g, w) = (got.w[[i, j]], conv(want.w[i * want.n + j]));
                assert!(
                    g.to_bits() == w.to_bits(),
                    "layer {k} W[{i}, {j}]: read {g:e}, wrote {w:e}"
                );
            }
        }
        let zeros = vec![0.0; want.m];
        let wb = want.b.as_ref().unwrap_or(&zeros);
        for (i, (&g, &w)) in got.b.iter().zip(wb).enumerate() {
            let w = conv(w);
            assert!(
                g.to_bits() == w.to_bits(),
                "layer {k} b[{i}]: read {g:e}, wrote {w:e}"
            );
        }
    }
}

/// Random float32 inputs, `rows x dim`.
fn random_inputs(rows: usize, dim: usize, seed: u64) -> Vec<f32> {
    Lcg::new(seed).f32s(rows * dim, 1.0)
}

fn assert_close(ours: &[f64], theirs: &[f64], rel: f64, abs: f64, what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: number of logits");
    for (k, (&a, &b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            a.is_finite() && b.is_finite(),
            "{what}: logit {k}: {a} vs {b}"
        );
        let tol = rel * a.abs().max(b.abs()) + abs;
        assert!(
            (a - b).abs() <= tol,
            "{what}: logit {k}: lipfp {a:e} vs tract {b:e} (diff {:e} > {tol:e})",
            (a - b).abs()
        );
    }
    // the comparison means something only if the logits are not all equal
    let spread = ours.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
        - ours.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(spread > 1e-3, "{what}: degenerate logits {ours:?}");
}

/// Logits of `net` (in `net.format`) against tract on `rows` random inputs given to tract with
/// per-example shape `example` (so tract sees `[rows, example...]`).
fn compare_with_tract(
    net: &DenseNet,
    path: &Path,
    rows: usize,
    example: &[usize],
    seed: u64,
    rel: f64,
    abs: f64,
) {
    let dim = net.input_dim();
    assert_eq!(example.iter().product::<usize>(), dim);
    let x = random_inputs(rows, dim, seed);
    let values: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let ours = deployed_executor(net).logits(&values, dim);
    assert_eq!(ours.len(), rows * net.classes());
    let mut shape = vec![rows];
    shape.extend_from_slice(example);
    let theirs = run_with_tract(path, &shape, &x).expect("tract runs the model");
    assert_close(&ours, &theirs, rel, abs, &format!("{}", path.display()));
}

/// Load as float32 and check (a) structure, (b) logits against tract, (c) exact weights.
fn verify_f32(path: &Path, layers: &[Layer], example: &[usize], rows: usize) -> DenseNet {
    let net = model::load(path, Format::Float32, false).unwrap_or_else(|e| panic!("load: {e}"));
    let mut widths = vec![layers[0].n];
    widths.extend(layers.iter().map(|l| l.m));
    check_structure(&net, &widths);
    assert_eq!(net.input_shape, example, "per-example input shape");
    assert_eq!(net.format, Format::Float32);
    check_weights(&net, layers, |x| x);
    assert_eq!(
        net.converted_changed, 0,
        "float32 weights are unchanged by float32"
    );
    compare_with_tract(&net, path, rows, example, 7, REL, ABS);
    net
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

// ---------------------------------------------------------------------------------------------
// PyTorch dynamo (torch.onnx.export(..., dynamo=True))
// ---------------------------------------------------------------------------------------------

/// `Reshape(x, [-1, 12], allowzero = 1)` then `Gemm(transB = 1)` layers.
fn dynamo_model(layers: &[Layer], batch: Option<usize>) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.opset(18);
    match batch {
        None => b.input("x", DataType::Float, &batched(&[3, 4])),
        Some(n) => b.input("x", DataType::Float, &fixed_batch(n, &[3, 4])),
    };
    let lead = batch.map(|n| n as i64).unwrap_or(-1);
    b.init_i64("val_0", &[2], &[lead, 12]);
    b.node(
        "Reshape",
        "node_view",
        &["x", "val_0"],
        &["view"],
        vec![attr_int("allowzero", 1)],
    );
    let out = chain(&mut b, "view", layers, gemm_trans_b1);
    b.node("Identity", "node_output", &[&out], &["linear_2"], vec![]);
    let classes = layers.last().expect("layers").m;
    match batch {
        None => b.output_f32("linear_2", classes),
        Some(n) => b.output(
            "linear_2",
            DataType::Float,
            Some(&fixed_batch(n, &[classes])),
        ),
    };
    b
}

#[test]
fn dynamo_reshape_gemm_with_bias() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 1);
    let path = dynamo_model(&layers, None).write(dir.path(), "dynamo.onnx");
    verify_f32(&path, &layers, &[3, 4], ROWS);
}

#[test]
fn dynamo_gemm_without_bias() {
    let dir = tmp();
    // two-input Gemm (Linear(bias=False)) on every layer, and on the hidden layers only
    for (i, bias) in [[false, false, false], [false, false, true]]
        .iter()
        .enumerate()
    {
        let layers = random_layers(&WIDTHS, bias, 2 + i as u64);
        let path = dynamo_model(&layers, None).write(dir.path(), &format!("nobias{i}.onnx"));
        let net = verify_f32(&path, &layers, &[3, 4], ROWS);
        assert!(net.layers[0].b.iter().all(|&x| x == 0.0));
    }
}

#[test]
fn dynamo_reshape_with_fixed_batch() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 4);
    let path = dynamo_model(&layers, Some(16)).write(dir.path(), "static.onnx");
    verify_f32(&path, &layers, &[3, 4], 16);
}

// ---------------------------------------------------------------------------------------------
// TorchScript exporter (torch.onnx.export(..., dynamo=False))
// ---------------------------------------------------------------------------------------------

#[test]
fn torchscript_flatten_gemm() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 5);
    let mut b = ModelBuilder::new();
    b.input("input", DataType::Float, &batched(&[1, 3, 4]));
    b.node(
        "Flatten",
        "/flatten/Flatten",
        &["input"],
        &["/flatten/Flatten_output_0"],
        vec![attr_int("axis", 1)],
    );
    let out = chain(&mut b, "/flatten/Flatten_output_0", &layers, gemm_trans_b1);
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "flatten.onnx");
    verify_f32(&path, &layers, &[1, 3, 4], ROWS);
}

/// `x.view(x.size(0), -1)`: Shape -> Gather(0) -> Unsqueeze -> Concat(.., [-1]) -> Reshape.
fn torchscript_dynamic_reshape(opset: i64, seed: u64) {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], seed);
    let mut b = ModelBuilder::new();
    b.opset(opset);
    b.input("input.1", DataType::Float, &batched(&[3, 4]));
    b.node(
        "Shape",
        "/Shape",
        &["input.1"],
        &["/Shape_output_0"],
        vec![],
    );
    b.constant("/Constant", "/Constant_output_0", tensor_i64("", &[], &[0]));
    b.node(
        "Gather",
        "/Gather",
        &["/Shape_output_0", "/Constant_output_0"],
        &["/Gather_output_0"],
        vec![attr_int("axis", 0)],
    );
    if opset >= 13 {
        b.constant(
            "/Constant_1",
            "/Constant_1_output_0",
            tensor_i64("", &[1], &[0]),
        );
        b.node(
            "Unsqueeze",
            "/Unsqueeze",
            &["/Gather_output_0", "/Constant_1_output_0"],
            &["/Unsqueeze_output_0"],
            vec![],
        );
    } else {
        b.node(
            "Unsqueeze",
            "/Unsqueeze",
            &["/Gather_output_0"],
            &["/Unsqueeze_output_0"],
            vec![attr_ints("axes", &[0])],
        );
    }
    b.constant(
        "/Constant_2",
        "/Constant_2_output_0",
        tensor_i64("", &[1], &[-1]),
    );
    b.node(
        "Concat",
        "/Concat",
        &["/Unsqueeze_output_0", "/Constant_2_output_0"],
        &["/Concat_output_0"],
        vec![attr_int("axis", 0)],
    );
    b.node(
        "Reshape",
        "/Reshape",
        &["input.1", "/Concat_output_0"],
        &["/Reshape_output_0"],
        vec![],
    );
    let out = chain(&mut b, "/Reshape_output_0", &layers, gemm_trans_b1);
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), &format!("view_opset{opset}.onnx"));
    verify_f32(&path, &layers, &[3, 4], ROWS);
}

#[test]
fn torchscript_dynamic_reshape_chain_opset13() {
    torchscript_dynamic_reshape(13, 6);
}

#[test]
fn torchscript_dynamic_reshape_chain_opset11() {
    torchscript_dynamic_reshape(11, 7);
}

#[test]
fn torchscript_matmul_add_on_3d_input() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 8);
    let mut b = ModelBuilder::new();
    b.input("onnx::MatMul_0", DataType::Float, &batched(&[1, 12]));
    let out = chain(&mut b, "onnx::MatMul_0", &layers, |b, k, x, l| {
        // TorchScript writes `Add(bias, y)` with the bias first
        let w = format!("onnx::MatMul_{}", 10 + k);
        b.init_f32(&w, &[l.n, l.m], &l.wt32());
        let y = format!("/fc{k}/MatMul_output_0");
        b.node("MatMul", &format!("/fc{k}/MatMul"), &[x, &w], &[&y], vec![]);
        let bias = format!("fc{k}.bias");
        b.init_f32(&bias, &[l.m], &l.b32());
        let out = format!("/fc{k}/Add_output_0");
        b.node("Add", &format!("/fc{k}/Add"), &[&bias, &y], &[&out], vec![]);
        out
    });
    b.output(&out, DataType::Float, Some(&batched(&[1, 3])));
    let path = b.write(dir.path(), "matmul3d.onnx");
    let net = verify_f32(&path, &layers, &[1, 12], ROWS);
    assert_eq!(
        net.layers[0].nodes,
        ["/fc0/MatMul", "/fc0/Add", "/act0/Relu"]
    );
}

// ---------------------------------------------------------------------------------------------
// tf2onnx (Keras Sequential with Flatten and Dense)
// ---------------------------------------------------------------------------------------------

/// `Reshape(x, [-1, 12])` then MatMul + Add layers (opset 13, no allowzero).
fn tf2onnx_model(layers: &[Layer]) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.opset(13);
    b.input("flatten_input", DataType::Float, &batched(&[3, 4]));
    b.init_i64("const_fold_opt__12", &[2], &[-1, 12]);
    b.node(
        "Reshape",
        "sequential/flatten/Reshape",
        &["flatten_input", "const_fold_opt__12"],
        &["sequential/flatten/Reshape:0"],
        vec![],
    );
    let out = chain(
        &mut b,
        "sequential/flatten/Reshape:0",
        layers,
        |b, k, x, l| matmul_add(b, k, x, l, false),
    );
    b.output_f32(&out, 3);
    b
}

#[test]
fn tf2onnx_reshape_matmul_add() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 9);
    let path = tf2onnx_model(&layers).write(dir.path(), "tf2onnx.onnx");
    let net = verify_f32(&path, &layers, &[3, 4], ROWS);
    assert_eq!(net.layers[2].nodes, ["dense_2/MatMul", "dense_2/BiasAdd"]);
}

#[test]
fn tf2onnx_matmul_without_add() {
    let dir = tmp();
    // Dense(use_bias=False) on a hidden layer and on the output layer
    for (i, bias) in [[true, false, true], [false, true, false]]
        .iter()
        .enumerate()
    {
        let layers = random_layers(&WIDTHS, bias, 10 + i as u64);
        let path = tf2onnx_model(&layers).write(dir.path(), &format!("nobias{i}.onnx"));
        verify_f32(&path, &layers, &[3, 4], ROWS);
    }
}

#[test]
fn tf2onnx_cast_and_identity_in_the_chain() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 12);
    let mut b = ModelBuilder::new();
    b.opset(13);
    b.input("dense_input", DataType::Float, &batched(&[12]));
    b.node(
        "Cast",
        "sequential/Cast",
        &["dense_input"],
        &["sequential/Cast:0"],
        vec![attr_int("to", DataType::Float as i64)],
    );
    let out = chain(&mut b, "sequential/Cast:0", &layers, |b, k, x, l| {
        // an Identity on the activation before each layer and on the kernel
        let xi = format!("dense_{k}/Identity_in:0");
        b.node(
            "Identity",
            &format!("dense_{k}/Identity_in"),
            &[x],
            &[&xi],
            vec![],
        );
        let w = format!("dense_{k}/kernel");
        b.init_f32(&w, &[l.n, l.m], &l.wt32());
        let wi = format!("dense_{k}/kernel/read:0");
        b.node(
            "Identity",
            &format!("dense_{k}/kernel/read"),
            &[&w],
            &[&wi],
            vec![],
        );
        let y = format!("dense_{k}/MatMul:0");
        b.node(
            "MatMul",
            &format!("dense_{k}/MatMul"),
            &[&xi, &wi],
            &[&y],
            vec![],
        );
        let bias = format!("dense_{k}/bias");
        b.init_f32(&bias, &[l.m], &l.b32());
        // the bias goes through a Cast to float as well
        let bc = format!("dense_{k}/bias/Cast:0");
        b.node(
            "Cast",
            &format!("dense_{k}/bias/Cast"),
            &[&bias],
            &[&bc],
            vec![attr_int("to", DataType::Float as i64)],
        );
        let out = format!("dense_{k}/BiasAdd:0");
        b.node(
            "Add",
            &format!("dense_{k}/BiasAdd"),
            &[&y, &bc],
            &[&out],
            vec![],
        );
        out
    });
    b.node("Identity", "Identity", &[&out], &["dense_2"], vec![]);
    b.output_f32("dense_2", 3);
    let path = b.write(dir.path(), "cast_identity.onnx");
    verify_f32(&path, &layers, &[12], ROWS);
}

// ---------------------------------------------------------------------------------------------
// Other weight layouts and storages
// ---------------------------------------------------------------------------------------------

#[test]
fn gemm_trans_b0_with_typed_float_data() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, false, true], 13);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        // W stored as B = W^T [n, m] in the typed float_data field, transB absent (= 0)
        let w = format!("W{k}");
        b.init_f32_typed(&w, &[l.n, l.m], &l.wt32());
        let mut inputs = vec![x.to_string(), w];
        if l.b.is_some() {
            let bias = format!("B{k}");
            // bias as [1, m], broadcast by Gemm
            b.init_f32_typed(&bias, &[1, l.m], &l.b32());
            inputs.push(bias);
        }
        let out = format!("gemm{k}");
        let inputs: Vec<&str> = inputs.iter().map(|s| s.as_str()).collect();
        b.node("Gemm", &format!("Gemm_{k}"), &inputs, &[&out], vec![]);
        out
    });
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "gemm_t0.onnx");
    verify_f32(&path, &layers, &[12], ROWS);
    // an explicit transB = 0 attribute reads the same
    let mut b2 = b.clone();
    for n in b2.nodes.iter_mut().filter(|n| n.op_type == "Gemm") {
        n.attribute.push(attr_int("transB", 0));
    }
    let path2 = b2.write(dir.path(), "gemm_t0_explicit.onnx");
    verify_f32(&path2, &layers, &[12], ROWS);
}

#[test]
fn weights_from_constant_nodes() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 14);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        let w = format!("/fc{k}/Constant_output_0");
        let wt = if k % 2 == 0 {
            tensor_f32("", &[l.m, l.n], &l.w32())
        } else {
            tensor_f32_typed("", &[l.m, l.n], &l.w32())
        };
        b.constant(&format!("/fc{k}/Constant"), &w, wt);
        let bias = format!("/fc{k}/Constant_1_output_0");
        b.constant(
            &format!("/fc{k}/Constant_1"),
            &bias,
            tensor_f32("", &[l.m], &l.b32()),
        );
        let out = format!("/fc{k}/Gemm_output_0");
        b.node(
            "Gemm",
            &format!("/fc{k}/Gemm"),
            &[x, &w, &bias],
            &[&out],
            vec![attr_int("transB", 1)],
        );
        out
    });
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "constant_nodes.onnx");
    verify_f32(&path, &layers, &[12], ROWS);
}

#[test]
fn weights_as_constant_graph_inputs() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 15);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, gemm_trans_b1);
    b.output_f32(&out, 3);
    // older exporters (IR < 4) also list every initializer as a graph input
    for t in b.initializers.clone() {
        let dims: Vec<D> = t.dims.iter().map(|&d| D::Fixed(d)).collect();
        b.inputs
            .push(value_info(&t.name, DataType::Float, Some(&dims)));
    }
    for ir in [3, 8] {
        b.ir_version = ir;
        if ir == 3 {
            b.opset(9);
        }
        let path = b.write(dir.path(), &format!("inputs_ir{ir}.onnx"));
        let net = verify_f32(&path, &layers, &[12], ROWS);
        assert_eq!(net.input_name, "x");
    }
}

#[test]
fn float16_initializers_cast_to_float() {
    let dir = tmp();
    let layers = random_layers_f16(&WIDTHS, 16);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        // W and b stored as float16 (raw_data, or int32_data for layer 1) and cast to float
        let (w16, b16) = (format!("fc{k}.weight_fp16"), format!("fc{k}.bias_fp16"));
        if k == 1 {
            b.init(tensor_f16_typed(&w16, &[l.m, l.n], &f16s(&l.w)));
        } else {
            b.init_f16(&w16, &[l.m, l.n], &f16s(&l.w));
        }
        b.init_f16(&b16, &[l.m], &f16s(l.b.as_ref().expect("bias")));
        let (w, bias) = (format!("fc{k}.weight"), format!("fc{k}.bias"));
        let to_float = || vec![attr_int("to", DataType::Float as i64)];
        b.node("Cast", &format!("/fc{k}/Cast"), &[&w16], &[&w], to_float());
        b.node(
            "Cast",
            &format!("/fc{k}/Cast_1"),
            &[&b16],
            &[&bias],
            to_float(),
        );
        let out = format!("/fc{k}/Gemm_output_0");
        b.node(
            "Gemm",
            &format!("/fc{k}/Gemm"),
            &[x, &w, &bias],
            &[&out],
            vec![attr_int("transB", 1)],
        );
        out
    });
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "fp16_weights.onnx");
    verify_f32(&path, &layers, &[12], ROWS);

    // in float16 the weights are unchanged too
    let net = model::load(&path, Format::Float16, true).unwrap_or_else(|e| panic!("{e}"));
    check_structure(&net, &WIDTHS);
    check_weights(&net, &layers, |x| x);
    assert_eq!(net.converted_changed, 0);
}

/// onnxconverter-common's float16 conversion with keep_io_types: Cast in, float16 layers
/// (`Gemm` or `MatMul` + `Add`), Cast out.
fn float16_model(layers: &[Layer], gemm: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.node(
        "Cast",
        "graph_input_cast0",
        &["x"],
        &["x_fp16"],
        vec![attr_int("to", DataType::Float16 as i64)],
    );
    let out = chain(&mut b, "x_fp16", layers, |b, k, x, l| {
        let bias = l.b.as_ref().expect("bias");
        if gemm {
            let (w, bn) = (format!("fc{k}.weight"), format!("fc{k}.bias"));
            b.init_f16(&w, &[l.m, l.n], &f16s(&l.w));
            b.init_f16(&bn, &[l.m], &f16s(bias));
            let out = format!("/fc{k}/Gemm_output_0");
            b.node(
                "Gemm",
                &format!("/fc{k}/Gemm"),
                &[x, &w, &bn],
                &[&out],
                vec![attr_int("transB", 1)],
            );
            out
        } else {
            let (w, bn) = (format!("dense_{k}/kernel"), format!("dense_{k}/bias"));
            b.init(tensor_f16_typed(&w, &[l.n, l.m], &f16s(&l.wt())));
            b.init_f16(&bn, &[l.m], &f16s(bias));
            matmul_add_nodes(b, k, x, &w, Some(&bn), false)
        }
    });
    b.node(
        "Cast",
        "graph_output_cast0",
        &[&out],
        &["logits"],
        vec![attr_int("to", DataType::Float as i64)],
    );
    b.output_f32("logits", 3);
    b
}

#[test]
fn float16_model_with_float_io() {
    let dir = tmp();
    let layers = random_layers_f16(&WIDTHS, 17);
    let dim = 12;
    // inputs that are float16 values
    let x: Vec<f32> = random_inputs(ROWS, dim, 3)
        .into_iter()
        .map(|v| half::f16::from_f32(v).to_f32())
        .collect();
    let values: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut logits = Vec::new();
    for gemm in [false, true] {
        let path = float16_model(&layers, gemm).write(dir.path(), &format!("fp16_{gemm}.onnx"));
        // certified as float32, the input Cast to float16 would be a rounding the float32
        // model does not contain: refused, naming the node
        let e = model::load(&path, Format::Float32, false)
            .expect_err("a narrowing input cast is refused")
            .to_string();
        assert!(
            e.contains("Cast") && e.contains("narrowing cast of the network input"),
            "{e}"
        );
        let net = model::load(&path, Format::Float16, true).unwrap_or_else(|e| panic!("{e}"));
        check_structure(&net, &WIDTHS);
        check_weights(&net, &layers, |x| x);
        assert_eq!(net.converted_changed, 0);
        logits.push(deployed_executor(&net).logits(&values, dim));
        if !gemm {
            // tract computes in float16 with its own accumulation order and precision:
            // agreement within float16 precision (tract 0.23.9 cannot prepare a float16 Gemm
            // with bias, "Output mismatch after rewiring expansion", so only MatMul + Add runs)
            let theirs =
                run_with_tract(&path, &[ROWS, dim], &x).expect("tract runs the fp16 model");
            assert_close(&logits[0], &theirs, 1e-2, 1e-2, "float16 model");
        }
    }
    // the Gemm and MatMul + Add exports are the same network
    assert_eq!(logits[0], logits[1]);
}

/// Input cast to double, float64 layers (`Gemm` or `MatMul` + `Add`), double output.
fn float64_model(layers: &[Layer], gemm: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.node(
        "Cast",
        "/Cast",
        &["x"],
        &["x64"],
        vec![attr_int("to", DataType::Double as i64)],
    );
    let out = chain(&mut b, "x64", layers, |b, k, x, l| {
        let bias = l.b.as_ref().expect("bias");
        if gemm {
            // Gemm with raw_data weights and a typed double_data bias
            let (w, bn) = (format!("fc{k}.weight"), format!("fc{k}.bias"));
            b.init_f64(&w, &[l.m, l.n], &l.w);
            b.init_f64_typed(&bn, &[l.m], bias);
            let out = format!("/fc{k}/Gemm_output_0");
            b.node(
                "Gemm",
                &format!("/fc{k}/Gemm"),
                &[x, &w, &bn],
                &[&out],
                vec![attr_int("transB", 1)],
            );
            out
        } else {
            // MatMul with typed double_data weights and a raw_data bias
            let (w, bn) = (format!("dense_{k}/kernel"), format!("dense_{k}/bias"));
            b.init_f64_typed(&w, &[l.n, l.m], &l.wt());
            b.init_f64(&bn, &[l.m], bias);
            matmul_add_nodes(b, k, x, &w, Some(&bn), false)
        }
    });
    b.output(&out, DataType::Double, Some(&batched(&[3])));
    b
}

#[test]
fn float64_initializers() {
    let dir = tmp();
    let layers = random_layers_f64(&WIDTHS, 18);
    let total: usize = layers.iter().map(|l| l.w.len() + l.m).sum();
    let changed = layers
        .iter()
        .flat_map(|l| l.w.iter().chain(l.b.iter().flatten()))
        .filter(|&&x| x as f32 as f64 != x)
        .count();
    assert!(
        changed > total / 2,
        "test weights should mostly not be float32 values"
    );
    let x = random_inputs(ROWS, 12, 19);
    let values: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut logits = Vec::new();
    for gemm in [false, true] {
        let path = float64_model(&layers, gemm).write(dir.path(), &format!("fp64_{gemm}.onnx"));

        // float64: the weights as written
        let net = model::load(&path, Format::Float64, false).unwrap_or_else(|e| panic!("{e}"));
        check_structure(&net, &WIDTHS);
        check_weights(&net, &layers, |x| x);
        assert_eq!(net.converted_changed, 0);
        let ours = deployed_executor(&net).logits(&values, 12);

        // float32: each weight rounded to nearest float32
        let net32 = model::load(&path, Format::Float32, false).unwrap_or_else(|e| panic!("{e}"));
        check_structure(&net32, &WIDTHS);
        check_weights(&net32, &layers, |x| x as f32 as f64);
        assert_eq!(net32.converted_changed, changed);
        let ours32 = deployed_executor(&net32).logits(&values, 12);

        if !gemm {
            // tract 0.23.9 cannot prepare a float64 Gemm with bias ("tensor is F32, accessed
            // as F64" in its beta * C constant folding), so only MatMul + Add runs in tract
            let theirs = run_with_tract(&path, &[ROWS, 12], &x).expect("tract runs the model");
            assert_close(&ours, &theirs, 1e-12, 1e-14, "float64 network");
            // the float32 network differs by weight and sum rounding only
            assert_close(&ours32, &theirs, 1e-4, 1e-5, "float32 network");
        }
        logits.push((ours, ours32));
    }
    // the Gemm and MatMul + Add exports are the same network
    assert_eq!(logits[0], logits[1]);
}

#[test]
fn dropout_in_inference_is_a_pass_through() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 20);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    b.init_f32("ratio", &[], &[0.5]);
    b.init(tensor_bool("training_mode", &[], &[false]));
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        let d = format!("/drop{k}/Dropout_output_0");
        match k {
            // opset-12+ form: ratio and training_mode inputs, mask output unused
            0 => b.node(
                "Dropout",
                "/drop0/Dropout",
                &[x, "ratio", "training_mode"],
                &[&d, "/drop0/Dropout_mask"],
                vec![],
            ),
            // the plain one-input form
            _ => b.node("Dropout", &format!("/drop{k}/Dropout"), &[x], &[&d], vec![]),
        };
        gemm_trans_b1(b, k, &d, l)
    });
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "dropout.onnx");
    verify_f32(&path, &layers, &[12], ROWS);
}

// ---------------------------------------------------------------------------------------------
// Elementwise steps and classifier heads (read since src/onnx/model/affine.rs and heads.rs)
// ---------------------------------------------------------------------------------------------

/// PyTorch's `Linear -> BatchNorm1d -> ReLU -> Linear` in eval mode: the BatchNormalization is
/// an elementwise affine layer between the two dense layers, with the parameters as written, and
/// the logits agree with tract's.
#[test]
fn accepts_batch_normalization_after_a_layer() {
    let dir = tmp();
    let layers = random_layers(&[12, 8, 3], &[true, true], 30);
    let mut rng = Lcg::new(35);
    let scale = rng.f32s(8, 2.0);
    let bias = rng.f32s(8, 0.5);
    let mean = rng.f32s(8, 0.5);
    let var: Vec<f32> = rng.f32s(8, 1.0).iter().map(|v| v.abs() + 0.1).collect();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let h = gemm_trans_b1(&mut b, 0, "x", &layers[0]);
    b.init_f32("bn.weight", &[8], &scale);
    b.init_f32("bn.bias", &[8], &bias);
    b.init_f32("bn.running_mean", &[8], &mean);
    b.init_f32("bn.running_var", &[8], &var);
    b.node(
        "BatchNormalization",
        "/bn/BatchNormalization",
        &[
            &h,
            "bn.weight",
            "bn.bias",
            "bn.running_mean",
            "bn.running_var",
        ],
        &["bn_out"],
        vec![attr_float("epsilon", 1e-5)],
    );
    b.node("Relu", "/act0/Relu", &["bn_out"], &["r"], vec![]);
    let out = gemm_trans_b1(&mut b, 1, "r", &layers[1]);
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "m.onnx");
    let net = model::load(&path, Format::Float32, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(net.widths(), [12, 8, 8, 3]);
    let acts: Vec<Activation> = net.layers.iter().map(|l| l.act).collect();
    use Activation::{Identity, Relu};
    assert_eq!(acts, [Identity, Relu, Identity]);
    assert!(net.layers[0].affine.is_none() && net.layers[2].affine.is_none());
    let step = net.layers[1].affine.as_ref().expect("the BatchNorm layer");
    let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    assert_eq!(step.width, 8);
    assert_eq!(
        step.ops,
        [ElementOp::BatchNorm {
            scale: f64s(&scale),
            bias: f64s(&bias),
            mean: f64s(&mean),
            var: f64s(&var),
            epsilon: f64::from(1e-5f32),
        }]
    );
    assert_eq!(
        net.layers[1].nodes,
        ["/bn/BatchNormalization", "/act0/Relu"]
    );
    let dense: Vec<DenseNet> = [0, 2]
        .iter()
        .map(|&k| DenseNet {
            layers: vec![net.layers[k].clone()],
            ..net.clone()
        })
        .collect();
    check_weights(&dense[0], &layers[..1], |x| x);
    check_weights(&dense[1], &layers[1..], |x| x);
    compare_with_tract(&net, &path, ROWS, &[12], 7, REL, ABS);
}

/// A `Softmax` over the classes at the output is the classifier head: the layers are the
/// logits', and the softmax of lipfp's logits is tract's output (same class on every row).
#[test]
fn accepts_softmax_at_the_output() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 33);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, gemm_trans_b1);
    b.node(
        "Softmax",
        "/softmax/Softmax",
        &[&out],
        &["probs"],
        vec![attr_int("axis", -1)],
    );
    b.output_f32("probs", 3);
    let path = b.write(dir.path(), "m.onnx");
    let net = model::load(&path, Format::Float32, false).unwrap_or_else(|e| panic!("{e}"));
    check_structure(&net, &WIDTHS);
    check_weights(&net, &layers, |x| x);
    assert_eq!(net.head, [HeadOp::Softmax]);
    let x = random_inputs(ROWS, 12, 7);
    let values: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let logits = deployed_executor(&net).logits(&values, 12);
    let probs: Vec<f64> = logits
        .chunks(3)
        .flat_map(|row| {
            let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|&z| (z - top).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / sum)
        })
        .collect();
    let theirs = run_with_tract(&path, &[ROWS, 12], &x).expect("tract runs the model");
    assert_close(&probs, &theirs, REL, ABS, "softmax of lipfp's logits");
    for (k, (ours, tract)) in logits.chunks(3).zip(theirs.chunks(3)).enumerate() {
        assert_eq!(argmax(ours), argmax(tract), "row {k}");
    }
}

// ---------------------------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------------------------

/// The Display of the error `load` must return.
fn load_err(path: &Path, format: Format, ftz: bool) -> String {
    match model::load(path, format, ftz) {
        Ok(net) => panic!(
            "{} loaded as {:?} but must be rejected",
            path.display(),
            net.widths()
        ),
        Err(e) => e.to_string(),
    }
}

/// The message names the node and its op type.
fn assert_names_node(msg: &str, node: &str, op: &str) {
    assert!(
        msg.contains(&format!("`{node}`")),
        "message does not name node `{node}`: {msg}"
    );
    assert!(
        msg.contains(&format!("(op {op})")),
        "message does not give (op {op}): {msg}"
    );
}

/// The message names the node, its op type and the supported set.
fn assert_unsupported(msg: &str, node: &str, op: &str) {
    assert_names_node(msg, node, op);
    assert!(
        msg.contains(supported_ops()),
        "message does not list the supported ops: {msg}"
    );
}

/// x[N, 12] -> Gemm(12 -> 8) -> `hidden` -> Gemm(8 -> 3): `hidden(b, in) -> out` inserts the
/// nodes between the two layers.
fn two_layers_around(hidden: impl FnOnce(&mut ModelBuilder, &str) -> String) -> ModelBuilder {
    let layers = random_layers(&[12, 8, 3], &[true, true], 30);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let h = gemm_trans_b1(&mut b, 0, "x", &layers[0]);
    let h = hidden(&mut b, &h);
    let out = gemm_trans_b1(&mut b, 1, &h, &layers[1]);
    b.output_f32(&out, 3);
    b
}

#[test]
fn rejects_sigmoid_between_layers() {
    let dir = tmp();
    let b = two_layers_around(|b, x| {
        b.node("Sigmoid", "/act0/Sigmoid", &[x], &["s"], vec![]);
        "s".into()
    });
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_unsupported(&msg, "/act0/Sigmoid", "Sigmoid");
}

#[test]
fn rejects_tanh() {
    let dir = tmp();
    let b = two_layers_around(|b, x| {
        b.node("Tanh", "/act0/Tanh", &[x], &["t"], vec![]);
        "t".into()
    });
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_unsupported(&msg, "/act0/Tanh", "Tanh");
}

#[test]
fn rejects_conv() {
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
    let l = &random_layers(&[8, 3], &[true], 32)[0];
    let out = gemm_trans_b1(&mut b, 0, "f", l);
    b.output_f32(&out, 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_unsupported(&msg, "/conv1/Conv", "Conv");
}

#[test]
fn rejects_a_model_local_function() {
    let dir = tmp();
    let layers = random_layers(&[12, 8, 3], &[true, true], 34);
    let mut b = ModelBuilder::new();
    b.import_domain("pkg.local", 1);
    b.input_f32("x", &[12]);
    b.init_f32("W0", &[8, 12], &layers[0].w32());
    b.init_f32("B0", &[8], &layers[0].b32());
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
    let out = gemm_trans_b1(&mut b, 1, "h", &layers[1]);
    b.output_f32(&out, 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_unsupported(&msg, "/block0/LinearRelu", "LinearRelu");
    assert!(msg.contains("function"), "{msg}");
}

#[test]
fn rejects_a_non_constant_weight() {
    let dir = tmp();
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    // the weight is a second graph input without an initializer
    b.input("W", DataType::Float, &[D::Fixed(12), D::Fixed(3)]);
    b.node("MatMul", "/fc0/MatMul", &["x", "W"], &["y"], vec![]);
    b.output_f32("y", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_names_node(&msg, "/fc0/MatMul", "MatMul");
    assert!(msg.contains("constant"), "{msg}");
}

#[test]
fn rejects_gemm_with_alpha() {
    let dir = tmp();
    let layers = random_layers(&[12, 8, 3], &[true, true], 35);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let h = gemm_trans_b1(&mut b, 0, "x", &layers[0]);
    b.node("Relu", "/act0/Relu", &[&h], &["r"], vec![]);
    b.init_f32("fc1.weight", &[3, 8], &layers[1].w32());
    b.init_f32("fc1.bias", &[3], &layers[1].b32());
    b.node(
        "Gemm",
        "/fc1/Gemm",
        &["r", "fc1.weight", "fc1.bias"],
        &["y"],
        vec![attr_float("alpha", 0.5), attr_int("transB", 1)],
    );
    b.output_f32("y", 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_names_node(&msg, "/fc1/Gemm", "Gemm");
    assert!(
        msg.contains("alpha") && msg.contains("supported: alpha = beta = 1"),
        "{msg}"
    );
}

#[test]
fn rejects_a_residual_add() {
    let dir = tmp();
    let layers = random_layers(&[8, 8, 8, 3], &[true, true, true], 36);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[8]);
    let h = gemm_trans_b1(&mut b, 0, "x", &layers[0]);
    b.node("Relu", "/act0/Relu", &[&h], &["r0"], vec![]);
    let y = gemm_trans_b1(&mut b, 1, "r0", &layers[1]);
    b.node("Add", "/res/Add", &[&y, "r0"], &["sum"], vec![]);
    b.node("Relu", "/act1/Relu", &["sum"], &["r1"], vec![]);
    let out = gemm_trans_b1(&mut b, 2, "r1", &layers[2]);
    b.output_f32(&out, 3);
    let msg = load_err(&b.write(dir.path(), "m.onnx"), Format::Float32, false);
    assert_names_node(&msg, "/res/Add", "Add");
    assert!(msg.contains("residual"), "{msg}");
}

/// A ReLU on the output layer is read with the zero floor as one more class: an output row of
/// zeros, the head op `Relu`, and the floor never a label.
#[test]
fn reads_relu_on_the_output_as_a_zero_floor() {
    let dir = tmp();
    let layers = random_layers(&WIDTHS, &[true, true, true], 37);
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, gemm_trans_b1);
    b.node("Relu", "/act_out/Relu", &[&out], &["y"], vec![]);
    b.output_f32("y", 3);
    let net = model::load(&b.write(dir.path(), "m.onnx"), Format::Float32, false).unwrap();
    assert_eq!(net.classes(), 4);
    assert_eq!(net.label_classes(), 3);
    assert_eq!(net.floor_class(), Some(3));
    assert_eq!(net.head, vec![lipfp::onnx::model::HeadOp::Relu]);
    let last = net.layers.last().unwrap();
    assert!(last.w.row(3).iter().all(|v| *v == 0.0) && last.b[3] == 0.0);
    assert_eq!(last.act, lipfp::onnx::model::Activation::Identity);
}

#[test]
fn rejects_a_nan_weight() {
    let dir = tmp();
    let mut layers = random_layers(&WIDTHS, &[true, true, true], 38);
    layers[1].w[5] = f64::NAN;
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[12]);
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        let w = format!("fc{k}.weight");
        // write the NaN without the float32-exactness check
        let w32: Vec<f32> = l.w.iter().map(|&v| v as f32).collect();
        b.init_f32(&w, &[l.m, l.n], &w32);
        let bias = format!("fc{k}.bias");
        b.init_f32(&bias, &[l.m], &l.b32());
        let out = format!("/fc{k}/Gemm_output_0");
        b.node(
            "Gemm",
            &format!("/fc{k}/Gemm"),
            &[x, &w, &bias],
            &[&out],
            vec![attr_int("transB", 1)],
        );
        out
    });
    b.output_f32(&out, 3);
    let path = b.write(dir.path(), "m.onnx");
    for format in [Format::Float32, Format::Float64, Format::Float16] {
        let msg = load_err(&path, format, false);
        assert_names_node(&msg, "/fc1/Gemm", "Gemm");
        assert!(msg.contains("not finite"), "{msg}");
        assert!(msg.contains("fc1.weight"), "{msg}");
    }
}

#[test]
fn rejects_a_missing_file() {
    let dir = tmp();
    let path = dir.path().join("absent.onnx");
    let msg = load_err(&path, Format::Float32, false);
    assert!(msg.contains("not found"), "{msg}");
    assert!(msg.contains("absent.onnx"), "{msg}");
}

#[test]
fn float16_subnormal_weight_is_rejected_only_under_flush_to_zero() {
    let dir = tmp();
    // an all-float16 model (float16 input) with one subnormal weight 2^-24
    let mut layers = random_layers_f16(&[12, 8, 3], 39);
    let tiny = half::f16::from_bits(1).to_f64();
    assert_eq!(tiny, 2f64.powi(-24));
    layers[0].w[7] = tiny;
    let mut b = ModelBuilder::new();
    b.input("x", DataType::Float16, &batched(&[12]));
    let out = chain(&mut b, "x", &layers, |b, k, x, l| {
        let (w, bias) = (format!("fc{k}.weight"), format!("fc{k}.bias"));
        b.init_f16(&w, &[l.m, l.n], &f16s(&l.w));
        b.init_f16(&bias, &[l.m], &f16s(l.b.as_ref().expect("bias")));
        let out = format!("/fc{k}/Gemm_output_0");
        b.node(
            "Gemm",
            &format!("/fc{k}/Gemm"),
            &[x, &w, &bias],
            &[&out],
            vec![attr_int("transB", 1)],
        );
        out
    });
    b.output(&out, DataType::Float16, Some(&batched(&[3])));
    let path = b.write(dir.path(), "subnormal.onnx");

    let msg = load_err(&path, Format::Float16, true);
    assert!(msg.contains("subnormal"), "{msg}");
    assert_names_node(&msg, "/fc0/Gemm", "Gemm");

    let net = model::load(&path, Format::Float16, false).unwrap_or_else(|e| panic!("{e}"));
    check_structure(&net, &[12, 8, 3]);
    check_weights(&net, &layers, |x| x);
    assert_eq!(net.layers[0].w[[0, 7]], tiny);
    // 2^-24 is a normal float32 number: flush-to-zero float32 accepts it
    let net32 = model::load(&path, Format::Float32, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(net32.layers[0].w[[0, 7]], tiny);
}
