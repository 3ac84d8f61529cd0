//! Classifier heads after the logits: `Softmax` and `LogSoftmax` over the class axis, `ArgMax`,
//! and the outputs skl2onnx writes — the label through `ai.onnx.ml` `ArrayFeatureExtractor` with
//! class labels `0..K-1` (then `Reshape`/`Cast`), the probabilities through `ZipMap`. Each keeps
//! the arg-max of the logits in real arithmetic; the margin their floating-point execution needs
//! is `crate::bounds::certify::head` (docs/soundness.md "Classifier heads"). A head output can only be
//! passed on (`Identity`, `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, exact `Cast`) or be a
//! graph output.

use super::builder::{Act, Builder, Head, HeadValue, Stage, Value};
use super::network::HeadOp;
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::{proto, ConstData, ConstTensor};

/// The domain of the classical machine-learning ops (skl2onnx, onnxmltools).
pub(super) const ML_DOMAIN: &str = "ai.onnx.ml";

/// The ops a head value may pass through unchanged.
const HEAD_PASS_THROUGH: [&str; 7] = [
    "Identity",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Cast",
    "ArgMax",
];

impl Builder<'_> {
    /// Whether the node's first input is a head value.
    pub(super) fn reads_head(&self, inputs: &[&str]) -> bool {
        matches!(
            inputs.first().and_then(|n| self.values.get(*n)),
            Some(Value::Head(_))
        )
    }

    /// The input `name` of a head node: the logits, `[batch, classes]`, at the end of the chain.
    fn logits(&self, node: &proto::NodeProto, name: &str, label: &str) -> Result<Act, LipfpError> {
        let op = node.op_type.as_str();
        let a = match self.get(name, label, op)? {
            Value::Act(a)
                if a.id == self.chain_id && matches!(a.stage, Stage::Product | Stage::Biased) =>
            {
                a.clone()
            }
            _ => return Err(self.refuse(node, label)),
        };
        if a.shape.len() != 2 {
            return Err(self.fail(
                label,
                op,
                format!(
                    "the logits `{name}` have rank {}; a head is read over [batch, classes] logits",
                    a.shape.len()
                ),
            ));
        }
        if a.narrowed {
            return Err(self.fail(
                label,
                op,
                format!(
                    "the logits `{name}` are cast to {} before the head, which then computes in \
                     {}: its margin is not modelled in a {} certificate; certify with --format {} \
                     or apply the head before the cast",
                    a.elem, a.elem, self.format, a.elem
                ),
            ));
        }
        Ok(a)
    }

    /// The `axis` attribute must name the class axis (1 or -1) of `[batch, classes]`.
    fn class_axis(
        &self,
        node: &proto::NodeProto,
        label: &str,
        default: i64,
    ) -> Result<(), LipfpError> {
        let axis = self.int_attr(node, label, "axis", default)?;
        if axis != 1 && axis != -1 {
            return Err(self.fail(
                label,
                &node.op_type,
                format!(
                    "axis = {axis} is not the class axis of the [batch, classes] logits: over \
                     another axis this head does not rank the classes"
                ),
            ));
        }
        Ok(())
    }

    /// `Softmax` or `LogSoftmax` of the logits over the class axis (default axis: -1 from
    /// opset 13, 1 before; on rank-2 logits both coercions mean the class axis).
    pub(super) fn softmax(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let a = self.logits(node, inputs[0], label)?;
        self.class_axis(node, label, if self.opset >= 13 { -1 } else { 1 })?;
        self.head.push(if node.op_type == "Softmax" {
            HeadOp::Softmax
        } else {
            HeadOp::LogSoftmax
        });
        let head = Head {
            value: HeadValue::Scores,
            from: a.id,
        };
        self.set(node, Value::Head(head));
        Ok(())
    }

    /// `ArgMax` over the class axis of the logits or of scores ranked like them: the certificate
    /// proves a strict maximum, so `select_last_index` and `keepdims` do not matter.
    pub(super) fn argmax(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let from = match self.get(inputs[0], label, "ArgMax")? {
            Value::Head(Head {
                value: HeadValue::Scores,
                from,
            }) => *from,
            Value::Head(_) => {
                return Err(self.fail(
                    label,
                    "ArgMax",
                    format!("input `{}` is not per-class scores", inputs[0]),
                ))
            }
            _ => self.logits(node, inputs[0], label)?.id,
        };
        self.class_axis(node, label, 0)?;
        for flag in ["keepdims", "select_last_index"] {
            let v = self.int_attr(node, label, flag, 0)?;
            if v != 0 && v != 1 {
                return Err(self.fail(label, "ArgMax", format!("{flag} = {v}; must be 0 or 1")));
            }
        }
        self.head.push(HeadOp::ArgMax);
        let head = Head {
            value: HeadValue::Label,
            from,
        };
        self.set(node, Value::Head(head));
        Ok(())
    }

    /// A node reading a head value: passed through by the ops of [`HEAD_PASS_THROUGH`]
    /// (a `Cast` only when exact), refused otherwise.
    pub(super) fn head_pass_through(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let Some(Value::Head(h)) = self.values.get(inputs[0]).cloned() else {
            return Err(self.fail(label, op, "expected a head value"));
        };
        if op == "ArgMax" {
            return self.argmax(node, label, inputs);
        }
        if !HEAD_PASS_THROUGH.contains(&op) || (h.value == HeadValue::Map && op != "Identity") {
            return Err(self.fail(
                label,
                op,
                format!(
                    "`{}` is an output of the classifier head; lipfp certifies the class it ranks \
                     first and reads only {} after it",
                    inputs[0],
                    HEAD_PASS_THROUGH.join(", ")
                ),
            ));
        }
        if op == "Cast" && h.value == HeadValue::Scores {
            let to = checks::cast_to(node).map_err(|m| self.fail(label, op, m))?;
            let to_name = crate::onnx::reader::data_type_name(to);
            let exact = super::pass_through::float_format(&to_name)
                .is_some_and(|f| f.contains(self.format));
            if !exact {
                return Err(self.fail(
                    label,
                    op,
                    format!(
                        "a cast of the head's scores to {to_name} may round two classes to a tie; \
                         only casts to a type holding every {} value are read",
                        self.format
                    ),
                ));
            }
        }
        self.set(node, Value::Head(h));
        Ok(())
    }

    /// `ai.onnx.ml` `ArrayFeatureExtractor` (the label: class labels indexed by the arg-max) and
    /// `ZipMap` (the probabilities as a map).
    pub(super) fn ml_head(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let inputs: Vec<&str> = node.input.iter().map(String::as_str).collect();
        let want = if op == "ZipMap" { 1 } else { 2 };
        if inputs.len() != want || node.output.len() != 1 {
            return Err(self.fail(
                label,
                op,
                format!("{op} takes {want} input(s) and one output"),
            ));
        }
        let (input, value) = if op == "ZipMap" {
            (inputs[0], HeadValue::Map)
        } else {
            self.class_labels(inputs[0], label, op)?;
            (inputs[1], HeadValue::Label)
        };
        let needs = if op == "ZipMap" {
            HeadValue::Scores
        } else {
            HeadValue::Label
        };
        let from = match self.get(input, label, op)? {
            Value::Head(h) if h.value == needs => h.from,
            Value::Head(_) => {
                let what = if op == "ZipMap" {
                    "probabilities"
                } else {
                    "an arg-max"
                };
                return Err(self.fail(label, op, format!("input `{input}` is not {what}")));
            }
            _ => return Err(self.refuse(node, label)),
        };
        let head = Head { value, from };
        self.set(node, Value::Head(head));
        Ok(())
    }

    /// The class labels an `ArrayFeatureExtractor` maps the arg-max through must be `0..K-1`,
    /// so that the label output is the class index the certificate is about.
    fn class_labels(&self, name: &str, label: &str, op: &str) -> Result<(), LipfpError> {
        let classes = self.layers.last().map(|l| l.m).unwrap_or(0);
        let identity = match self.get(name, label, op)? {
            Value::Const(ConstTensor {
                data: ConstData::Int(v),
                ..
            }) => v.len() == classes && v.iter().enumerate().all(|(k, &c)| c == k as i64),
            _ => false,
        };
        if !identity {
            return Err(self.fail(
                label,
                op,
                format!(
                    "the class labels `{name}` are not the integers 0..{}: lipfp certifies the \
                     class index, so the labels must be the indices themselves (train on labels \
                     0..K-1, e.g. with sklearn's LabelEncoder)",
                    classes.saturating_sub(1)
                ),
            ));
        }
        Ok(())
    }
}
