//! ONNX -> [`DenseNet`]: the chain of dense layers a certificate is about.
//!
//! The loader walks the ONNX protobuf node by node (tract renames ops and merges constants in
//! its own graph, so op types, attributes and initializers are read from the protobuf; see
//! [`crate::onnx::reader`]). It accepts what real exporters emit for dense ReLU classifiers and refuses
//! everything else naming the node, its op type and the supported set, with the reason and,
//! where one is known, the cure. The specification's rules (attribute schemas, one definition
//! per name, tensor storage) are checked first ([`crate::onnx::checks`]); weight and bias values
//! are decoded only once the whole graph has been checked against their declared shapes.
//!
//! Every weight and bias is converted to the declared deployment format by round-to-nearest-even:
//! that converted network, read as exact reals, is the network `N` that is certified.
//!
//! The reader, module by module:
//!
//! * `graph`: the walk. It reads and checks the protobuf, seeds the value table with the graph
//!   input and the initializers, hands every node to its op family in order and checks that the
//!   graph output is the end of the chain of layers (the logits).
//! * `builder`: the walk's state. The value table (what each tensor name holds), the chain of
//!   layers being built, and the lookups every op family reads its inputs with.
//! * One module per op family: `dense` (Gemm, MatMul, bias Add), `reshape` (Flatten, Reshape),
//!   `shapes` (the activation's symbolic shape and the Shape, Gather, Squeeze, Unsqueeze and
//!   Concat computations on it), `activation` (Relu), `pass_through` (Identity, Cast, Dropout)
//!   and `constants` (Constant nodes and initializers).
//! * `weights`: the layers' tensors, decoded once the graph is checked and converted to the
//!   deployment format.
//! * `refusals`: why an op or a use lipfp does not read is refused, and what to do about it.
//! * `network`: what the walk builds, the [`DenseNet`] of [`Dense`] layers.

use std::path::Path;

use crate::arith::format::Format;
use crate::error::LipfpError;

pub use affine::{batch_norm_scale, AffineStep, ElementOp};
pub use network::{hex, Activation, Dense, DenseNet, HeadOp};
pub use ops::supported_ops;

mod activation;
mod affine;
mod builder;
mod constants;
mod dense;
mod graph;
mod heads;
mod network;
mod ops;
mod pass_through;
mod refusals;
mod reshape;
mod shapes;
mod weights;

/// The format the network computes in: the element type of every dense layer's input
/// activation (the graph input's type, changed by `Cast` nodes), which ONNX makes the type of the
/// layer's weights too. This is the deployment format when neither the policy nor the command line
/// names one; layers computing in different types are refused as ambiguous (declare the format).
pub fn stored_format(path: &Path) -> Result<Format, LipfpError> {
    let (_, compute) = graph::build(path, Format::Float64, false, false)?;
    let Some((_, first)) = compute.first() else {
        return Err(LipfpError::model(path, "the graph has no dense layer"));
    };
    if let Some((node, other)) = compute.iter().find(|(_, f)| f != first) {
        return Err(LipfpError::model(
            path,
            format!(
                "the layers compute in different formats ({first} at the first layer, {other} at `{node}`); \
                 declare the deployment format (format in the policy, --format) to certify them as one"
            ),
        ));
    }
    Ok(*first)
}

/// Load an ONNX dense ReLU classifier and convert it to `format`. A layer whose input the graph
/// types narrower than `format` (e.g. after a `Cast` to float16 in a float32 network) computes in
/// that narrower type and is refused.
pub fn load(path: &Path, format: Format, ftz: bool) -> Result<DenseNet, LipfpError> {
    graph::build(path, format, ftz, true).map(|(net, _)| net)
}
