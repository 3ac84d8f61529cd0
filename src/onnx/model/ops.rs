//! The op registry (as tract's `register_all_ops`): every ONNX op lipfp reads is one entry of
//! [`OPS`], with its domain, the leading inputs its reader takes by position, its schema at
//! each opset (checked by [`crate::onnx::checks::check_node`] before the reader runs), the
//! reader and how [`supported_ops`] names it. The walk over the graph (`graph`) dispatches
//! through it, every refusal lists [`supported_ops`], and docs/models.md's table of supported
//! ops is checked against it. Adding an op is one entry (and its reader, in its op family's
//! file).

use std::sync::OnceLock;

use super::builder::Builder;
use super::heads::ML_DOMAIN;
use crate::error::LipfpError;
use crate::onnx::checks::Schema;
use crate::onnx::reader::proto;
use proto::attribute_proto::AttributeType::{
    self, Float, Floats, Int, Ints, SparseTensor, String as Str, Strings, Tensor,
};

/// A reader: the node, its label and its input names (the leading ones checked present).
type Read =
    for<'a> fn(&mut Builder<'a>, &'a proto::NodeProto, &str, &[&str]) -> Result<(), LipfpError>;

/// Where an op stands in the sentence of [`supported_ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    /// A layer, its bias and activation, or a pass-through or shape op.
    Layer,
    /// An elementwise affine step by a constant.
    Affine,
    /// A classifier head after the logits.
    Head,
}

/// One op lipfp reads.
pub(super) struct OpDef {
    /// The op type.
    pub name: &'static str,
    /// Its domain: `""` (the default, also written `ai.onnx`) or `ai.onnx.ml`.
    pub domain: &'static str,
    /// How [`supported_ops`] names it: per family, the words after its name.
    pub mentions: &'static [(Family, &'static str)],
    /// The leading inputs its reader takes by position (a missing one is an error).
    pub inputs_read: usize,
    /// Its schema at an opset; `None`: the reader checks the node itself (`ai.onnx.ml` ops,
    /// which the model's default opset does not version) and reads a head's input itself.
    pub schema: Option<fn(i64) -> Schema>,
    /// The reader.
    pub read: Read,
}

const GEMM: [(&str, AttributeType); 4] = [
    ("alpha", Float),
    ("beta", Float),
    ("transA", Int),
    ("transB", Int),
];
const CONSTANT: [(&str, AttributeType); 8] = [
    ("value", Tensor),
    ("sparse_value", SparseTensor),
    ("value_float", Float),
    ("value_floats", Floats),
    ("value_int", Int),
    ("value_ints", Ints),
    ("value_string", Str),
    ("value_strings", Strings),
];
const NONE: [(&str, AttributeType); 0] = [];

/// A schema of `inputs` and `outputs` (inclusive ranges) and attributes `attrs`.
const fn s(
    inputs: (usize, usize),
    outputs: (usize, usize),
    attrs: &'static [(&'static str, AttributeType)],
) -> Schema {
    Schema {
        inputs,
        outputs,
        attrs,
    }
}

use Family::{Affine, Head, Layer};

/// An op of the default domain: its name, how [`supported_ops`] names it, the leading inputs
/// its reader takes, its schema at an opset, its reader.
const fn op(
    name: &'static str,
    mentions: &'static [(Family, &'static str)],
    inputs_read: usize,
    schema: fn(i64) -> Schema,
    read: Read,
) -> OpDef {
    OpDef {
        name,
        domain: "",
        mentions,
        inputs_read,
        schema: Some(schema),
        read,
    }
}

/// An `ai.onnx.ml` op, whose reader checks the node itself.
const fn ml_op(
    name: &'static str,
    mentions: &'static [(Family, &'static str)],
    read: Read,
) -> OpDef {
    OpDef {
        name,
        domain: ML_DOMAIN,
        mentions,
        inputs_read: 0,
        schema: None,
        read,
    }
}

/// Every op lipfp reads, in the order [`supported_ops`] names them.
pub(super) static OPS: &[OpDef] = &[
    op(
        "Gemm",
        &[(Layer, "")],
        2,
        |v| s(if v >= 11 { (2, 3) } else { (3, 3) }, (1, 1), &GEMM),
        |b, n, l, i| b.gemm(n, l, i),
    ),
    op(
        "MatMul",
        &[(Layer, "")],
        2,
        |_| s((2, 2), (1, 1), &NONE),
        |b, n, l, i| b.matmul(n, l, i),
    ),
    op(
        "Add",
        &[(Layer, " (bias)"), (Affine, "")],
        2,
        |_| s((2, 2), (1, 1), &NONE),
        |b, n, l, i| b.add(n, l, i),
    ),
    op(
        "Relu",
        &[(Layer, "")],
        1,
        |_| s((1, 1), (1, 1), &NONE),
        |b, n, l, i| b.relu(n, l, i),
    ),
    op(
        "Flatten",
        &[(Layer, "")],
        1,
        |_| s((1, 1), (1, 1), &[("axis", Int)]),
        |b, n, l, i| b.flatten(n, l, i),
    ),
    op(
        "Reshape",
        &[(Layer, "")],
        2,
        |v| match v {
            14.. => s((2, 2), (1, 1), &[("allowzero", Int)]),
            _ => s((2, 2), (1, 1), &NONE),
        },
        |b, n, l, i| b.reshape(n, l, i),
    ),
    op(
        "Shape",
        &[(Layer, "")],
        1,
        |v| match v {
            15.. => s((1, 1), (1, 1), &[("start", Int), ("end", Int)]),
            _ => s((1, 1), (1, 1), &NONE),
        },
        |b, n, l, i| b.shape(n, l, i),
    ),
    op(
        "Gather",
        &[(Layer, "")],
        2,
        |_| s((2, 2), (1, 1), &[("axis", Int)]),
        |b, n, l, i| b.gather(n, l, i),
    ),
    op(
        "Unsqueeze",
        &[(Layer, "")],
        1,
        |v| match v {
            13.. => s((2, 2), (1, 1), &NONE),
            _ => s((1, 1), (1, 1), &[("axes", Ints)]),
        },
        |b, n, l, i| b.squeeze(n, l, i),
    ),
    op(
        "Squeeze",
        &[(Layer, "")],
        1,
        |v| match v {
            13.. => s((1, 2), (1, 1), &NONE),
            _ => s((1, 1), (1, 1), &[("axes", Ints)]),
        },
        |b, n, l, i| b.squeeze(n, l, i),
    ),
    op(
        "Concat",
        &[(Layer, "")],
        1,
        |_| s((1, usize::MAX), (1, 1), &[("axis", Int)]),
        |b, n, l, i| b.concat(n, l, i),
    ),
    op(
        "Constant",
        &[(Layer, "")],
        0,
        |v| match v {
            12.. => s((0, 0), (1, 1), &CONSTANT),
            11 => s((0, 0), (1, 1), CONSTANT.split_at(2).0),
            _ => s((0, 0), (1, 1), CONSTANT.split_at(1).0),
        },
        |b, n, l, _| b.constant(n, l),
    ),
    op(
        "Identity",
        &[(Layer, "")],
        1,
        |_| s((1, 1), (1, 1), &NONE),
        |b, n, l, i| b.identity(n, l, i),
    ),
    op(
        "Cast",
        &[(Layer, " (to a float type)")],
        1,
        |v| match v {
            19.. => s((1, 1), (1, 1), &[("to", Int), ("saturate", Int)]),
            _ => s((1, 1), (1, 1), &[("to", Int)]),
        },
        |b, n, l, i| b.cast(n, l, i),
    ),
    op(
        "Dropout",
        &[(Layer, " (inference)")],
        1,
        |v| match v {
            12.. => s((1, 3), (1, 2), &[("seed", Int)]),
            _ => s((1, 1), (1, 2), &[("ratio", Float)]),
        },
        |b, n, l, i| b.dropout(n, l, i),
    ),
    op(
        "Sub",
        &[(Affine, "")],
        2,
        |_| s((2, 2), (1, 1), &NONE),
        |b, n, l, i| b.binary_step(n, l, i),
    ),
    op(
        "Mul",
        &[(Affine, "")],
        2,
        |_| s((2, 2), (1, 1), &NONE),
        |b, n, l, i| b.binary_step(n, l, i),
    ),
    op(
        "Div",
        &[(Affine, "")],
        2,
        |_| s((2, 2), (1, 1), &NONE),
        |b, n, l, i| b.binary_step(n, l, i),
    ),
    op(
        "BatchNormalization",
        &[(Affine, " (inference)")],
        2,
        |v| match v {
            14.. => s(
                (5, 5),
                (1, 3),
                &[
                    ("epsilon", Float),
                    ("momentum", Float),
                    ("training_mode", Int),
                ],
            ),
            9.. => s((5, 5), (1, 5), &[("epsilon", Float), ("momentum", Float)]),
            _ => s(
                (5, 5),
                (1, 5),
                &[
                    ("epsilon", Float),
                    ("momentum", Float),
                    ("spatial", Int),
                    ("is_test", Int),
                    ("consumed_inputs", Ints),
                ],
            ),
        },
        |b, n, l, i| b.batch_norm(n, l, i),
    ),
    ml_op("Scaler", &[(Affine, "")], |b, n, l, _| b.scaler(n, l)),
    op(
        "Softmax",
        &[(Head, "")],
        1,
        |_| s((1, 1), (1, 1), &[("axis", Int)]),
        |b, n, l, i| b.softmax(n, l, i),
    ),
    op(
        "LogSoftmax",
        &[(Head, "")],
        1,
        |_| s((1, 1), (1, 1), &[("axis", Int)]),
        |b, n, l, i| b.softmax(n, l, i),
    ),
    op(
        "ArgMax",
        &[(Head, "")],
        1,
        |v| match v {
            12.. => s(
                (1, 1),
                (1, 1),
                &[("axis", Int), ("keepdims", Int), ("select_last_index", Int)],
            ),
            _ => s((1, 1), (1, 1), &[("axis", Int), ("keepdims", Int)]),
        },
        |b, n, l, i| b.argmax(n, l, i),
    ),
    ml_op(
        "ArrayFeatureExtractor",
        &[(Head, " (class labels 0..K-1)")],
        |b, n, l, _| b.ml_head(n, l),
    ),
    ml_op("ZipMap", &[(Head, "")], |b, n, l, _| b.ml_head(n, l)),
];

/// The entry of op `op` in `domain` (`""` and `ai.onnx` are the default domain), if lipfp
/// reads it.
pub(super) fn op_def(domain: &str, op: &str) -> Option<&'static OpDef> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    OPS.iter().find(|d| d.name == op && d.domain == domain)
}

/// The ops lipfp reads, in one sentence: the layers and pass-throughs, the elementwise affine
/// steps, the heads (every refusal lists it).
pub fn supported_ops() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let family = |f: Family| {
            let names: Vec<String> = (OPS.iter())
                .flat_map(|d| d.mentions.iter().map(move |m| (d, m)))
                .filter(|(_, (g, _))| *g == f)
                .map(|(d, (_, words))| match d.domain {
                    "" => format!("{}{words}", d.name),
                    domain => format!("{domain} {}{words}", d.name),
                })
                .collect();
            names.join(", ")
        };
        format!(
            "{}; elementwise affine steps by a constant: {}; heads after the logits: {}",
            family(Layer),
            family(Affine),
            family(Head)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_named_once_and_mentioned() {
        for (k, d) in OPS.iter().enumerate() {
            assert!(OPS[..k]
                .iter()
                .all(|e| (e.name, e.domain) != (d.name, d.domain)));
            assert!(!d.mentions.is_empty(), "{}", d.name);
            assert!(std::ptr::eq(op_def(d.domain, d.name).unwrap(), d));
            // the schema admits the inputs the reader takes
            if let Some(schema) = d.schema {
                for opset in [1, 11, 13, 21] {
                    assert!(schema(opset).inputs.1 >= d.inputs_read, "{}", d.name);
                }
            }
        }
        assert!(op_def("ai.onnx", "Relu").is_some() && op_def(ML_DOMAIN, "Relu").is_none());
        assert!(op_def("", "Conv").is_none());
    }

    #[test]
    fn the_sentence_names_every_op_in_its_family() {
        assert_eq!(
            supported_ops(),
            "Gemm, MatMul, Add (bias), Relu, Flatten, Reshape, Shape, Gather, Unsqueeze, \
             Squeeze, Concat, Constant, Identity, Cast (to a float type), Dropout (inference); \
             elementwise affine steps by a constant: Add, Sub, Mul, Div, BatchNormalization \
             (inference), ai.onnx.ml Scaler; heads after the logits: Softmax, LogSoftmax, \
             ArgMax, ai.onnx.ml ArrayFeatureExtractor (class labels 0..K-1), ai.onnx.ml ZipMap"
        );
    }

    /// docs/models.md's table of supported ops names exactly the registry's ops.
    #[test]
    fn the_models_docs_list_every_op() {
        let doc = include_str!("../../../docs/models.md");
        let start = doc.find("## Supported ops").unwrap();
        let end = start + doc[start..].find("\n## ").unwrap_or(doc.len() - start);
        let mut named: Vec<&str> = (doc[start..end].lines())
            .filter(|l| l.starts_with("| ") && !l.starts_with("| op or pattern"))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .collect();
        named.sort_unstable();
        named.dedup();
        let mut ops: Vec<&str> = OPS.iter().map(|d| d.name).collect();
        ops.sort_unstable();
        assert_eq!(named, ops);
    }
}
