//! Shape handling: the activation's symbolic shape ([`Dim`]) and the shape computations
//! exporters emit to build a `Reshape` target from it, on the protobuf's terms: `Shape` (with
//! `start`/`end` from opset 15), `Gather` of a shape's entries, `Squeeze` and `Unsqueeze` with
//! the axes the specification gives them (an attribute before opset 13, an input since) and
//! `Concat` of 1-D shape vectors along its required axis.

use super::builder::{Builder, Value};
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::{proto, ConstData, ConstTensor};

/// A symbolic dimension in shape computations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Dim {
    /// The batch dimension, of any size.
    Batch,
    Fixed(usize),
    /// `-1` in a reshape target: inferred from the others.
    Infer,
    /// Any other negative value in a shape computation (invalid as a reshape target).
    Negative(i64),
}

/// A constant entry of a shape computation.
pub(super) fn shape_const_dim(x: i64) -> Dim {
    match x {
        -1 => Dim::Infer,
        x if x < 0 => Dim::Negative(x),
        x => Dim::Fixed(x as usize),
    }
}

/// `shape` as text, e.g. `[batch, 12]`.
pub(super) fn show_shape(shape: &[Dim]) -> String {
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

/// The number of elements of `dims`, when every one is fixed (and the product fits).
pub(super) fn fixed_product(dims: &[Dim]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, d| match d {
        Dim::Fixed(x) => acc.checked_mul(*x),
        _ => None,
    })
}

impl Builder<'_> {
    /// `Shape` of the activation: its dimensions from `start` to `end` (clamped, as the
    /// specification says).
    pub(super) fn shape(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let a = self.act(inputs[0], label, "Shape")?;
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
        Ok(())
    }

    /// `Gather` on axis 0 of a shape computation, by constant indices.
    pub(super) fn gather(
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
        Value::Head(h) => Ok(Value::Head(h)),
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
