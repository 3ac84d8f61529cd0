//! Dense layers: `Gemm` (alpha = beta = 1, transA = 0, any transB, optional bias C), `MatMul`
//! by a constant 2-D weight, and the bias `Add` that may follow a layer without bias (either
//! operand order). A layer's tensors are checked against the activation's shape here; their
//! values are read once the whole graph is checked (see `weights`).

use super::builder::{Act, Builder, Stage, Value};
use super::network::Activation;
use super::shapes::{show_shape, Dim};
use super::weights::{Draft, DraftKind, Part, Weight};
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::proto;

impl<'a> Builder<'a> {
    /// `Gemm(A, B, C)`: a layer with weight `B` (`[m, n]` with transB, else `[n, m]`) and bias
    /// `C`; without `C` a following `Add` may be the bias.
    pub(super) fn gemm(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
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
        let w = self.weight_2d(inputs[1], label, op)?;
        // W is [m, n]: B itself when transB is set, else B^T
        let m = w.shape[usize::from(!trans_b)];
        let bias = if has_c {
            let c = self.weight(inputs[2], label, op, "bias")?;
            self.check_bias(&c, m, 2, inputs[2], label, op)?;
            Some(Part::new(c, inputs[2], label, op))
        } else {
            None
        };
        // a Gemm without C leaves the layer at the Product stage: a following Add is its bias
        let w = Part::new(w, inputs[1], label, op);
        let out = self.push_dense(a, w, !trans_b, bias, label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// `MatMul(x, B)` with `B` stored `[n, m]`: a layer without bias (yet).
    pub(super) fn matmul(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let a = self.act(inputs[0], label, op)?;
        let w = self.weight_2d(inputs[1], label, op)?;
        let w = Part::new(w, inputs[1], label, op);
        let out = self.push_dense(a, w, true, None, label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// The weight `name` of a layer, which must be 2-D.
    fn weight_2d(&self, name: &str, label: &str, op: &str) -> Result<Weight<'a>, LipfpError> {
        let w = self.weight(name, label, op, "weight")?;
        if w.shape.len() != 2 {
            return Err(self.fail(
                label,
                op,
                format!("weight must be 2-D, got shape {:?}", w.shape),
            ));
        }
        Ok(w)
    }

    /// `Add` of a constant to the activation: the bias of the layer just read by a MatMul (or a
    /// Gemm without C). Any other add is refused (see `refusals`).
    pub(super) fn add(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let x = self.get(inputs[0], label, op)?.clone();
        let y = self.get(inputs[1], label, op)?.clone();
        let (a, c, c_name) = match (x, y) {
            (Value::Act(a), Value::Weight(c)) => (a, c, inputs[1]),
            (Value::Weight(c), Value::Act(a)) => (a, c, inputs[0]),
            (Value::Act(_), Value::Act(_)) => return Err(self.refuse_residual_add(label)),
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
            return self.binary_step(node, label, inputs);
        }
        let m = self.layers.last().map(|l| l.m).unwrap_or(0);
        self.check_bias(&c, m, a.shape.len(), c_name, label, op)?;
        let last = self.layers.last_mut().expect("Product stage has a layer");
        if let DraftKind::Dense { b, .. } = &mut last.kind {
            *b = Some(Part::new(c, c_name, label, op));
        }
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
            kind: DraftKind::Dense {
                w,
                transposed,
                b: bias,
            },
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
}
