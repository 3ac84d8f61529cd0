//! The walk's state: the value table, which says what each tensor name holds (the activation
//! and where it stands in the chain, a constant, a shape computation), and the chain of layers
//! being built, with the lookups every op family reads a node's inputs with.

use std::collections::HashMap;
use std::path::Path;

use super::shapes::Dim;
use super::weights::{Draft, Weight};
use crate::arith::format::Format;
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::{proto, ConstTensor};

/// Where the activation stands in the chain being built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stage {
    /// The network input, possibly reshaped or cast: no layer yet.
    Input,
    /// After a MatMul, waiting for an optional bias Add.
    Product,
    /// After the bias of the last layer.
    Biased,
    /// After the ReLU of the last layer.
    Activated,
}

/// The activation: the one tensor computed from the network input.
#[derive(Clone, Debug)]
pub(super) struct Act {
    /// Full shape including the batch dimension.
    pub shape: Vec<Dim>,
    pub stage: Stage,
    /// Chain position: operations that extend the chain require the newest one.
    pub id: usize,
    /// The element type the graph gives the activation (the graph input's, then each `Cast`'s).
    pub elem: Format,
    /// Set by a `Cast` to a type that does not hold every deployment-format value (until a
    /// widening cast): a layer fed such an activation would compute in that narrower type.
    pub narrowed: bool,
}

/// What a classifier head's output holds (docs/soundness.md "Classifier heads").
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum HeadValue {
    /// Scores ranked like the logits (`Softmax`, `LogSoftmax`), per class along the last axis.
    Scores,
    /// The predicted class index (`ArgMax`, then class labels `0..K-1`).
    Label,
    /// A map from class label to probability (`ZipMap`).
    Map,
}

/// A head value and the chain position of the logits it was computed from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Head {
    pub value: HeadValue,
    /// [`Act::id`] of the logits.
    pub from: usize,
}

/// What a tensor name holds.
#[derive(Clone, Debug)]
pub(super) enum Value<'a> {
    /// An integer constant (shape computations).
    Const(ConstTensor),
    /// A float constant, decoded only when the layers are finished.
    Weight(Weight<'a>),
    /// A 1-D integer tensor (or scalar) computed from the activation's shape.
    Shape { dims: Vec<Dim>, scalar: bool },
    /// The activation.
    Act(Act),
    /// Computed by the classifier head from the logits.
    Head(Head),
    /// Produced by a supported op but unusable downstream (e.g. a Dropout mask), and why.
    Unusable(String),
}

/// The loader's state while it walks one graph.
pub(super) struct Builder<'a> {
    /// The model file (error messages, external data).
    pub path: &'a Path,
    /// The graph being walked.
    pub graph: &'a proto::GraphProto,
    /// The deployment format weights are converted to.
    pub format: Format,
    /// Flush-to-zero execution: subnormal weights are refused.
    pub ftz: bool,
    /// The model's default-domain opset.
    pub opset: i64,
    /// The graph input the network reads (set when the value table is seeded).
    pub data_input: String,
    /// The value table: what each tensor name defined so far holds.
    pub values: HashMap<String, Value<'a>>,
    /// The layers read so far, their values not yet decoded.
    pub layers: Vec<Draft<'a>>,
    /// The newest chain position (see [`Act::id`]).
    pub chain_id: usize,
    /// How many weight and bias entries the conversion to `format` changed.
    pub changed: usize,
    /// The element type each layer computes in (its input activation's type), in order.
    pub compute: Vec<(String, Format)>,
    /// The head ops read after the logits (see [`super::network::HeadOp`]).
    pub head: Vec<super::network::HeadOp>,
    /// Model narrowing casts relative to `format` and refuse layers computing in a narrower type
    /// (off only when probing which format the layers compute in: casts are then only followed).
    pub check_compute: bool,
}

impl<'a> Builder<'a> {
    /// What the input `name` of node `label` holds; an undefined or unusable value is an error.
    pub fn get(&self, name: &str, label: &str, op: &str) -> Result<&Value<'a>, LipfpError> {
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

    /// Record `v` as what the first output of `node` holds.
    pub fn set(&mut self, node: &proto::NodeProto, v: Value<'a>) {
        if let Some(o) = node.output.first() {
            self.values.insert(o.clone(), v);
        }
    }

    /// An error at node `label` of type `op`.
    pub fn fail(&self, label: &str, op: &str, why: impl Into<String>) -> LipfpError {
        LipfpError::at_node(self.path, label, op, why)
    }

    /// An INT attribute of `node` (`default` when absent; another type is an error).
    pub fn int_attr(
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

    /// The input `name`, which must be the activation.
    pub fn act(&self, name: &str, label: &str, op: &str) -> Result<Act, LipfpError> {
        match self.get(name, label, op)? {
            Value::Act(a) => Ok(a.clone()),
            _ => Err(self.fail(
                label,
                op,
                format!("input `{name}` must be the activation, found a constant"),
            )),
        }
    }

    /// The input `name`, which must be a float constant (`what`: "weight", "bias").
    pub fn weight(
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
                format!(
                    "{what} `{name}` is not constant (non-constant weights are not supported): it is \
                     computed from the network input, and a dense layer multiplies the activation by a \
                     constant matrix"
                ),
            )),
            _ => Err(self.fail(
                label,
                op,
                format!("{what} `{name}` is not a tensor of weights"),
            )),
        }
    }

    /// `a` must be the newest activation: the layers form a single chain.
    pub fn require_head(&self, a: &Act, label: &str, op: &str) -> Result<(), LipfpError> {
        if a.id != self.chain_id {
            return Err(self.fail(
                label,
                op,
                "the graph branches (an earlier activation is reused); only a single chain of layers is supported",
            ));
        }
        Ok(())
    }
}
