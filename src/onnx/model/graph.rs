//! The walk over one ONNX graph: the protobuf is read and checked against the specification,
//! the value table is seeded with the graph input and the initializers, every node is handed to
//! its op family in order, and the graph output must be the end of the chain of layers (the
//! logits).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::builder::{Act, Builder, Stage, Value};
use super::network::DenseNet;
use super::ops::{op_def, OpDef};
use super::pass_through::float_format;
use super::shapes::Dim;
use super::weights::DraftKind;
use crate::arith::format::Format;
use crate::error::LipfpError;
use crate::onnx::checks::{self, node_label};
use crate::onnx::reader::{self as onnx, proto};

/// Walk the graph of the model at `path`, converting weights to `format`; also returns the
/// element type each layer computes in.
pub(super) fn build(
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
    build_model(path, &model, format, ftz, check_compute)
}

/// [`build`] for a model already read from `path`.
fn build_model(
    path: &Path,
    model: &proto::ModelProto,
    format: Format,
    ftz: bool,
    check_compute: bool,
) -> Result<(DenseNet, Vec<(String, Format)>), LipfpError> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| LipfpError::model(path, "the model has no graph"))?;
    let opset = checks::default_opset(path, model)?;
    if !graph.sparse_initializer.is_empty() {
        return Err(LipfpError::model(
            path,
            "sparse initializers are not supported",
        ));
    }
    checks::check_names(path, graph)?;
    let mut b = Builder {
        path,
        graph,
        format,
        ftz,
        opset,
        data_input: String::new(),
        values: HashMap::new(),
        layers: Vec::new(),
        chain_id: 0,
        changed: 0,
        compute: Vec::new(),
        head: Vec::new(),
        check_compute,
    };
    b.initializers()?;
    let input_shape = b.data_input_value()?;
    b.walk(model)?;
    b.check_output()?;
    let mut head = std::mem::take(&mut b.head);
    head.sort();
    head.dedup();
    let mut net = DenseNet {
        layers: b.finish()?,
        input_name: b.data_input.clone(),
        input_shape,
        head,
        format,
        converted_changed: b.changed,
        path: path.to_path_buf(),
    };
    net.read_relu_output();
    Ok((net, b.compute))
}

impl<'a> Builder<'a> {
    /// Seed the value table with the graph's data input (the first graph input without an
    /// initializer) as the activation; further inputs without initializers are usable nowhere.
    /// Returns the data input's per-example shape.
    fn data_input_value(&mut self) -> Result<Vec<usize>, LipfpError> {
        let data_inputs: Vec<&proto::ValueInfoProto> = self
            .graph
            .input
            .iter()
            .filter(|i| !self.values.contains_key(&i.name))
            .collect();
        let Some(&input) = data_inputs.first() else {
            return Err(LipfpError::model(
                self.path,
                "the graph has no non-constant input",
            ));
        };
        // further non-constant inputs are an error only where a node uses them as weights
        for other in &data_inputs[1..] {
            self.values.insert(
                other.name.clone(),
                Value::Unusable(format!(
                    "`{}` is a graph input without initializer (non-constant weights are not supported; \
                     the data input is `{}`); export the model with its parameters as initializers \
                     (torch.onnx.export's export_params=True, the default)",
                    other.name, input.name
                )),
            );
        }
        let (input_shape, elem) = read_input_shape(self.path, input)?;
        let mut full = vec![Dim::Batch];
        full.extend(input_shape.iter().map(|&d| Dim::Fixed(d)));
        self.data_input = input.name.clone();
        self.values.insert(
            input.name.clone(),
            Value::Act(Act {
                shape: full,
                stage: Stage::Input,
                id: 0,
                elem,
                narrowed: false,
            }),
        );
        Ok(input_shape)
    }

    /// Visit the nodes in order: calls of model-local functions and ops of other domains are
    /// refused, the others are checked against their schema and handed to their op family.
    fn walk(&mut self, model: &proto::ModelProto) -> Result<(), LipfpError> {
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
        let graph = self.graph;
        for (index, node) in graph.node.iter().enumerate() {
            let label = node_label(node, index);
            if function_names.contains(&(node.domain.as_str(), node.op_type.as_str())) {
                return Err(self.refuse_function_call(node, &label));
            }
            let Some(def) = op_def(&node.domain, &node.op_type) else {
                return Err(self.refuse_unread(node, &label));
            };
            self.node(def, node, &label)?;
        }
        Ok(())
    }

    /// The refusal of `node`, whose op lipfp does not read: an op of the default domain on a
    /// head's output is refused as what may follow a head; any other with its op's reason.
    fn refuse_unread(&mut self, node: &'a proto::NodeProto, label: &str) -> LipfpError {
        let inputs: Vec<&str> = node.input.iter().map(|s| s.as_str()).collect();
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        if default_domain && self.reads_head(&inputs) {
            if let Err(e) = self.head_pass_through(node, label, &inputs) {
                return e;
            }
        }
        self.refuse(node, label)
    }

    /// Check `node` against its op's schema and hand it to the op's reader (a head's input
    /// passes through the ops that may follow a head).
    fn node(
        &mut self,
        def: &OpDef,
        node: &'a proto::NodeProto,
        label: &str,
    ) -> Result<(), LipfpError> {
        let inputs: Vec<&str> = node.input.iter().map(|s| s.as_str()).collect();
        let Some(schema) = def.schema else {
            return (def.read)(self, node, label, &inputs);
        };
        checks::check_node(self.path, label, node, (&schema(self.opset), self.opset))?;
        // every reader takes its leading inputs by position: check they are there
        if let Some(k) = (0..def.inputs_read).find(|&k| inputs.get(k).is_none_or(|s| s.is_empty()))
        {
            return Err(self.fail(label, def.name, format!("input {k} is missing")));
        }
        if self.reads_head(&inputs) {
            return self.head_pass_through(node, label, &inputs);
        }
        (def.read)(self, node, label, &inputs)
    }

    /// Every graph output is the end of the chain of layers — logits of at least two classes
    /// after a dense layer without ReLU — or a classifier head's output computed from them.
    fn check_output(&self) -> Result<(), LipfpError> {
        let outputs = &self.graph.output;
        if outputs.is_empty() {
            return Err(self.refuse_outputs());
        }
        let mut logits = None;
        for output in outputs {
            let out_name = &output.name;
            let from = match self.values.get(out_name) {
                Some(Value::Act(a)) => {
                    logits = Some(a);
                    a.id
                }
                Some(Value::Head(h)) => h.from,
                Some(_) => {
                    return Err(LipfpError::model(
                        self.path,
                        format!("graph output `{out_name}` does not depend on the input"),
                    ))
                }
                None => {
                    return Err(LipfpError::model(
                        self.path,
                        format!("graph output `{out_name}` is not produced by any node"),
                    ))
                }
            };
            if from != self.chain_id {
                return Err(if outputs.len() > 1 {
                    self.refuse_outputs()
                } else {
                    LipfpError::model(self.path, "graph output is not the end of the layer chain")
                });
            }
        }
        let Some(out) = logits.or_else(|| self.chain_end()) else {
            return Err(LipfpError::model(self.path, "the graph has no dense layer"));
        };
        if let Some(step) = self
            .layers
            .last()
            .filter(|l| matches!(l.kind, DraftKind::Affine(_)))
        {
            return Err(LipfpError::model(
                self.path,
                format!(
                    "the graph ends with the elementwise step `{}` after the output layer; lipfp \
                     reads steps before or between dense layers: fold it into the output layer \
                     (weight diag(a) W, bias a b + c)",
                    step.nodes.last().map(String::as_str).unwrap_or("?")
                ),
            ));
        }
        if !self
            .layers
            .iter()
            .any(|l| matches!(l.kind, DraftKind::Dense { .. }))
        {
            return Err(LipfpError::model(self.path, "the graph has no dense layer"));
        }
        match out.stage {
            Stage::Input => {
                return Err(LipfpError::model(self.path, "the graph has no dense layer"))
            }
            Stage::Activated if !self.head.is_empty() => return Err(self.refuse_relu_output()),
            Stage::Activated => {}
            Stage::Product | Stage::Biased => {}
        }
        self.check_logits_shape(out)
    }

    /// The activation at the end of the chain.
    fn chain_end(&self) -> Option<&Act> {
        self.values.values().find_map(|v| match v {
            Value::Act(a) if a.id == self.chain_id => Some(a),
            _ => None,
        })
    }

    /// The logits are `[batch, classes]` (dimensions of size one aside), at least two classes.
    fn check_logits_shape(&self, out: &Act) -> Result<(), LipfpError> {
        let features: Vec<usize> = out.shape[1..]
            .iter()
            .map(|d| match d {
                Dim::Fixed(k) => *k,
                _ => 0,
            })
            .collect();
        if features.iter().filter(|&&k| k != 1).count() > 1 {
            return Err(LipfpError::model(
                self.path,
                format!(
                    "graph output must be [batch, classes], got per-example shape {features:?}"
                ),
            ));
        }
        let classes = self.layers.last().map(|l| l.m).unwrap_or(0);
        if classes < 2 {
            return Err(LipfpError::model(
                self.path,
                "a classifier needs at least two output classes",
            ));
        }
        Ok(())
    }
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
    let name = onnx::data_type_name(tt.elem_type);
    let Some(elem) = float_format(&name).filter(|f| *f != Format::Bfloat16) else {
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
