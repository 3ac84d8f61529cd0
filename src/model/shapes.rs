//! Shape computations on the protobuf's terms: `Squeeze` and `Unsqueeze` with the axes the
//! specification gives them (an attribute before opset 13, an input since) and `Concat` of 1-D
//! shape vectors along its required axis.

use super::{shape_const_dim, Builder, Dim, Value};
use crate::error::LipfpError;
use crate::onnx::{proto, ConstData, ConstTensor};
use crate::onnx_checks as checks;

impl Builder<'_> {
    /// `Squeeze` or `Unsqueeze`; the axes are an attribute before opset 13, an input since.
    pub(super) fn squeeze(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let axes = if self.opset < 13 {
            checks::attr_ints(node, "axes")
                .map_err(|m| self.fail(label, op, m))?
                .map(<[i64]>::to_vec)
        } else {
            match inputs.get(1).filter(|s| !s.is_empty()) {
                None => None,
                Some(name) => match self.get(name, label, op)? {
                    Value::Const(ConstTensor {
                        shape,
                        data: ConstData::Int(v),
                    }) if shape.len() == 1 => Some(v.clone()),
                    _ => {
                        return Err(self.fail(
                            label,
                            op,
                            format!("axes `{name}` must be a 1-D integer constant"),
                        ))
                    }
                },
            }
        };
        let v = self.get(inputs[0], label, op)?.clone();
        let out = squeezed(op, v, axes.as_deref()).map_err(|m| self.fail(label, op, m))?;
        self.set(node, out);
        Ok(())
    }

    /// `Concat` of 1-D shape computations (axis 0).
    pub(super) fn concat(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Concat";
        let axis = checks::attr_int(node, "axis")
            .and_then(|a| a.ok_or_else(|| "the attribute `axis` is required".to_string()))
            .map_err(|m| self.fail(label, op, m))?;
        if checks::normalize_axis(axis, 1, false) != Ok(0) {
            return Err(self.fail(
                label,
                op,
                format!("axis = {axis}; shape computations are 1-D (axis 0 or -1)"),
            ));
        }
        let mut dims = Vec::new();
        for name in inputs {
            match self.get(name, label, op)? {
                Value::Shape {
                    dims: d,
                    scalar: false,
                } => dims.extend(d.iter().copied()),
                Value::Const(ConstTensor {
                    shape,
                    data: ConstData::Int(v),
                }) if shape.len() == 1 => dims.extend(v.iter().map(|&x| shape_const_dim(x))),
                _ => {
                    return Err(self.fail(
                        label,
                        op,
                        format!("input `{name}`: only 1-D shape computations may be concatenated"),
                    ))
                }
            }
        }
        self.set(
            node,
            Value::Shape {
                dims,
                scalar: false,
            },
        );
        Ok(())
    }
}

/// `Squeeze` or `Unsqueeze` (`op`) of `v` by `axes`, as the specification defines them.
fn squeezed<'a>(op: &str, v: Value<'a>, axes: Option<&[i64]>) -> Result<Value<'a>, String> {
    let unsqueeze = op == "Unsqueeze";
    let reshape = |shape: &[usize]| {
        if unsqueeze {
            checks::unsqueeze(shape, axes.ok_or("Unsqueeze needs axes")?, 1)
        } else {
            checks::squeeze(shape, axes, |&d| d == 1)
        }
    };
    match v {
        Value::Const(mut c) => {
            c.shape = reshape(&c.shape)?;
            Ok(Value::Const(c))
        }
        Value::Shape { dims, scalar } => {
            let rank = if scalar { vec![] } else { vec![dims.len()] };
            match reshape(&rank)?.len() {
                0 => Ok(Value::Shape { dims, scalar: true }),
                1 => Ok(Value::Shape {
                    dims,
                    scalar: false,
                }),
                r => Err(format!("a shape computation of rank {r} is not supported")),
            }
        }
        Value::Weight(_) => Err(
            "reshaping a weight tensor is not supported; store weights in their final shape".into(),
        ),
        Value::Act(_) if unsqueeze => Err("unsqueeze of the activation is not supported".into()),
        Value::Act(mut a) => {
            let axes = axes.ok_or(
                "Squeeze of the activation needs axes (without them a batch of 1 is squeezed too)",
            )?;
            a.shape = checks::squeeze(&a.shape, Some(axes), |d| *d == Dim::Fixed(1))?;
            Ok(Value::Act(a))
        }
        Value::Unusable(why) => Err(why),
    }
}
