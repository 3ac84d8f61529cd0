//! `Flatten` and `Reshape` of the activation: the batch stays first and the features after it,
//! as exporters write them (`Flatten` on axis 1; `Reshape` to a target from a constant or a
//! shape computation, with `0` copying an input dimension unless `allowzero`, `-1` inferred, and
//! a batch size the exporter baked in accepted).

use super::builder::{Act, Builder, Value};
use super::shapes::{fixed_product, shape_const_dim, Dim};
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::{proto, ConstData, ConstTensor};

impl Builder<'_> {
    /// `Flatten` on axis 1: `[batch, features]`.
    pub(super) fn flatten(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "Flatten";
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
        Ok(())
    }

    /// `Reshape` of the activation to a target that keeps the batch first.
    pub(super) fn reshape(
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
        let dims = self.resolve_target(&a.shape, &target, allow_zero, label)?;
        let shape = self.reshaped(&dims, features, label)?;
        self.set(node, Value::Act(Act { shape, ..a }));
        Ok(())
    }

    /// The `target` of a reshape of `input` with `0` resolved (a copy of the input dimension
    /// unless `allow_zero`) and `None` marking the dimension to infer.
    fn resolve_target(
        &self,
        input: &[Dim],
        target: &[Dim],
        allow_zero: bool,
        label: &str,
    ) -> Result<Vec<Option<Dim>>, LipfpError> {
        let op = "Reshape";
        let mut dims = Vec::with_capacity(target.len());
        for (k, t) in target.iter().enumerate() {
            let d = match t {
                Dim::Fixed(0) if !allow_zero => Some(*input.get(k).ok_or_else(|| {
                    self.fail(
                        label,
                        op,
                        format!(
                            "target dimension {k} is 0 but the input has rank {}",
                            input.len()
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
        Ok(dims)
    }

    /// The activation's shape after a reshape to the resolved target `dims` (see
    /// [`Self::resolve_target`]), which must keep the batch first and the `features` after it.
    fn reshaped(
        &self,
        dims: &[Option<Dim>],
        features: usize,
        label: &str,
    ) -> Result<Vec<Dim>, LipfpError> {
        let op = "Reshape";
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
        match inferred {
            0 if known == features => {}
            1 if known > 0 && features.is_multiple_of(known) => {}
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
        let mut shape = vec![Dim::Batch];
        shape.extend(rest.iter().map(|d| match d {
            Some(d) => *d,
            None => Dim::Fixed(features / known),
        }));
        Ok(shape)
    }
}
