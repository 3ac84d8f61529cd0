//! Ops that pass a value through: `Identity`, inference-mode `Dropout`, and `Cast` between float
//! types. A widening cast of the activation is exact; a narrowing one after a layer is one more
//! rounding of that layer's output (docs/soundness.md "Casts"); a cast of a constant rounds it
//! as the runtime does.

use super::builder::{Act, Builder, Stage, Value};
use crate::arith::format::Format;
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::{self as onnx, proto, ConstData, ConstTensor};

/// The format of an ONNX element type (by its name, e.g. `float16`), for the float types lipfp
/// knows.
pub(super) fn float_format(type_name: &str) -> Option<Format> {
    match type_name {
        "float" => Some(Format::Float32),
        "float16" => Some(Format::Float16),
        "double" => Some(Format::Float64),
        "bfloat16" => Some(Format::Bfloat16),
        _ => None,
    }
}

impl<'a> Builder<'a> {
    /// `Identity`: its output holds what its input holds.
    pub(super) fn identity(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let v = self.get(inputs[0], label, "Identity")?.clone();
        self.set(node, v);
        Ok(())
    }

    /// `Dropout` in inference mode (`training_mode` absent or a constant false) passes its input
    /// through; its mask output is unusable.
    pub(super) fn dropout(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Dropout";
        if let Some(name) = inputs.get(2).filter(|s| !s.is_empty()) {
            match self.get(name, label, op)? {
                Value::Const(ConstTensor {
                    data: ConstData::Int(v),
                    ..
                }) if v.iter().all(|&x| x == 0) => {}
                _ => return Err(self.fail(label, op, "training_mode must be a constant false")),
            }
        }
        let v = self.get(inputs[0], label, op)?.clone();
        self.set(node, v);
        if let Some(mask) = node.output.get(1).filter(|s| !s.is_empty()) {
            self.values
                .insert(mask.clone(), Value::Unusable("it is a Dropout mask".into()));
        }
        Ok(())
    }

    /// `Cast` of the activation or of a constant to the element type of its `to` attribute.
    pub(super) fn cast(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Cast";
        let to = checks::cast_to(node).map_err(|m| self.fail(label, op, m))?;
        let to_name = onnx::data_type_name(to);
        let v = match self.get(inputs[0], label, op)?.clone() {
            Value::Act(a) => self.cast_activation(a, &to_name, label)?,
            other => cast_const(other, &to_name).map_err(|m| self.fail(label, op, m))?,
        };
        self.set(node, v);
        Ok(())
    }

    /// A `Cast` of the activation to `to_name`: pass-through when the type holds every value of
    /// the deployment format (a widening cast is exact); otherwise a rounding the runtime
    /// performs, recorded on the layer whose output it rounds (a later layer must see the
    /// activation widened back, see `push_dense`). A narrowing cast of the network input or
    /// between a MatMul and its bias is refused.
    fn cast_activation(
        &mut self,
        a: Act,
        to_name: &str,
        label: &str,
    ) -> Result<Value<'a>, LipfpError> {
        let op = "Cast";
        let Some(to) = float_format(to_name) else {
            return Err(self.fail(label, op, format!("cast of the activation to {to_name}; only casts between float types are accepted")));
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
            Stage::Biased | Stage::Activated
                if self
                    .layers
                    .last()
                    .is_some_and(|l| matches!(l.kind, super::weights::DraftKind::Affine(_))) =>
            {
                Err(self.fail(label, op, format!(
                    "a narrowing cast to {to} after an elementwise step is not modelled; certify in {to} or remove the cast"
                )))
            }
            Stage::Biased | Stage::Activated => {
                let layer = self.layers.last_mut().expect("a biased activation follows a layer");
                layer.casts.push(to);
                layer.nodes.push(label.to_string());
                layer.ops.push(op.to_string());
                Ok(Value::Act(a))
            }
        }
    }
}

/// A `Cast` of a constant to the element type `to`: a float-to-float cast rounds to the
/// target type, as the runtime does; an integer constant cast to a float type becomes a float
/// constant (rounded likewise).
fn cast_const<'a>(v: Value<'a>, to: &str) -> Result<Value<'a>, String> {
    match (v, float_format(to)) {
        (Value::Weight(w), Some(f)) => Ok(Value::Weight(w.round_to(f))),
        (Value::Const(c), Some(f)) => {
            let ConstData::Int(ints) = c.data else {
                return Err("a float constant stored as an integer tensor".into());
            };
            let vals = ints.into_iter().map(|x| x as f64).collect();
            Ok(Value::Weight(
                super::weights::Weight::values(c.shape, vals).round_to(f),
            ))
        }
        (Value::Weight(_), None) => {
            Err(format!("cast of a float constant to {to} is not supported"))
        }
        (other, _) => Ok(other),
    }
}
