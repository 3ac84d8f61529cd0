//! The ONNX specification's rules, checked on the protobuf before the loader reads any value.
//!
//! * **One definition per name**: initializers, graph inputs and node outputs are each defined
//!   once (onnxruntime takes one of two same-named initializers and rejects a value produced
//!   twice); an initializer that is also a graph input must agree with the input's declaration.
//! * **Attributes as the operator schema declares them** at the model's opset: no attribute
//!   twice, no unknown attribute (a typo such as `transb` is not silently ignored), each of the
//!   declared type (an INT given as FLOAT is not read as the default); input and output counts
//!   within the schema's range. onnxruntime refuses such models when it loads them.
//! * **Storage before values**: a tensor's dims are non-negative, their product does not
//!   overflow and stays within [`MAX_TENSOR_ELEMENTS`], and exactly one storage (raw bytes, the
//!   typed field of its element type, or an external file region inside the model's directory)
//!   holds exactly the declared number of bytes — checked with file metadata only, so a
//!   malformed or oversized weight is refused before a byte of it is read (`storage`).
//!
//! Whether lipfp supports what a valid model means is decided in [`crate::onnx::model`].

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::error::LipfpError;
use crate::onnx::reader::{data_type_name, proto};
use proto::attribute_proto::AttributeType;
use proto::tensor_proto::DataType;

mod storage;
pub use storage::{check_storage, element_count, MAX_RANK, MAX_TENSOR_ELEMENTS};

/// A node's name, or `op#index` when the node is unnamed.
pub fn node_label(node: &proto::NodeProto, index: usize) -> String {
    if node.name.is_empty() {
        format!("{}#{index}", node.op_type)
    } else {
        node.name.clone()
    }
}

/// The version of the default (`""` or `ai.onnx`) operator set the model imports.
pub fn default_opset(path: &Path, model: &proto::ModelProto) -> Result<i64, LipfpError> {
    let versions: Vec<i64> = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .collect();
    match versions[..] {
        [v] if v >= 1 => Ok(v),
        [v] => Err(LipfpError::model(
            path,
            format!("default-domain opset version {v} is not valid"),
        )),
        [] => Err(LipfpError::model(
            path,
            "the model imports no default-domain (ai.onnx) opset",
        )),
        _ => Err(LipfpError::model(
            path,
            format!("the model imports the default domain more than once (versions {versions:?}): ambiguous"),
        )),
    }
}

/// The schema of an operator at one opset: input and output counts (inclusive ranges) and
/// attributes with their types (the op registry, `crate::onnx::model`, holds one per op).
pub struct Schema {
    /// Fewest and most inputs.
    pub inputs: (usize, usize),
    /// Fewest and most outputs.
    pub outputs: (usize, usize),
    /// Every attribute the op has, with its type.
    pub attrs: &'static [(&'static str, AttributeType)],
}

/// The name of an `AttributeProto.type` code.
fn attr_type_name(code: i32) -> String {
    AttributeType::try_from(code)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or_else(|_| format!("unknown({code})"))
}

/// A node's attributes and input/output counts against its op's schema `s` at `opset`.
pub fn check_node(
    path: &Path,
    label: &str,
    node: &proto::NodeProto,
    (s, opset): (&Schema, i64),
) -> Result<(), LipfpError> {
    let op = node.op_type.as_str();
    let fail = |m: String| LipfpError::at_node(path, label, op, m);
    let mut seen = HashSet::new();
    for a in &node.attribute {
        if !seen.insert(a.name.as_str()) {
            return Err(fail(format!(
                "attribute `{}` is given more than once (ambiguous)",
                a.name
            )));
        }
        let Some(&(_, want)) = s.attrs.iter().find(|(n, _)| *n == a.name) else {
            let known: Vec<&str> = s.attrs.iter().map(|(n, _)| *n).collect();
            return Err(fail(format!(
                "unknown attribute `{}` (at opset {opset}, {op} has {})",
                a.name,
                if known.is_empty() {
                    "no attributes".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        if a.r#type != want as i32 {
            return Err(fail(format!(
                "attribute `{}` has type {}; the specification says {}",
                a.name,
                attr_type_name(a.r#type),
                want.as_str_name()
            )));
        }
        if !a.ref_attr_name.is_empty() {
            return Err(fail(format!(
                "attribute `{}` refers to a function attribute outside a function",
                a.name
            )));
        }
    }
    let count = |what: &str, n: usize, (lo, hi): (usize, usize)| {
        if n < lo || n > hi {
            let range = match (lo, hi) {
                (lo, usize::MAX) => format!("at least {lo}"),
                (lo, hi) if lo == hi => format!("{lo}"),
                (lo, hi) => format!("{lo} to {hi}"),
            };
            return Err(fail(format!(
                "has {n} {what}s; at opset {opset} {op} takes {range}"
            )));
        }
        Ok(())
    };
    count("input", node.input.len(), s.inputs)?;
    count("output", node.output.len(), s.outputs)
}

/// An INT attribute, `None` when absent; an attribute of another type is an error.
pub fn attr_int(node: &proto::NodeProto, name: &str) -> Result<Option<i64>, String> {
    typed_attr(node, name, AttributeType::Int).map(|a| a.map(|a| a.i))
}

/// A FLOAT attribute, `None` when absent; an attribute of another type is an error.
pub fn attr_float(node: &proto::NodeProto, name: &str) -> Result<Option<f32>, String> {
    typed_attr(node, name, AttributeType::Float).map(|a| a.map(|a| a.f))
}

/// An INTS attribute, `None` when absent; an attribute of another type is an error.
pub fn attr_ints<'n>(node: &'n proto::NodeProto, name: &str) -> Result<Option<&'n [i64]>, String> {
    typed_attr(node, name, AttributeType::Ints).map(|a| a.map(|a| a.ints.as_slice()))
}

/// A FLOATS attribute, `None` when absent; an attribute of another type is an error.
pub fn attr_floats<'n>(
    node: &'n proto::NodeProto,
    name: &str,
) -> Result<Option<&'n [f32]>, String> {
    typed_attr(node, name, AttributeType::Floats).map(|a| a.map(|a| a.floats.as_slice()))
}

fn typed_attr<'n>(
    node: &'n proto::NodeProto,
    name: &str,
    want: AttributeType,
) -> Result<Option<&'n proto::AttributeProto>, String> {
    let mut found = node.attribute.iter().filter(|a| a.name == name);
    let a = found.next();
    if found.next().is_some() {
        return Err(format!(
            "attribute `{name}` is given more than once (ambiguous)"
        ));
    }
    match a {
        Some(a) if a.r#type != want as i32 => Err(format!(
            "attribute `{name}` has type {}; the specification says {}",
            attr_type_name(a.r#type),
            want.as_str_name()
        )),
        a => Ok(a),
    }
}

/// The element type code of a `Cast`'s required `to` attribute.
pub fn cast_to(node: &proto::NodeProto) -> Result<i32, String> {
    let to = attr_int(node, "to")?.ok_or("the attribute `to` is required")?;
    i32::try_from(to)
        .ok()
        .filter(|&c| DataType::try_from(c).is_ok())
        .ok_or_else(|| format!("to = {to} is not an ONNX element type"))
}

/// `axis` in `[-rank, rank - 1]` (`[-rank, rank]` when `inclusive`) as a non-negative index.
pub fn normalize_axis(axis: i64, rank: usize, inclusive: bool) -> Result<usize, String> {
    let r = rank as i64;
    let hi = if inclusive { r } else { r - 1 };
    if axis < -r || axis > hi {
        return Err(format!(
            "axis {axis} is out of range for rank {rank} ([{}, {hi}])",
            -r
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// `Unsqueeze` of a tensor of shape `shape` by `axes` (ONNX semantics: axes index the output,
/// may be negative, and must be distinct), inserting `one`.
pub fn unsqueeze<T: Clone>(shape: &[T], axes: &[i64], one: T) -> Result<Vec<T>, String> {
    check_axes_count(axes)?;
    let rank = shape.len() + axes.len();
    let mut at = Vec::with_capacity(axes.len());
    for &a in axes {
        let k = normalize_axis(a, rank, false)?;
        if at.contains(&k) {
            return Err(format!("axes {axes:?} repeat an axis"));
        }
        at.push(k);
    }
    let mut rest = shape.iter();
    Ok((0..rank)
        .map(|k| {
            if at.contains(&k) {
                one.clone()
            } else {
                rest.next().cloned().unwrap_or_else(|| one.clone())
            }
        })
        .collect())
}

fn check_axes_count(axes: &[i64]) -> Result<(), String> {
    if axes.len() > MAX_RANK {
        return Err(format!(
            "{} axes; at most {MAX_RANK} are supported",
            axes.len()
        ));
    }
    Ok(())
}

/// `Squeeze` of a tensor of shape `shape` by `axes` (each of size one, by `is_one`), or of every
/// size-one dimension when `axes` is `None`.
pub fn squeeze<T: Clone>(
    shape: &[T],
    axes: Option<&[i64]>,
    is_one: impl Fn(&T) -> bool,
) -> Result<Vec<T>, String> {
    let removed: Vec<usize> = match axes {
        None => (0..shape.len()).filter(|&k| is_one(&shape[k])).collect(),
        Some(axes) => {
            check_axes_count(axes)?;
            let mut at = Vec::with_capacity(axes.len());
            for &a in axes {
                let k = normalize_axis(a, shape.len(), false)?;
                if at.contains(&k) {
                    return Err(format!("axes {axes:?} repeat an axis"));
                }
                if !is_one(&shape[k]) {
                    return Err(format!("axis {a} does not have size 1"));
                }
                at.push(k);
            }
            at
        }
    };
    Ok((0..shape.len())
        .filter(|k| !removed.contains(k))
        .map(|k| shape[k].clone())
        .collect())
}

/// One definition per name: initializers, graph inputs and node outputs; an initializer that
/// is also a graph input (a default the caller may override) agrees with its declaration.
pub fn check_names(path: &Path, graph: &proto::GraphProto) -> Result<(), LipfpError> {
    let mut defined: HashMap<&str, String> = HashMap::new();
    let mut inits: HashMap<&str, &proto::TensorProto> = HashMap::new();
    for t in &graph.initializer {
        if t.name.is_empty() {
            return Err(LipfpError::model(path, "an initializer has no name"));
        }
        defined.insert(&t.name, "an initializer".into());
        if inits.insert(&t.name, t).is_some() {
            return Err(LipfpError::model(
                path,
                format!(
                    "initializer `{}` is defined more than once (runtimes disagree on which one counts)",
                    t.name
                ),
            ));
        }
    }
    let mut inputs = HashSet::new();
    for i in &graph.input {
        if !inputs.insert(i.name.as_str()) {
            return Err(LipfpError::model(
                path,
                format!("graph input `{}` is declared more than once", i.name),
            ));
        }
        match inits.get(i.name.as_str()) {
            Some(t) => check_input_default(path, i, t)?,
            None => {
                defined.insert(&i.name, "a graph input".into());
            }
        }
    }
    for (index, node) in graph.node.iter().enumerate() {
        let label = node_label(node, index);
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            if let Some(first) = defined.insert(o, format!("node `{label}`")) {
                return Err(LipfpError::at_node(
                    path,
                    &label,
                    &node.op_type,
                    format!(
                        "output `{o}` is already defined by {first} (a value may be produced once)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A graph input that names an initializer declares the initializer's element type and dims.
fn check_input_default(
    path: &Path,
    input: &proto::ValueInfoProto,
    t: &proto::TensorProto,
) -> Result<(), LipfpError> {
    use proto::tensor_shape_proto::dimension::Value as DimValue;
    use proto::type_proto::Value as TypeValue;
    let err = |m: String| {
        LipfpError::model(
            path,
            format!(
                "graph input `{}` has an initializer of the same name, but {m}",
                input.name
            ),
        )
    };
    let Some(TypeValue::TensorType(tt)) = input.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(err("the input is not declared as a tensor".into()));
    };
    if tt.elem_type != t.data_type {
        return Err(err(format!(
            "the input is declared {} and the initializer is {}",
            data_type_name(tt.elem_type),
            data_type_name(t.data_type)
        )));
    }
    let Some(shape) = &tt.shape else {
        return Ok(());
    };
    let agrees = shape.dim.len() == t.dims.len()
        && shape.dim.iter().zip(&t.dims).all(|(d, &k)| match &d.value {
            Some(DimValue::DimValue(v)) => *v == k,
            _ => true,
        });
    if !agrees {
        let declared: Vec<String> = shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(v)) => v.to_string(),
                Some(DimValue::DimParam(p)) => p.clone(),
                None => "?".into(),
            })
            .collect();
        return Err(err(format!(
            "the input is declared [{}] and the initializer has dims {:?}",
            declared.join(", "),
            t.dims
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeeze_and_unsqueeze_follow_the_specification() {
        assert_eq!(unsqueeze::<usize>(&[], &[0], 1), Ok(vec![1]));
        assert_eq!(unsqueeze(&[3, 4], &[-1, 0], 1), Ok(vec![1, 3, 4, 1]));
        assert!(unsqueeze::<usize>(&[], &[1], 1).is_err());
        assert!(unsqueeze(&[3], &[0, 0], 1).is_err());
        let one = |d: &usize| *d == 1;
        assert_eq!(squeeze(&[1, 3, 1], None, one), Ok(vec![3]));
        assert_eq!(squeeze(&[1, 3, 1], Some(&[-1]), one), Ok(vec![1, 3]));
        assert!(squeeze(&[1, 3], Some(&[1]), one).is_err());
        assert!(squeeze(&[1, 3], Some(&[2]), one).is_err());
    }

    #[test]
    fn axes_are_normalized_within_the_rank() {
        assert_eq!(normalize_axis(-1, 2, false), Ok(1));
        assert_eq!(normalize_axis(2, 2, true), Ok(2));
        assert!(normalize_axis(2, 2, false).is_err());
        assert!(normalize_axis(-3, 2, true).is_err());
    }
}
