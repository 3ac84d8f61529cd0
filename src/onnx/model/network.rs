//! The network a certificate is about: dense layers ([`Dense`]) with their activations
//! ([`Activation`]) and the classifier head's arg-max-preserving ops ([`HeadOp`]), as one
//! [`DenseNet`].

use std::path::PathBuf;

use ndarray::Array2;
use sha2::{Digest, Sha256};

use crate::arith::format::Format;

use super::affine::AffineStep;

/// An arg-max-preserving op of the classifier head after the logits (docs/soundness.md
/// "Classifier heads"): the certified class is the one it ranks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HeadOp {
    /// `Relu` after the output layer: read as one more class whose output is 0 (the zero
    /// floor), appended to the output layer ([`DenseNet::read_relu_output`]).
    Relu,
    /// `Softmax` over the class axis.
    Softmax,
    /// `LogSoftmax` over the class axis.
    LogSoftmax,
    /// `ArgMax` over the class axis (of the logits or of one of the above).
    ArgMax,
}

impl HeadOp {
    /// The ONNX op type.
    pub fn name(self) -> &'static str {
        match self {
            HeadOp::Relu => "Relu",
            HeadOp::Softmax => "Softmax",
            HeadOp::LogSoftmax => "LogSoftmax",
            HeadOp::ArgMax => "ArgMax",
        }
    }
}

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
    /// When set, the layer is this elementwise affine step instead of a matrix product, and `w`
    /// and `b` are empty (docs/soundness.md "Affine steps").
    pub affine: Option<AffineStep>,
}

impl Dense {
    /// Whether the layer's product was read from a `MatMul` node (onnxruntime may fold a
    /// scalar scaling before it into the product; `Gemm` it does not).
    pub fn product_is_matmul(&self) -> bool {
        self.ops.first().is_some_and(|op| op == "MatMul")
    }

    /// Whether the layer's bias was read from a separate `Add` node (added after the product
    /// is rounded, not fused into its accumulation).
    pub fn bias_is_separate(&self) -> bool {
        self.ops.iter().any(|op| op == "Add")
    }

    /// Input dimension `n_l`.
    pub fn n(&self) -> usize {
        self.affine.as_ref().map_or(self.w.ncols(), |s| s.width)
    }
    /// Output dimension `m_l`.
    pub fn m(&self) -> usize {
        self.affine.as_ref().map_or(self.w.nrows(), |s| s.width)
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
    /// The classifier head's ops after the logits, sorted, without repeats (empty when the graph
    /// outputs the logits).
    pub head: Vec<HeadOp>,
    /// Deployment format the weights were converted to.
    pub format: Format,
    /// How many weight and bias entries the conversion to `format` changed.
    pub converted_changed: usize,
    /// Model file the network was read from.
    pub path: PathBuf,
}

#[cfg(test)]
impl DenseNet {
    /// A network of `layers` in `format` for unit tests: graph input `x` of the first layer's
    /// width, no head, no model file.
    pub(crate) fn of_layers(layers: Vec<Dense>, format: Format) -> DenseNet {
        let width = layers.first().map_or(0, |l| l.w.ncols());
        DenseNet {
            layers,
            input_name: "x".into(),
            input_shape: vec![width],
            head: Vec::new(),
            format,
            converted_changed: 0,
            path: "test.onnx".into(),
        }
    }
}

impl DenseNet {
    /// Read the outputs by their smallest (`decision = "argmin"`): negate the output layer's weights and bias
    /// (exact). Floating-point rounding is symmetric (`fl(-a) = -fl(a)`, in every summation
    /// order, with or without FMA), so the negated layer's deployed outputs are exactly the
    /// negated outputs, and the first largest of them is the first smallest of the originals: the
    /// argmax certificates then certify the argmin decision (docs/soundness.md "Decision rules").
    /// Refused for a model with a classifier head (its ops rank the largest first) or an output
    /// layer that is an affine step.
    pub fn read_as_argmin(&mut self) -> Result<(), String> {
        if !self.head.is_empty() {
            return Err(
                "decision = \"argmin\" needs a model that outputs its scores; this one ends in a \
                 classifier head (Softmax/LogSoftmax/ArgMax), which ranks the largest first"
                    .into(),
            );
        }
        let last = self
            .layers
            .last_mut()
            .ok_or_else(|| "the model has no layer".to_string())?;
        if last.affine.is_some() {
            return Err("decision = \"argmin\" is not supported when the output layer is an elementwise affine step".into());
        }
        last.w.mapv_inplace(|v| -v);
        last.b.iter_mut().for_each(|v| *v = -*v);
        Ok(())
    }

    /// A `Relu` after the output layer, read exactly: `argmax_k relu(z_k)` is class `i` when
    /// `z_i > 0` and `z_i > z_j` for every `j != i`, that is when `i` is the first largest of
    /// `(z_1, ..., z_m, 0)`. The output layer gets one more row (weights and bias 0, so its deployed
    /// output is exactly 0 in every execution) and the head op [`HeadOp::Relu`] records it: the
    /// argmax certificates of the augmented network then certify the ReLU classifier wherever the
    /// certified class is a real one (docs/soundness.md "Classifier heads").
    pub fn read_relu_output(&mut self) {
        let Some(last) = self.layers.last_mut() else {
            return;
        };
        if last.act != Activation::Relu || last.affine.is_some() {
            return;
        }
        let (m, n) = last.w.dim();
        let mut w = Array2::zeros((m + 1, n));
        w.slice_mut(ndarray::s![..m, ..]).assign(&last.w);
        last.w = w;
        last.b.push(0.0);
        last.act = Activation::Identity;
        self.head.insert(0, HeadOp::Relu);
    }

    /// The zero-floor class a ReLU output adds ([`DenseNet::read_relu_output`]), never certified.
    pub fn floor_class(&self) -> Option<usize> {
        self.head
            .contains(&HeadOp::Relu)
            .then(|| self.classes() - 1)
    }

    /// The classes labels may name (the zero-floor class of a ReLU output excluded).
    pub fn label_classes(&self) -> usize {
        self.classes() - usize::from(self.floor_class().is_some())
    }

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
            if let Some(step) = &l.affine {
                step.hash_into(&mut h);
            }
        }
        for op in &self.head {
            h.update(b"head:");
            h.update(op.name().as_bytes());
        }
        hex(&h.finalize())
    }
}

/// Lowercase hexadecimal of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
