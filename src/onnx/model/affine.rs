//! Elementwise affine steps: `Sub`, `Add`, `Mul`, `Div` with a constant operand broadcast along
//! the features, `ai.onnx.ml` `Scaler` and `BatchNormalization` in inference mode — before the
//! first dense layer, after a layer's bias (before its `Relu`) or after its `Relu`. Consecutive
//! steps form one [`AffineStep`], a layer of its own in the chain with its own Lipschitz factor
//! and rounding error (`crate::bounds::certify::affine`, docs/soundness.md "Affine steps"). The radius
//! stays in the space of what the user feeds the model.

use super::builder::{Act, Builder, Stage, Value};
use super::network::Activation;
use super::shapes::{show_shape, Dim};
use super::weights::{AffineDraft, Draft, DraftKind, DraftOp, Part, Weight};
use crate::error::LipfpError;
use crate::onnx::checks;
use crate::onnx::reader::proto;

/// One elementwise op of an affine step, its constants per feature (deployment-format values).
#[derive(Clone, Debug, PartialEq)]
pub enum ElementOp {
    /// `x + c` (a `Sub` of `c` is an `Add` of `-c`, exact).
    Add(Vec<f64>),
    /// `-x` (exact; `Sub(c, x)` is `Neg` then `Add(c)`).
    Neg,
    /// `x * c`.
    Mul(Vec<f64>),
    /// `x / c` (no `c` is zero).
    Div(Vec<f64>),
    /// `(x - mean) / sqrt(var + epsilon) * scale + bias`.
    BatchNorm {
        scale: Vec<f64>,
        bias: Vec<f64>,
        mean: Vec<f64>,
        var: Vec<f64>,
        /// The `epsilon` attribute in the deployment format.
        epsilon: f64,
    },
}

impl ElementOp {
    /// The op's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            ElementOp::Add(_) => "add",
            ElementOp::Neg => "neg",
            ElementOp::Mul(_) => "mul",
            ElementOp::Div(_) => "div",
            ElementOp::BatchNorm { .. } => "batchnorm",
        }
    }
}

/// An elementwise affine step `y = a * x + c` over `width` features, as the graph writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct AffineStep {
    /// Number of features.
    pub width: usize,
    /// The ops in graph order.
    pub ops: Vec<ElementOp>,
}

impl AffineStep {
    /// Whether every op leaves every value unchanged in any floating-point arithmetic: adding
    /// zero, multiplying or dividing by one (e.g. ACAS Xu's `Sub` of a zero mean). Such a step
    /// can be dropped from the network without changing any execution's result.
    pub fn is_exact_identity(&self) -> bool {
        self.ops.iter().all(|op| match op {
            ElementOp::Add(c) => c.iter().all(|v| *v == 0.0),
            ElementOp::Mul(k) | ElementOp::Div(k) => k.iter().all(|v| *v == 1.0),
            ElementOp::Neg | ElementOp::BatchNorm { .. } => false,
        })
    }
}

/// `|scale| / sqrt(var + eps)` rounded up (`var + eps > 0`, checked when the model is read):
/// the magnitude of a BatchNormalization's slope.
pub fn batch_norm_scale(scale: f64, var: f64, epsilon: f64) -> f64 {
    // round-to-nearest, then one step down: a lower bound on var + eps, and on its root
    let sum_down = (var + epsilon).next_down().max(0.0);
    let root_down = sum_down.sqrt().next_down().max(0.0);
    crate::arith::sound::div_up(scale.abs(), root_down)
}

impl AffineStep {
    /// How many of the step's last ops are a `Mul` or `Div` by one value (equal constants):
    /// onnxruntime folds that run into a following bias-free `MatMul` as its `alpha`
    /// (`MatMulScaleFusion`; `Mul(3)` then `Mul(5)` becomes `alpha = 15`).
    pub fn trailing_scalar_scalings(&self) -> usize {
        self.ops
            .iter()
            .rev()
            .take_while(|op| match op {
                ElementOp::Mul(k) | ElementOp::Div(k) => k.windows(2).all(|w| w[0] == w[1]),
                _ => false,
            })
            .count()
    }

    /// `max_i |a_i|` rounded up: `||diag(a)||_2`, the step's Lipschitz constant.
    pub fn scale_max(&self) -> f64 {
        self.scale_bounds().into_iter().fold(0.0, f64::max)
    }

    /// Upper bounds on every feature's slope `|a_i|`.
    pub fn scale_bounds(&self) -> Vec<f64> {
        use crate::arith::sound::{div_up, mul_up};
        (0..self.width)
            .map(|i| {
                self.ops.iter().fold(1.0, |a, op| match op {
                    ElementOp::Add(_) | ElementOp::Neg => a,
                    ElementOp::Mul(k) => mul_up(a, k[i].abs()),
                    ElementOp::Div(k) => div_up(a, k[i].abs()),
                    ElementOp::BatchNorm {
                        scale,
                        var,
                        epsilon,
                        ..
                    } => mul_up(a, batch_norm_scale(scale[i], var[i], *epsilon)),
                })
            })
            .collect()
    }

    /// Feed the step's ops and constants (their bits) to a network hash.
    pub(super) fn hash_into(&self, h: &mut sha2::Sha256) {
        use sha2::Digest;
        h.update(b"affine:");
        h.update((self.width as u64).to_le_bytes());
        for op in &self.ops {
            h.update(op.name().as_bytes());
            let constants: Vec<&[f64]> = match op {
                ElementOp::Add(c) | ElementOp::Mul(c) | ElementOp::Div(c) => vec![c],
                ElementOp::Neg => vec![],
                ElementOp::BatchNorm {
                    scale,
                    bias,
                    mean,
                    var,
                    epsilon,
                } => vec![scale, bias, mean, var, std::slice::from_ref(epsilon)],
            };
            for x in constants.into_iter().flatten() {
                h.update(x.to_bits().to_le_bytes());
            }
        }
    }
}

impl<'a> Builder<'a> {
    /// `Sub`, `Mul`, `Div` (and, from `dense`, an `Add` that is not a bias) with one constant
    /// operand and the activation.
    pub(super) fn binary_step(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = node.op_type.as_str();
        let x = self.get(inputs[0], label, op)?.clone();
        let y = self.get(inputs[1], label, op)?.clone();
        let (a, c, c_name, act_first) = match (x, y) {
            (Value::Act(a), Value::Weight(c)) => (a, c, inputs[1], true),
            (Value::Weight(c), Value::Act(a)) => (a, c, inputs[0], false),
            (Value::Act(_), Value::Const(_)) | (Value::Const(_), Value::Act(_)) => {
                let name = if matches!(self.values.get(inputs[0]), Some(Value::Act(_))) {
                    inputs[1]
                } else {
                    inputs[0]
                };
                return Err(self.fail(
                    label,
                    op,
                    format!("constant `{name}` has an integer type; an elementwise step reads float constants"),
                ));
            }
            _ => return Err(self.refuse(node, label)),
        };
        if !act_first && op == "Div" {
            return Err(self.refuse(node, label));
        }
        let width = self.step_width(&a, label, op)?;
        let c = self.per_feature(c, c_name, &a, (label, op), false)?;
        let mut ops = Vec::new();
        match op {
            "Sub" if !act_first => {
                ops.push(DraftOp::Neg);
                ops.push(DraftOp::Add(c));
            }
            "Sub" => ops.push(DraftOp::Sub(c)),
            "Add" => ops.push(DraftOp::Add(c)),
            "Mul" => ops.push(DraftOp::Mul(c)),
            _ => ops.push(DraftOp::Div(c)),
        }
        let out = self.push_step(a, width, ops, label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// `BatchNormalization` in inference mode: one output, `training_mode` absent or 0.
    pub(super) fn batch_norm(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
        inputs: &[&str],
    ) -> Result<(), LipfpError> {
        let op = "BatchNormalization";
        if inputs.len() != 5 || node.output.len() != 1 {
            return Err(self.fail(
                label,
                op,
                "inference mode takes five inputs (X, scale, B, mean, var) and one output",
            ));
        }
        if self.int_attr(node, label, "training_mode", 0)? != 0 {
            return Err(self.fail(label, op, "training_mode = 1 is not inference"));
        }
        if self.opset < 9 && self.int_attr(node, label, "spatial", 1)? != 1 {
            return Err(self.fail(label, op, "spatial = 0 is not supported"));
        }
        let epsilon = checks::attr_float(node, "epsilon")
            .map_err(|m| self.fail(label, op, m))?
            .unwrap_or(1e-5);
        let a = self.act(inputs[0], label, op)?;
        if a.shape.len() < 2 {
            return Err(self.fail(
                label,
                op,
                format!(
                    "input {} has no channel axis: BatchNormalization normalises axis 1",
                    show_shape(&a.shape)
                ),
            ));
        }
        let width = self.step_width(&a, label, op)?;
        let mut parts = Vec::with_capacity(4);
        for name in &inputs[1..] {
            let w = self.weight(name, label, op, "parameter")?;
            parts.push(self.per_feature(w, name, &a, (label, op), true)?);
        }
        let step = DraftOp::BatchNorm {
            parts,
            epsilon: f64::from(epsilon),
        };
        let out = self.push_step(a, width, vec![step], label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// `ai.onnx.ml` `Scaler`: `(x - offset) * scale`, each attribute one value or one per feature.
    pub(super) fn scaler(
        &mut self,
        node: &proto::NodeProto,
        label: &str,
    ) -> Result<(), LipfpError> {
        let op = "Scaler";
        if node.input.len() != 1 || node.output.len() != 1 {
            return Err(self.fail(label, op, "Scaler takes one input and one output"));
        }
        let a = self.act(&node.input[0], label, op)?;
        let width = self.step_width(&a, label, op)?;
        let mut consts = Vec::with_capacity(2);
        for name in ["offset", "scale"] {
            let v = checks::attr_floats(node, name)
                .map_err(|m| self.fail(label, op, m))?
                .map(|v| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>())
                .unwrap_or_else(|| vec![if name == "scale" { 1.0 } else { 0.0 }]);
            let w = Weight::values(vec![v.len()], v);
            consts.push(self.per_feature(w, name, &a, (label, op), false)?);
        }
        let scale = consts.pop().expect("two attributes");
        let offset = consts.pop().expect("two attributes");
        let ops = vec![DraftOp::Sub(offset), DraftOp::Mul(scale)];
        let out = self.push_step(a, width, ops, label, op)?;
        self.set(node, out);
        Ok(())
    }

    /// The number of features a step acts on: the product of the activation's per-example
    /// dimensions, which must be fixed.
    fn step_width(&self, a: &Act, label: &str, op: &str) -> Result<usize, LipfpError> {
        let mut width = 1usize;
        for d in &a.shape[1..] {
            match d {
                Dim::Fixed(k) => width = width.saturating_mul(*k),
                _ => {
                    return Err(self.fail(
                        label,
                        op,
                        format!("activation shape {} is not fixed", show_shape(&a.shape)),
                    ))
                }
            }
        }
        Ok(width)
    }

    /// The constant `c` as one value per feature: a single value (any shape of ones), or a
    /// constant ONNX broadcasts over the activation's per-example dimensions without varying
    /// along the batch (`[features]` or `[1, features]` on `[batch, features]`; per channel
    /// `[C, 1, 1]` or `[1, C, 1, 1]` on `[batch, C, H, W]`; ...). `channel`: a `BatchNormalization`
    /// parameter `[C]`, which applies along axis 1.
    fn per_feature(
        &self,
        c: Weight<'a>,
        name: &str,
        a: &Act,
        (label, op): (&str, &str),
        channel: bool,
    ) -> Result<Part<'a>, LipfpError> {
        let count: usize = c.shape.iter().product();
        let features = fixed_dims(&a.shape[1.min(a.shape.len())..]);
        let mut shape = c.shape.clone();
        if channel && shape.len() == 1 {
            let extra = features.as_ref().map_or(0, |f| f.len().saturating_sub(1));
            shape.extend(std::iter::repeat_n(1, extra));
        }
        let aligned = features
            .as_ref()
            .and_then(|f| aligned_shape(&shape, a.shape.len(), f));
        let (Some(features), Some(aligned)) = (features, aligned) else {
            if count == 1 && !channel {
                return Ok(Part::new(c, name, label, op));
            }
            return Err(self.fail(
                label,
                op,
                format!(
                    "constant `{name}` of shape {:?} does not broadcast to one value per feature \
                     of the activation {} (one value, or a shape each of whose dimensions is 1 \
                     or the activation's, not along the batch)",
                    c.shape,
                    show_shape(&a.shape)
                ),
            ));
        };
        let mut part = Part::new(c, name, label, op);
        if count != 1 && features.len() > 1 {
            part.broadcast = Some((features, aligned));
        }
        Ok(part)
    }

    /// Append `ops` to the chain: to the open affine step when the activation is its output
    /// (no ReLU since), else as a new affine step.
    fn push_step(
        &mut self,
        a: Act,
        width: usize,
        ops: Vec<DraftOp<'a>>,
        label: &str,
        op: &str,
    ) -> Result<Value<'a>, LipfpError> {
        self.require_head(&a, label, op)?;
        if a.stage == Stage::Product {
            return Err(self.fail(
                label,
                op,
                "an elementwise step directly after a MatMul without bias is not read: \
                 onnxruntime folds a Mul, Div or BatchNormalization there into the MatMul's \
                 weights or alpha (MatMulScaleFusion, MatmulBNFusion), which lipfp does not \
                 model; give the layer its bias (even zeros) before the step, or fold the step \
                 into the weights",
            ));
        }
        let open = a.stage == Stage::Biased
            && matches!(
                self.layers.last(),
                Some(Draft {
                    kind: DraftKind::Affine(_),
                    act: Activation::Identity,
                    ..
                })
            );
        if open {
            let last = self.layers.last_mut().expect("checked above");
            if let DraftKind::Affine(step) = &mut last.kind {
                step.ops.extend(ops);
            }
            last.nodes.push(label.to_string());
            last.ops.push(op.to_string());
        } else {
            self.layers.push(Draft {
                m: width,
                n: width,
                kind: DraftKind::Affine(AffineDraft { ops }),
                act: Activation::Identity,
                nodes: vec![label.to_string()],
                ops: vec![op.to_string()],
                casts: Vec::new(),
            });
            self.chain_id += 1;
        }
        Ok(Value::Act(Act {
            stage: Stage::Biased,
            id: self.chain_id,
            ..a
        }))
    }
}

/// The fixed dimensions `dims` (`None` when one is not fixed).
fn fixed_dims(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter()
        .map(|d| match d {
            Dim::Fixed(k) => Some(*k),
            _ => None,
        })
        .collect()
}

/// A constant's `shape` aligned to the per-example dimensions `features` of an activation of
/// rank `rank` (batch first), when ONNX broadcasting gives one value per feature that does not
/// vary along the batch: rank at most the activation's, its batch dimension (if any) 1, every
/// other dimension 1 or the activation's. `None` otherwise.
fn aligned_shape(shape: &[usize], rank: usize, features: &[usize]) -> Option<Vec<usize>> {
    if shape.len() > rank {
        return None;
    }
    let own = if shape.len() == rank {
        // the batch dimension must not vary
        (shape.first() == Some(&1)).then(|| &shape[1..])?
    } else {
        shape
    };
    let pad = features.len().checked_sub(own.len())?;
    let aligned: Vec<usize> = std::iter::repeat_n(1, pad)
        .chain(own.iter().copied())
        .collect();
    aligned
        .iter()
        .zip(features)
        .all(|(&c, &f)| c == 1 || c == f)
        .then_some(aligned)
}

impl Builder<'_> {
    /// The affine step of `width` features with its constants read and converted; a `Div` by
    /// zero (or by a value whose reciprocal overflows) and a `BatchNormalization` with
    /// `var + epsilon <= 0` are refused.
    pub(super) fn affine_values(
        &mut self,
        width: usize,
        d: &AffineDraft<'_>,
    ) -> Result<AffineStep, LipfpError> {
        let mut ops = Vec::with_capacity(d.ops.len());
        for op in &d.ops {
            ops.push(match op {
                DraftOp::Neg => ElementOp::Neg,
                DraftOp::Add(p) => ElementOp::Add(self.per_feature_values(p, width)?),
                DraftOp::Sub(p) => {
                    let c = self.per_feature_values(p, width)?;
                    ElementOp::Add(c.into_iter().map(|x| -x).collect())
                }
                DraftOp::Mul(p) => ElementOp::Mul(self.per_feature_values(p, width)?),
                DraftOp::Div(p) => {
                    let c = self.per_feature_values(p, width)?;
                    if let Some(k) = c.iter().position(|x| {
                        !(1.0 / x).is_finite() || x.abs() * self.format.f_max() <= 1.0
                    }) {
                        return Err(self.fail(
                            &p.label,
                            &p.op,
                            format!(
                                "divisor `{}`[{k}] = {:e} is zero or its reciprocal overflows {}",
                                p.name, c[k], self.format
                            ),
                        ));
                    }
                    ElementOp::Div(c)
                }
                DraftOp::BatchNorm { parts, epsilon } => {
                    self.batch_norm_values(width, parts, *epsilon)?
                }
            });
        }
        Ok(AffineStep { width, ops })
    }

    /// A `BatchNormalization`'s parameters, read and converted.
    fn batch_norm_values(
        &mut self,
        width: usize,
        parts: &[Part<'_>],
        epsilon: f64,
    ) -> Result<ElementOp, LipfpError> {
        let mut v = Vec::with_capacity(4);
        for p in parts {
            v.push(self.per_feature_values(p, width)?);
        }
        // epsilon is the float32 attribute, as runtimes read it (a runtime that rounds it to
        // the storage format first adds one rounding the BatchNorm error term covers)
        let var = v.pop().expect("four parameters");
        let mean = v.pop().expect("four parameters");
        let bias = v.pop().expect("four parameters");
        let scale = v.pop().expect("four parameters");
        if let Some(k) = var.iter().position(|&x| !(x >= 0.0 && x + epsilon > 0.0)) {
            let p = &parts[3];
            return Err(self.fail(
                &p.label,
                &p.op,
                format!("variance `{}`[{k}] = {:e} with epsilon {epsilon:e}: var + epsilon must be positive", p.name, var[k]),
            ));
        }
        if self.ftz {
            // flush-to-zero may treat a subnormal epsilon as 0 and flush var + epsilon: the
            // square root could then be 0 and the step infinite
            let lambda = self.format.lambda();
            let eps_kept = if epsilon >= lambda { epsilon } else { 0.0 };
            if let Some(k) = var.iter().position(|&x| x + eps_kept < lambda) {
                let p = &parts[3];
                return Err(self.fail(
                    &p.label,
                    &p.op,
                    format!(
                        "variance `{}`[{k}] = {:e} with epsilon {epsilon:e}: under flush-to-zero \
                         var + epsilon may flush to 0 in {} (a division by zero); certify \
                         without --ftz or in a wider format",
                        p.name, var[k], self.format
                    ),
                ));
            }
        }
        Ok(ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{aligned_shape, AffineStep, ElementOp};

    #[test]
    fn only_zero_additions_and_unit_scalings_are_exact_identities() {
        let step = |ops| AffineStep { width: 2, ops };
        let zero = ElementOp::Add(vec![0.0, -0.0]);
        assert!(step(vec![zero, ElementOp::Div(vec![1.0, 1.0])]).is_exact_identity());
        assert!(step(vec![ElementOp::Mul(vec![1.0, 1.0])]).is_exact_identity());
        assert!(!step(vec![ElementOp::Add(vec![0.0, 1e-300])]).is_exact_identity());
        assert!(!step(vec![ElementOp::Mul(vec![1.0, -1.0])]).is_exact_identity());
        assert!(!step(vec![ElementOp::Neg]).is_exact_identity());
    }

    #[test]
    fn constants_broadcast_per_feature_only_without_the_batch() {
        let f = [3, 4, 5];
        assert_eq!(aligned_shape(&[3, 1, 1], 4, &f), Some(vec![3, 1, 1]));
        assert_eq!(aligned_shape(&[1, 3, 1, 1], 4, &f), Some(vec![3, 1, 1]));
        assert_eq!(aligned_shape(&[5], 4, &f), Some(vec![1, 1, 5]));
        assert_eq!(aligned_shape(&[4, 1], 4, &f), Some(vec![1, 4, 1]));
        assert_eq!(aligned_shape(&[], 4, &f), Some(vec![1, 1, 1]));
        // varies along the batch, a wrong size, a rank above the activation's
        assert_eq!(aligned_shape(&[2, 3, 1, 1], 4, &f), None);
        assert_eq!(aligned_shape(&[3, 2, 1], 4, &f), None);
        assert_eq!(aligned_shape(&[1, 1, 3, 1, 1], 4, &f), None);
        assert_eq!(aligned_shape(&[3], 4, &f), None);
        // [batch, features]
        assert_eq!(aligned_shape(&[1, 7], 2, &[7]), Some(vec![7]));
        assert_eq!(aligned_shape(&[7], 2, &[7]), Some(vec![7]));
        assert_eq!(aligned_shape(&[2, 7], 2, &[7]), None);
    }
}
