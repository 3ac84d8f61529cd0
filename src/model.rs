//! ONNX -> [`DenseNet`]: the chain of dense layers a certificate is about.
//!
//! The loader walks the ONNX protobuf node by node (tract renames ops and merges constants in
//! its own graph, so op types, attributes and initializers are read from the protobuf; see
//! [`crate::onnx`]). It accepts what real exporters emit for dense ReLU classifiers and rejects
//! everything else naming the node, its op type and the supported set. The specification's rules
//! (attribute schemas, one definition per name, tensor storage) are checked first
//! ([`crate::onnx_checks`]); weight and bias values are decoded only once the whole graph has
//! been checked against their declared shapes (`weights`).
//!
//! Every weight and bias is converted to the declared deployment format by round-to-nearest-even:
//! that converted network, read as exact reals, is the network `N` that is certified.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use ndarray::Array2;
use sha2::{Digest, Sha256};

use crate::error::LipfpError;
use crate::format::Format;
use crate::onnx::{self, proto, ConstData, ConstTensor};
use crate::onnx_checks::{self as checks, node_label};

mod shapes;
mod weights;
use weights::{Draft, Part, Weight};

/// The op types the loader understands.
pub const SUPPORTED_OPS: &str = "Gemm, MatMul, Add (bias), Relu, Flatten, Reshape, Shape, Gather, \
Unsqueeze, Squeeze, Concat, Constant, Identity, Cast (to a float type), Dropout (inference)";

/// The op types of [`SUPPORTED_OPS`].
const SUPPORTED_OP_TYPES: [&str; 15] = [
    "Gemm",
    "MatMul",
    "Add",
    "Relu",
    "Flatten",
    "Reshape",
    "Shape",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Constant",
    "Identity",
    "Cast",
    "Dropout",
];

/// Activation applied after a dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `max(0, x)` elementwise.
    Relu,
    /// No activation (the output layer, or a hidden layer without ReLU).
    Identity,
}

/// One dense layer `z = act(W z_prev + b)` with `W` of shape `[m, n]` (outputs x inputs).
#[derive(Clone, Debug)]
pub struct Dense {
    /// Weights in the deployment format, row `i` = output unit `i`.
    pub w: Array2<f64>,
    /// Bias in the deployment format (zeros when the graph has no bias add).
    pub b: Vec<f64>,
    /// Activation after the layer.
    pub act: Activation,
    /// Names (or `op#index` when unnamed) of the ONNX nodes this layer was read from.
    pub nodes: Vec<String>,
    /// Op types of those nodes, in the same order.
    pub ops: Vec<String>,
    /// Narrowing `Cast` nodes applied to the layer's output, in order: each is one more rounding
    /// of the output to that format (docs/soundness.md "Casts").
    pub casts: Vec<Format>,
}

impl Dense {
    /// Input dimension `n_l`.
    pub fn n(&self) -> usize {
        self.w.ncols()
    }
    /// Output dimension `m_l`.
    pub fn m(&self) -> usize {
        self.w.nrows()
    }
}

/// A dense ReLU classifier read from ONNX and converted to a deployment format.
#[derive(Clone, Debug)]
pub struct DenseNet {
    /// The layers, input to output.
    pub layers: Vec<Dense>,
    /// Name of the graph input.
    pub input_name: String,
    /// Per-example input shape declared by the graph (without the batch dimension).
    pub input_shape: Vec<usize>,
    /// Deployment format the weights were converted to.
    pub format: Format,
    /// How many weight and bias entries the conversion to `format` changed.
    pub converted_changed: usize,
    /// Model file the network was read from.
    pub path: PathBuf,
}

impl DenseNet {
    /// Input dimension `n_1`.
    pub fn input_dim(&self) -> usize {
        self.layers[0].n()
    }
    /// Number of classes `m_L`.
    pub fn classes(&self) -> usize {
        self.layers[self.layers.len() - 1].m()
    }
    /// Layer widths `[n_1, m_1, ..., m_L]`.
    pub fn widths(&self) -> Vec<usize> {
        let mut v = vec![self.input_dim()];
        v.extend(self.layers.iter().map(|l| l.m()));
        v
    }

    /// SHA-256 of the converted network: format, widths, activations and every weight's bits.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"lipfp-densenet-v1\0");
        h.update(self.format.name().as_bytes());
        for l in &self.layers {
            h.update((l.m() as u64).to_le_bytes());
            h.update((l.n() as u64).to_le_bytes());
            h.update([matches!(l.act, Activation::Relu) as u8]);
            for x in l.w.iter() {
                h.update(x.to_bits().to_le_bytes());
            }
            for x in &l.b {
                h.update(x.to_bits().to_le_bytes());
            }
            for c in &l.casts {
                h.update(b"cast:");
                h.update(c.name().as_bytes());
            }
        }
        hex(&h.finalize())
    }
}

/// Lowercase hexadecimal of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A symbolic dimension in shape computations.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dim {
    Batch,
    Fixed(usize),
    /// `-1` in a reshape target: inferred from the others.
    Infer,
    /// Any other negative value in a shape computation (invalid as a reshape target).
    Negative(i64),
}

/// Where the activation stands in the chain being built.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    Input,
    /// After a MatMul, waiting for an optional bias Add.
    Product,
    /// After the bias of the last layer.
    Biased,
    /// After the ReLU of the last layer.
    Activated,
}

#[derive(Clone, Debug)]
struct Act {
    /// Full shape including the batch dimension.
    shape: Vec<Dim>,
    stage: Stage,
    /// Chain position: operations that extend the chain require the newest one.
    id: usize,
    /// The element type the graph gives the activation (the graph input's, then each `Cast`'s).
    elem: Format,
    /// Set by a `Cast` to a type that does not hold every deployment-format value (until a
    /// widening cast): a layer fed such an activation would compute in that narrower type.
    narrowed: bool,
}

#[derive(Clone, Debug)]
enum Value<'a> {
    /// An integer constant (shape computations).
    Const(ConstTensor),
    /// A float constant, decoded only when the layers are finished.
    Weight(Weight<'a>),
    /// A 1-D integer tensor (or scalar) computed from the activation's shape.
    Shape {
        dims: Vec<Dim>,
        scalar: bool,
    },
    Act(Act),
    /// Produced by a supported op but unusable downstream (e.g. a Dropout mask).
    Unusable(String),
}

struct Builder<'a> {
    path: &'a Path,
    format: Format,
    ftz: bool,
    opset: i64,
    values: HashMap<String, Value<'a>>,
    layers: Vec<Draft<'a>>,
    chain_id: usize,
    changed: usize,
    /// The element type each layer computes in (its input activation's type), in order.
    compute: Vec<(String, Format)>,
    /// Model narrowing casts relative to `format` and refuse layers computing in a narrower type
    /// (off only when probing which format the layers compute in: casts are then only followed).
    check_compute: bool,
}

/// The format of an ONNX element type code, for the float types lipfp knows.
fn float_format(code: i32) -> Option<Format> {
    match onnx::data_type_name(code).as_str() {
        "float" => Some(Format::Float32),
        "float16" => Some(Format::Float16),
        "double" => Some(Format::Float64),
        "bfloat16" => Some(Format::Bfloat16),
        _ => None,
    }
}

/// The format the network computes in: the element type of every dense layer's input
/// activation (the graph input's type, changed by `Cast` nodes), which ONNX makes the type of the
/// layer's weights too. This is the deployment format when neither the policy nor the command line
/// names one; layers computing in different types are refused as ambiguous (declare the format).
pub fn stored_format(path: &Path) -> Result<Format, LipfpError> {
    let (_, compute) = build(path, Format::Float64, false, false)?;
    let Some((_, first)) = compute.first() else {
        return Err(LipfpError::model(path, "the graph has no dense layer"));
    };
    if let Some((node, other)) = compute.iter().find(|(_, f)| f != first) {
        return Err(LipfpError::model(
            path,
            format!(
                "the layers compute in different formats ({first} at the first layer, {other} at `{node}`); \
                 declare the deployment format (format in the policy, --format) to certify them as one"
            ),
        ));
    }
    Ok(*first)
}

/// Load an ONNX dense ReLU classifier and convert it to `format`. A layer whose input the graph
/// types narrower than `format` (e.g. after a `Cast` to float16 in a float32 network) computes in
/// that narrower type and is refused.
pub fn load(path: &Path, format: Format, ftz: bool) -> Result<DenseNet, LipfpError> {
    build(path, format, ftz, true).map(|(net, _)| net)
}

/// Walk the graph, converting weights to `format`; also returns the element type each layer
/// computes in.
fn build(
    path: &Path,
    format: Format,
    ftz: bool,
    check_compute: bool,
) -> Result<(DenseNet, Vec<(String, Format)>), LipfpError> {
    if !path.exists() {
        return Err(LipfpError::Io {
            path: path.to_path_buf(),
            message: "file not found".into(),
        });
    }
    let model = onnx::read_model_proto(path).map_err(|m| LipfpError::model(path, m))?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| LipfpError::model(path, "the model has no graph"))?;
    let mut b = Builder {
        path,
        format,
        ftz,
        opset: checks::default_opset(path, &model)?,
        values: HashMap::new(),
        layers: Vec::new(),
        chain_id: 0,
        changed: 0,
        compute: Vec::new(),
        check_compute,
    };
    if !graph.sparse_initializer.is_empty() {
        return Err(LipfpError::model(
            path,
            "sparse initializers are not supported",
        ));
    }
    checks::check_names(path, graph)?;
    for init in &graph.initializer {
        let v = weights::tensor_value(init, path.parent())
            .map_err(|m| LipfpError::model(path, format!("initializer `{}`: {m}", init.name)))?;
        b.values.insert(init.name.clone(), v);
    }
    let data_inputs: Vec<&proto::ValueInfoProto> = graph
        .input
        .iter()
        .filter(|i| !b.values.contains_key(&i.name))
        .collect();
    let Some(&input) = data_inputs.first() else {
        return Err(LipfpError::model(
            path,
            "the graph has no non-constant input",
        ));
    };
    // further non-constant inputs are an error only where a node uses them as weights
    for other in &data_inputs[1..] {
        b.values.insert(
            other.name.clone(),
            Value::Unusable(format!(
                "`{}` is a graph input without initializer (non-constant weights are not supported; \
                 the data input is `{}`)",
                other.name, input.name
            )),
        );
    }
    let (input_shape, elem) = read_input_shape(path, input)?;
    let mut full = vec![Dim::Batch];
    full.extend(input_shape.iter().map(|&d| Dim::Fixed(d)));
    b.values.insert(
        input.name.clone(),
        Value::Act(Act {
            shape: full,
            stage: Stage::Input,
            id: 0,
            elem,
            narrowed: false,
        }),
    );

    let function_names: HashSet<(&str, &str)> = model
        .functions
        .iter()
        .map(|f| {
            (
                f.domain.as_deref().unwrap_or(""),
                f.name.as_deref().unwrap_or(""),
            )
        })
        .collect();

    for (index, node) in graph.node.iter().enumerate() {
        let label = node_label(node, index);
        if function_names.contains(&(node.domain.as_str(), node.op_type.as_str())) {
            return Err(LipfpError::unsupported(
                path,
                &label,
                &node.op_type,
                "model-local functions are not supported; export with functions inlined",
            ));
        }
        if !node.domain.is_empty() && node.domain != "ai.onnx" {
            return Err(LipfpError::unsupported(
                path,
                &label,
                &format!("{}:{}", node.domain, node.op_type),
                "only the default ONNX domain is supported",
            ));
        }
        checks::check_node(path, &label, node, b.opset)?;
        b.node(node, &label)?;
    }

    if graph.output.len() != 1 {
        return Err(LipfpError::model(
            path,
            format!(
                "expected exactly one graph output, found {}",
                graph.output.len()
            ),
        ));
    }
    let out_name = &graph.output[0].name;
    let out = match b.values.get(out_name) {
        Some(Value::Act(a)) => a.clone(),
        Some(_) => {
            return Err(LipfpError::model(
                path,
                format!("graph output `{out_name}` does not depend on the input"),
            ))
        }
        None => {
            return Err(LipfpError::model(
                path,
                format!("graph output `{out_name}` is not produced by any node"),
            ))
        }
    };
    if out.id != b.chain_id {
        return Err(LipfpError::model(
            path,
            "graph output is not the end of the layer chain",
        ));
    }
    match out.stage {
        Stage::Input => return Err(LipfpError::model(path, "the graph has no dense layer")),
        Stage::Activated => {
            let relu = b
                .layers
                .last()
                .and_then(|l| l.nodes.last().cloned())
                .unwrap_or_default();
            return Err(LipfpError::Model {
                path: path.to_path_buf(),
                node: Some((relu, "Relu".into())),
                message:
                    "the output layer has a ReLU; the certificate needs an identity output (logits)"
                        .into(),
            });
        }
        Stage::Product | Stage::Biased => {}
    }
    let features: Vec<usize> = out.shape[1..]
        .iter()
        .map(|d| match d {
            Dim::Fixed(k) => *k,
            _ => 0,
        })
        .collect();
    if features.iter().filter(|&&k| k != 1).count() > 1 {
        return Err(LipfpError::model(
            path,
            format!("graph output must be [batch, classes], got per-example shape {features:?}"),
        ));
    }
    let classes = b.layers.last().map(|l| l.m).unwrap_or(0);
    if classes < 2 {
        return Err(LipfpError::model(
            path,
            "a classifier needs at least two output classes",
        ));
    }
    let net = DenseNet {
        layers: b.finish()?,
        input_name: input.name.clone(),
        input_shape,
        format,
        converted_changed: b.changed,
        path: path.to_path_buf(),
    };
    Ok((net, b.compute))
}

/// The graph input's per-example shape and element type.
fn read_input_shape(
    path: &Path,
    input: &proto::ValueInfoProto,
) -> Result<(Vec<usize>, Format), LipfpError> {
    use proto::tensor_shape_proto::dimension::Value as DimValue;
    use proto::type_proto::Value as TypeValue;
    let err = |m: String| LipfpError::model(path, format!("graph input `{}`: {m}", input.name));
    let Some(TypeValue::TensorType(tt)) = input.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(err("is not a tensor".into()));
    };
    let Some(elem) = float_format(tt.elem_type).filter(|f| *f != Format::Bfloat16) else {
        let name = onnx::data_type_name(tt.elem_type);
        return Err(err(format!("element type {name} is not a float type")));
    };
    let shape = tt
        .shape
        .as_ref()
        .ok_or_else(|| err("has no declared shape".into()))?;
    if shape.dim.len() < 2 {
        return Err(err(format!(
            "must be [batch, features...], declared rank is {}",
            shape.dim.len()
        )));
    }
    let dims = shape.dim[1..]
        .iter()
        .enumerate()
        .map(|(k, d)| match &d.value {
            Some(DimValue::DimValue(v)) if *v > 0 => Ok(*v as usize),
            other => Err(err(format!(
                "dimension {} must be a fixed positive size, found {other:?}",
                k + 1
            ))),
        })
        .collect::<Result<Vec<usize>, LipfpError>>()?;
    Ok((dims, elem))
}

impl<'a> Builder<'a> {
    fn get(&self, name: &str, label: &str, op: &str) -> Result<&Value<'a>, LipfpError> {
        match self.values.get(name) {
            Some(Value::Unusable(why)) => Err(self.fail(label, op, format!("input `{name}` cannot be used: {why}"))),
            Some(v) => Ok(v),
            None => Err(self.fail(
                label,
                op,
                format!("input `{name}` is not produced by any earlier node, initializer or graph input"),
            )),
        }
    }

    fn set(&mut self, node: &proto::NodeProto, v: Value<'a>) {
        if let Some(o) = node.output.first() {
            self.values.insert(o.clone(), v);
        }
    }

    fn fail(&self, label: &str, op: &str, why: impl Into<String>) -> LipfpError {
        LipfpError::at_node(self.path, label, op, why)
    }

    /// An INT attribute of `node` (`default` when absent; another type is an error).
    fn int_attr(
        &self,
        node: &proto::NodeProto,
        label: &str,
        name: &str,
        default: i64,
    ) -> Result<i64, LipfpError> {
        checks::attr_int(node, name)
            .map(|v| v.unwrap_or(default))
            .map_err(|m| self.fail(label, &node.op_type, m))
    }

    fn node(&mut self, node: &'a proto::NodeProto, label: &str) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let inputs: Vec<&str> = node.input.iter().map(|s| s.as_str()).collect();
        // every op below reads its leading inputs by position: check they are there
        let required = match op {
            "Constant" => 0,
            "Identity" | "Cast" | "Dropout" | "Flatten" | "Shape" | "Unsqueeze" | "Squeeze"
            | "Relu" | "Concat" => 1,
            _ => 2,
        };
        if let Some(k) = (0..required).find(|&k| inputs.get(k).is_none_or(|s| s.is_empty())) {
            if SUPPORTED_OP_TYPES.contains(&op) {
                return Err(self.fail(label, op, format!("input {k} is missing")));
            }
        }
        match op {
            "Constant" => {
                let v = constant_value(node, self.path.parent())
                    .map_err(|m| self.fail(label, op, m))?;
                self.set(node, v);
            }
            "Identity" => {
                let v = self.get(inputs[0], label, op)?.clone();
                self.set(node, v);
            }
            "Cast" => {
                let to = checks::cast_to(node).map_err(|m| self.fail(label, op, m))?;
                let to_name = onnx::data_type_name(to);
                let v = match self.get(inputs[0], label, op)?.clone() {
                    Value::Act(a) => self.cast_activation(a, &to_name, label)?,
                    other => cast_const(other, &to_name).map_err(|m| self.fail(label, op, m))?,
                };
                self.set(node, v);
            }
            "Dropout" => {
                if let Some(name) = inputs.get(2).filter(|s| !s.is_empty()) {
                    match self.get(name, label, op)? {
                        Value::Const(ConstTensor {
                            data: ConstData::Int(v),
                            ..
                        }) if v.iter().all(|&x| x == 0) => {}
                        _ => {
                            return Err(self.fail(
                                label,
                                op,
                                "training_mode must be a constant false",
                            ))
                        }
                    }
                }
                let v = self.get(inputs[0], label, op)?.clone();
                self.set(node, v);
                if let Some(mask) = node.output.get(1).filter(|s| !s.is_empty()) {
                    self.values
                        .insert(mask.clone(), Value::Unusable("it is a Dropout mask".into()));
                }
            }
            "Flatten" => {
                let a = self.act(inputs[0], label, op)?;
                let axis = self.int_attr(node, label, "axis", 1)?;
                if checks::normalize_axis(axis, a.shape.len(), true) != Ok(1) {
                    return Err(self.fail(
                        label,
                        op,
                        format!("axis = {axis}; only axis = 1 keeps the batch dimension"),
                    ));
                }
                let d = fixed_product(&a.shape[1..])
                    .ok_or_else(|| self.fail(label, op, "feature dimensions are not fixed"))?;
                self.set(
                    node,
                    Value::Act(Act {
                        shape: vec![Dim::Batch, Dim::Fixed(d)],
                        ..a
                    }),
                );
            }
            "Reshape" => self.reshape(node, label, &inputs)?,
            "Shape" => {
                let a = self.act(inputs[0], label, op)?;
                let rank = a.shape.len() as i64;
                let norm = |x: i64| {
                    if x < 0 {
                        (x + rank).clamp(0, rank)
                    } else {
                        x.clamp(0, rank)
                    }
                };
                let start = norm(self.int_attr(node, label, "start", 0)?) as usize;
                let end = norm(self.int_attr(node, label, "end", rank)?) as usize;
                let dims = a.shape[start..end.max(start)].to_vec();
                self.set(
                    node,
                    Value::Shape {
                        dims,
                        scalar: false,
                    },
                );
            }
            "Gather" => self.gather(node, label, &inputs)?,
            "Unsqueeze" | "Squeeze" => self.squeeze(node, label, &inputs)?,
            "Concat" => self.concat(node, label, &inputs)?,
            "Gemm" => self.gemm(node, label, &inputs)?,
            "MatMul" => {
                let a = self.act(inputs[0], label, op)?;
                let w = self.weight(inputs[1], label, op, "weight")?;
                if w.shape.len() != 2 {
                    return Err(self.fail(
                        label,
                        op,
                        format!("weight must be 2-D, got shape {:?}", w.shape),
                    ));
                }
                // MatMul(x, B) with B stored [n, m]
                let w = part(w, inputs[1], label, op);
                let out = self.push_dense(a, w, true, None, label, op)?;
                self.set(node, out);
            }
            "Add" => self.add(node, label, &inputs)?,
            "Relu" => {
                let a = self.act(inputs[0], label, op)?;
                self.require_head(&a, label, op)?;
                match a.stage {
                    Stage::Input => {
                        return Err(self.fail(
                            label,
                            op,
                            "ReLU on the network input is not supported",
                        ))
                    }
                    Stage::Product | Stage::Biased => {
                        let last = self
                            .layers
                            .last_mut()
                            .expect("a stage after Input has a layer");
                        last.act = Activation::Relu;
                        last.nodes.push(label.to_string());
                        last.ops.push(op.to_string());
                    }
                    Stage::Activated => {}
                }
                self.chain_id += 1;
                self.set(
                    node,
                    Value::Act(Act {
                        stage: Stage::Activated,
                        id: self.chain_id,
                        ..a
                    }),
                );
            }
            _ => {
                return Err(LipfpError::unsupported(
                    self.path,
                    label,
                    op,
                    "this op is not part of a dense ReLU classifier",
                ))
            }
        }
        Ok(())
    }

    /// A `Cast` of the activation to `to`: pass-through when `to` holds every value of the
    /// deployment format (a widening cast is exact); otherwise a rounding the runtime performs,
    /// recorded on the layer whose output it rounds (a later layer must see the activation
    /// widened back, see `push_dense`). A narrowing cast of the network input or between a MatMul
    /// and its bias is refused.
    fn cast_activation(
        &mut self,
        a: Act,
        to_name: &str,
        label: &str,
    ) -> Result<Value<'a>, LipfpError> {
        let op = "Cast";
        let to = match to_name {
            "float" => Format::Float32,
            "float16" => Format::Float16,
            "double" => Format::Float64,
            "bfloat16" => Format::Bfloat16,
            _ => return Err(self.fail(label, op, format!("cast of the activation to {to_name}; only casts between float types are accepted"))),
        };
        let narrowed = self.check_compute && !to.contains(self.format);
        let a = Act {
            elem: to,
            narrowed,
            ..a
        };
        if !narrowed {
            return Ok(Value::Act(a));
        }
        self.require_head(&a, label, op)?;
        match a.stage {
            Stage::Input => Err(self.fail(label, op, format!(
                "a narrowing cast of the network input to {to} is not modelled; certify in the format the layers compute in (--format {to}) or remove the cast"
            ))),
            Stage::Product => Err(self.fail(label, op, format!(
                "a narrowing cast to {to} between a MatMul and its bias Add is not modelled"
            ))),
            Stage::Biased | Stage::Activated => {
                let layer = self.layers.last_mut().expect("a biased activation follows a layer");
                layer.casts.push(to);
                layer.nodes.push(label.to_string());
                layer.ops.push(op.to_string());
                Ok(Value::Act(a))
            }
        }
    }

    fn act(&self, name: &str, label: &str, op: &str) -> Result<Act, LipfpError> {
        match self.get(name, label, op)? {
            Value::Act(a) => Ok(a.clone()),
            _ => Err(self.fail(
                label,
                op,
                format!("input `{name}` must be the activation, found a constant"),
            )),
        }
    }

    fn weight(
        &self,
        name: &str,
        label: &str,
        op: &str,
        what: &str,
    ) -> Result<Weight<'a>, LipfpError> {
        match self.get(name, label, op)? {
            Value::Weight(w) => Ok(w.clone()),
            Value::Const(_) => {
                Err(self.fail(label, op, format!("{what} `{name}` has an integer type")))
            }
            Value::Act(_) => Err(self.fail(
                label,
                op,
                format!("{what} `{name}` is not constant (non-constant weights are not supported)"),
            )),
            _ => Err(self.fail(
                label,
                op,
                format!("{what} `{name}` is not a tensor of weights"),
            )),
        }
    }

    fn require_head(&self, a: &Act, label: &str, op: &str) -> Result<(), LipfpError> {
        if a.id != self.chain_id {
            return Err(self.fail(
                label,
                op,
                "the graph branches (an earlier activation is reused); only a single chain of layers is supported",
            ));
        }
        Ok(())
    }

    /// Convert a weight or bias value to the deployment format, rejecting non-finite and (under
    /// flush-to-zero) subnormal values.
    fn convert(
        &mut self,
        v: f64,
        tensor: &str,
        index: usize,
        label: &str,
        op: &str,
    ) -> Result<f64, LipfpError> {
        if !v.is_finite() {
            return Err(self.fail(
                label,
                op,
                format!("`{tensor}`[{index}] is not finite ({v})"),
            ));
        }
        let c = self.format.round(v);
        if !c.is_finite() {
            return Err(self.fail(
                label,
                op,
                format!("`{tensor}`[{index}] = {v:e} overflows {}", self.format),
            ));
        }
        if self.ftz && self.format.is_subnormal(c) {
            return Err(self.fail(
                label,
                op,
                format!(
                    "`{tensor}`[{index}] = {c:e} is subnormal in {}; flush-to-zero certification requires normal or zero weights",
                    self.format
                ),
            ));
        }
        if c != v {
            self.changed += 1;
        }
        Ok(c)
    }

    /// A dense layer reading the activation `a` through the weight `w`, stored `[m, n]` or
    /// (`transposed`) `[n, m]`; its values are read once the whole graph is checked.
    fn push_dense(
        &mut self,
        a: Act,
        w: Part<'a>,
        transposed: bool,
        bias: Option<Part<'a>>,
        label: &str,
        op: &str,
    ) -> Result<Value<'a>, LipfpError> {
        self.require_head(&a, label, op)?;
        if self.check_compute && a.narrowed {
            return Err(self.fail(
                label,
                op,
                format!(
                    "this layer computes in {} (its input is cast to {} earlier in the graph) but the deployment format is {}; \
                     certify as {} or cast the activation back before this layer",
                    a.elem, a.elem, self.format, a.elem
                ),
            ));
        }
        self.compute.push((label.to_string(), a.elem));
        let dims = &w.weight.shape;
        let (m, n) = if transposed {
            (dims[1], dims[0])
        } else {
            (dims[0], dims[1])
        };
        let feat = a.shape.last().copied();
        let leading_ok = a.shape.len() >= 2
            && a.shape[1..a.shape.len() - 1]
                .iter()
                .all(|d| *d == Dim::Fixed(1));
        if feat != Some(Dim::Fixed(n)) || !leading_ok {
            return Err(self.fail(
                label,
                op,
                format!(
                    "activation shape {} does not match weight `{}` of dims {dims:?} (input dimension {n})",
                    show_shape(&a.shape),
                    w.name
                ),
            ));
        }
        let stage = if bias.is_some() {
            Stage::Biased
        } else {
            Stage::Product
        };
        self.layers.push(Draft {
            m,
            n,
            w,
            transposed,
            b: bias,
            act: Activation::Identity,
            nodes: vec![label.to_string()],
            ops: vec![op.to_string()],
            casts: Vec::new(),
        });
        self.chain_id += 1;
        let mut shape = a.shape.clone();
        *shape.last_mut().expect("rank >= 2") = Dim::Fixed(m);
        Ok(Value::Act(Act {
            shape,
            stage,
            id: self.chain_id,
            elem: a.elem,
            narrowed: false,
        }))
    }

    fn gemm(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Gemm";
        let float = |name, default| {
            checks::attr_float(node, name)
                .map(|v| v.unwrap_or(default))
                .map_err(|m| self.fail(label, op, m))
        };
        let (alpha, beta) = (float("alpha", 1.0)?, float("beta", 1.0)?);
        let trans_a = self.int_attr(node, label, "transA", 0)?;
        // any nonzero transB transposes B (the specification; onnxruntime agrees)
        let trans_b = self.int_attr(node, label, "transB", 0)? != 0;
        let has_c = inputs.get(2).is_some_and(|s| !s.is_empty());
        if alpha != 1.0 || (has_c && beta != 1.0) || trans_a != 0 {
            return Err(self.fail(
                label,
                op,
                format!("alpha = {alpha}, beta = {beta}, transA = {trans_a}; supported: alpha = beta = 1, transA = 0"),
            ));
        }
        let a = self.act(inputs[0], label, op)?;
        if a.shape.len() != 2 {
            return Err(self.fail(
                label,
                op,
                format!(
                    "input must be 2-D [batch, features], got {}",
                    show_shape(&a.shape)
                ),
            ));
        }
        let w = self.weight(inputs[1], label, op, "weight")?;
        if w.shape.len() != 2 {
            return Err(self.fail(
                label,
                op,
                format!("weight must be 2-D, got shape {:?}", w.shape),
            ));
        }
        // W is [m, n]: B itself when transB is set, else B^T
        let m = w.shape[usize::from(!trans_b)];
        let bias = if has_c {
            let c = self.weight(inputs[2], label, op, "bias")?;
            self.check_bias(&c, m, 2, inputs[2], label, op)?;
            Some(part(c, inputs[2], label, op))
        } else {
            None
        };
        // a Gemm without C leaves the layer at the Product stage: a following Add is its bias
        let w = part(w, inputs[1], label, op);
        let out = self.push_dense(a, w, !trans_b, bias, label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// A bias of `m` values (shape `[m]`, `[1, m]`, ... of rank at most `rank`) or of one value.
    fn check_bias(
        &self,
        c: &Weight<'_>,
        m: usize,
        rank: usize,
        name: &str,
        label: &str,
        op: &str,
    ) -> Result<(), LipfpError> {
        let leading_ones = c.shape.iter().rev().skip(1).all(|&d| d == 1);
        let count: usize = c.shape.iter().product();
        let fits =
            c.shape.len() <= rank && (count == 1 || (leading_ones && c.shape.last() == Some(&m)));
        if !fits {
            return Err(self.fail(
                label,
                op,
                format!(
                    "bias `{name}` of shape {:?} does not broadcast to [{m}]",
                    c.shape
                ),
            ));
        }
        Ok(())
    }

    fn add(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Add";
        let x = self.get(inputs[0], label, op)?.clone();
        let y = self.get(inputs[1], label, op)?.clone();
        let (a, c, c_name) = match (x, y) {
            (Value::Act(a), Value::Weight(c)) => (a, c, inputs[1]),
            (Value::Weight(c), Value::Act(a)) => (a, c, inputs[0]),
            (Value::Act(_), Value::Act(_)) => {
                return Err(self.fail(
                    label,
                    op,
                    "adds two activations (residual connections are not supported)",
                ))
            }
            (Value::Act(_), Value::Const(_)) => {
                return Err(self.fail(
                    label,
                    op,
                    format!("bias `{}` has an integer type", inputs[1]),
                ))
            }
            (Value::Const(_), Value::Act(_)) => {
                return Err(self.fail(
                    label,
                    op,
                    format!("bias `{}` has an integer type", inputs[0]),
                ))
            }
            _ => {
                return Err(self.fail(label, op, "only a bias add on the activation is supported"))
            }
        };
        self.require_head(&a, label, op)?;
        if a.stage != Stage::Product {
            return Err(self.fail(
                label,
                op,
                "a constant add is supported only as the bias directly after a MatMul without bias",
            ));
        }
        let m = self.layers.last().map(|l| l.m).unwrap_or(0);
        self.check_bias(&c, m, a.shape.len(), c_name, label, op)?;
        let last = self.layers.last_mut().expect("Product stage has a layer");
        last.b = Some(part(c, c_name, label, op));
        last.nodes.push(label.to_string());
        last.ops.push(op.to_string());
        self.chain_id += 1;
        self.set(
            node,
            Value::Act(Act {
                stage: Stage::Biased,
                id: self.chain_id,
                ..a
            }),
        );
        Ok(())
    }

    fn reshape(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Reshape";
        if inputs.len() != 2 {
            return Err(self.fail(label, op, "needs two inputs"));
        }
        let a = self.act(inputs[0], label, op)?;
        let allow_zero = match self.int_attr(node, label, "allowzero", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(self.fail(
                    label,
                    op,
                    format!("allowzero = {v}; the specification defines 0 and 1"),
                ))
            }
        };
        let target: Vec<Dim> = match self.get(inputs[1], label, op)? {
            Value::Const(ConstTensor {
                data: ConstData::Int(v),
                ..
            }) => v.iter().map(|&x| shape_const_dim(x)).collect(),
            Value::Shape { dims, .. } => dims.clone(),
            _ => {
                return Err(self.fail(
                    label,
                    op,
                    "target shape must be a constant or computed from the input's shape",
                ))
            }
        };
        let features = fixed_product(&a.shape[1..])
            .ok_or_else(|| self.fail(label, op, "feature dimensions are not fixed"))?;
        // resolve 0 (copy the input dimension unless allowzero) and check the batch dimension stays first
        let mut dims = Vec::with_capacity(target.len());
        // None marks the inferred dimension
        for (k, t) in target.iter().enumerate() {
            let d = match t {
                Dim::Fixed(0) if !allow_zero => Some(*a.shape.get(k).ok_or_else(|| {
                    self.fail(
                        label,
                        op,
                        format!(
                            "target dimension {k} is 0 but the input has rank {}",
                            a.shape.len()
                        ),
                    )
                })?),
                Dim::Fixed(0) => {
                    return Err(self.fail(
                        label,
                        op,
                        "a zero-sized target dimension (allowzero = 1) is not supported",
                    ))
                }
                Dim::Negative(x) => {
                    return Err(self.fail(
                        label,
                        op,
                        format!("target dimension {x}: the only negative value allowed is -1"),
                    ))
                }
                Dim::Infer => None,
                other => Some(*other),
            };
            dims.push(d);
        }
        if dims.is_empty() {
            return Err(self.fail(label, op, "empty target shape"));
        }
        // the first dimension is the batch: symbolic, inferred, or a fixed batch size baked in by the exporter
        let rest = &dims[1..];
        let inferred = rest.iter().filter(|d| d.is_none()).count();
        let known: Option<usize> = rest
            .iter()
            .filter_map(|d| *d)
            .map(|d| match d {
                Dim::Fixed(x) => Some(x),
                _ => None,
            })
            .try_fold(1usize, |acc, x| x.map(|x| acc.saturating_mul(x)));
        let Some(known) = known else {
            return Err(self.fail(label, op, "the batch dimension must stay first"));
        };
        let mut shape = vec![Dim::Batch];
        match inferred {
            0 if known == features => {}
            1 if known > 0 && features % known == 0 => {}
            0 if dims[0].is_none() || dims[0] == Some(Dim::Batch) => {
                return Err(self.fail(label, op, format!("target shape keeps {known} of {features} features")))
            }
            _ => {
                return Err(self.fail(
                    label,
                    op,
                    format!("target shape does not keep the batch first and the {features} features after it"),
                ))
            }
        }
        for d in rest {
            shape.push(match d {
                Some(d) => *d,
                None => Dim::Fixed(features / known),
            });
        }
        self.set(node, Value::Act(Act { shape, ..a }));
        Ok(())
    }

    fn gather(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Gather";
        let axis = self.int_attr(node, label, "axis", 0)?;
        if checks::normalize_axis(axis, 1, false) != Ok(0) {
            return Err(self.fail(
                label,
                op,
                format!("axis = {axis}; only Gather on axis 0 of a shape is supported"),
            ));
        }
        let dims = match self.get(inputs[0], label, op)? {
            Value::Shape {
                dims,
                scalar: false,
            } => dims.clone(),
            _ => return Err(self.fail(label, op, "only gathering from a Shape is supported")),
        };
        let (idx, scalar) = match self.get(inputs[1], label, op)? {
            Value::Const(ConstTensor {
                shape,
                data: ConstData::Int(v),
            }) if shape.len() <= 1 => (v.clone(), shape.is_empty()),
            _ => {
                return Err(self.fail(
                    label,
                    op,
                    "indices must be a scalar or 1-D integer constant",
                ))
            }
        };
        let mut out = Vec::with_capacity(idx.len());
        for i in idx {
            let k = if i < 0 { i + dims.len() as i64 } else { i };
            let d = usize::try_from(k)
                .ok()
                .and_then(|k| dims.get(k))
                .ok_or_else(|| self.fail(label, op, format!("index {i} out of range")))?;
            out.push(*d);
        }
        self.set(node, Value::Shape { dims: out, scalar });
        Ok(())
    }
}

/// A constant entry of a shape computation.
fn shape_const_dim(x: i64) -> Dim {
    match x {
        -1 => Dim::Infer,
        x if x < 0 => Dim::Negative(x),
        x => Dim::Fixed(x as usize),
    }
}

fn show_shape(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape
        .iter()
        .map(|d| match d {
            Dim::Batch => "batch".to_string(),
            Dim::Fixed(x) => x.to_string(),
            Dim::Infer => "-1".to_string(),
            Dim::Negative(x) => x.to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

fn fixed_product(dims: &[Dim]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, d| match d {
        Dim::Fixed(x) => acc.checked_mul(*x),
        _ => None,
    })
}

/// A tensor feeding a layer, read through node `label`.
fn part<'a>(weight: Weight<'a>, name: &str, label: &str, op: &str) -> Part<'a> {
    Part {
        weight,
        name: name.to_string(),
        label: label.to_string(),
        op: op.to_string(),
    }
}

fn constant_value<'a>(node: &'a proto::NodeProto, dir: Option<&Path>) -> Result<Value<'a>, String> {
    // the schema check admits only the value attributes; the specification wants exactly one
    let [a] = &node.attribute[..] else {
        let names: Vec<&str> = node.attribute.iter().map(|a| a.name.as_str()).collect();
        return Err(format!(
            "a Constant needs exactly one value attribute, found {names:?}"
        ));
    };
    let int = |shape, v| {
        Ok(Value::Const(ConstTensor {
            shape,
            data: ConstData::Int(v),
        }))
    };
    match a.name.as_str() {
        "value" => weights::tensor_value(
            a.t.as_ref().ok_or("attribute `value` holds no tensor")?,
            dir,
        ),
        "value_float" => Ok(Value::Weight(Weight::values(vec![], vec![a.f as f64]))),
        "value_floats" => Ok(Value::Weight(Weight::values(
            vec![a.floats.len()],
            a.floats.iter().map(|&x| x as f64).collect(),
        ))),
        "value_int" => int(vec![], vec![a.i]),
        "value_ints" => int(vec![a.ints.len()], a.ints.clone()),
        other => Err(format!("a Constant given by `{other}` is not supported")),
    }
}

/// A `Cast` of a constant to the element type `to`: a float-to-float cast rounds to the
/// target type, as the runtime does; an integer constant cast to a float type becomes a float
/// constant (rounded likewise).
fn cast_const<'a>(v: Value<'a>, to: &str) -> Result<Value<'a>, String> {
    let target = match to {
        "float" => Some(Format::Float32),
        "float16" => Some(Format::Float16),
        "double" => Some(Format::Float64),
        "bfloat16" => Some(Format::Bfloat16),
        _ => None,
    };
    match (v, target) {
        (Value::Weight(w), Some(f)) => Ok(Value::Weight(w.round_to(f))),
        (Value::Const(c), Some(f)) => {
            let ConstData::Int(ints) = c.data else {
                return Err("a float constant stored as an integer tensor".into());
            };
            let vals = ints.into_iter().map(|x| x as f64).collect();
            Ok(Value::Weight(Weight::values(c.shape, vals).round_to(f)))
        }
        (Value::Weight(_), None) => {
            Err(format!("cast of a float constant to {to} is not supported"))
        }
        (other, _) => Ok(other),
    }
}
