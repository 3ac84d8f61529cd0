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
//!   malformed or oversized weight is refused before a byte of it is read.
//!
//! Whether lipfp supports what a valid model means is decided in [`crate::model`].

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use crate::error::LipfpError;
use crate::onnx::{data_type_name, proto};
use proto::attribute_proto::AttributeType;
use proto::tensor_proto::{DataLocation, DataType};

/// The largest number of elements lipfp reads from one tensor: 2^28 (1 GiB of float32, far
/// above any dense layer a certificate is practical for). A larger claim is refused before any
/// allocation.
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 28;

/// The largest tensor rank lipfp reads (NumPy's limit), and the most axes one `Squeeze` or
/// `Unsqueeze` may name.
pub const MAX_RANK: usize = 64;

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

/// The schema of a supported operator at one opset: input and output counts and attributes.
struct Schema {
    inputs: (usize, usize),
    outputs: (usize, usize),
    attrs: &'static [(&'static str, AttributeType)],
}

/// The schema of `op` at `opset` (the ops of [`crate::model::SUPPORTED_OPS`]; `None` for others).
fn schema(op: &str, opset: i64) -> Option<Schema> {
    use AttributeType::{Float, Floats, Int, Ints, SparseTensor, String, Strings, Tensor};
    const CONSTANT: [(&str, AttributeType); 8] = [
        ("value", Tensor),
        ("sparse_value", SparseTensor),
        ("value_float", Float),
        ("value_floats", Floats),
        ("value_int", Int),
        ("value_ints", Ints),
        ("value_string", String),
        ("value_strings", Strings),
    ];
    let s = |inputs, outputs, attrs| {
        Some(Schema {
            inputs,
            outputs,
            attrs,
        })
    };
    const GEMM: [(&str, AttributeType); 4] = [
        ("alpha", Float),
        ("beta", Float),
        ("transA", Int),
        ("transB", Int),
    ];
    match op {
        "Gemm" if opset >= 11 => s((2, 3), (1, 1), &GEMM),
        "Gemm" => s((3, 3), (1, 1), &GEMM),
        "MatMul" | "Add" => s((2, 2), (1, 1), &[]),
        "Relu" | "Identity" => s((1, 1), (1, 1), &[]),
        "Flatten" => s((1, 1), (1, 1), &[("axis", Int)]),
        "Reshape" if opset >= 14 => s((2, 2), (1, 1), &[("allowzero", Int)]),
        "Reshape" => s((2, 2), (1, 1), &[]),
        "Shape" if opset >= 15 => s((1, 1), (1, 1), &[("start", Int), ("end", Int)]),
        "Shape" => s((1, 1), (1, 1), &[]),
        "Gather" => s((2, 2), (1, 1), &[("axis", Int)]),
        "Unsqueeze" if opset >= 13 => s((2, 2), (1, 1), &[]),
        "Squeeze" if opset >= 13 => s((1, 2), (1, 1), &[]),
        "Unsqueeze" | "Squeeze" => s((1, 1), (1, 1), &[("axes", Ints)]),
        "Concat" => s((1, usize::MAX), (1, 1), &[("axis", Int)]),
        "Constant" if opset >= 12 => s((0, 0), (1, 1), &CONSTANT),
        "Constant" if opset >= 11 => s((0, 0), (1, 1), &CONSTANT[..2]),
        "Constant" => s((0, 0), (1, 1), &CONSTANT[..1]),
        "Cast" if opset >= 19 => s((1, 1), (1, 1), &[("to", Int), ("saturate", Int)]),
        "Cast" => s((1, 1), (1, 1), &[("to", Int)]),
        "Dropout" if opset >= 12 => s((1, 3), (1, 2), &[("seed", Int)]),
        "Dropout" => s((1, 1), (1, 2), &[("ratio", Float)]),
        _ => None,
    }
}

/// The name of an `AttributeProto.type` code.
fn attr_type_name(code: i32) -> String {
    AttributeType::try_from(code)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or_else(|_| format!("unknown({code})"))
}

/// A supported node's attributes and input/output counts against its schema at `opset`
/// (nodes of other op types are left to the loader, which refuses them).
pub fn check_node(
    path: &Path,
    label: &str,
    node: &proto::NodeProto,
    opset: i64,
) -> Result<(), LipfpError> {
    let op = node.op_type.as_str();
    let Some(s) = schema(op, opset) else {
        return Ok(());
    };
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

/// The element count of `dims`: non-negative, overflow-checked, at most [`MAX_TENSOR_ELEMENTS`].
pub fn element_count(dims: &[i64]) -> Result<usize, String> {
    if dims.len() > MAX_RANK {
        return Err(format!("rank {} exceeds {MAX_RANK}", dims.len()));
    }
    let mut count: usize = 1;
    for &d in dims {
        let d = usize::try_from(d).map_err(|_| format!("dims {dims:?} have a negative entry"))?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| format!("dims {dims:?}: the element count overflows"))?;
    }
    if count > MAX_TENSOR_ELEMENTS {
        return Err(format!(
            "dims {dims:?} declare {count} elements; lipfp reads at most {MAX_TENSOR_ELEMENTS} (2^28) per tensor"
        ));
    }
    Ok(count)
}

/// Bytes per element of the element types lipfp can store, `None` for the others.
fn element_size(dt: DataType) -> Option<usize> {
    use DataType::*;
    match dt {
        Uint8 | Int8 | Bool => Some(1),
        Uint16 | Int16 | Float16 | Bfloat16 => Some(2),
        Float | Int32 | Uint32 => Some(4),
        Double | Int64 | Uint64 => Some(8),
        _ => None,
    }
}

/// The typed `*_data` fields of `t` that hold values, with their lengths.
fn typed_fields(t: &proto::TensorProto) -> Vec<(&'static str, usize)> {
    [
        ("float_data", t.float_data.len()),
        ("int32_data", t.int32_data.len()),
        ("string_data", t.string_data.len()),
        ("int64_data", t.int64_data.len()),
        ("double_data", t.double_data.len()),
        ("uint64_data", t.uint64_data.len()),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect()
}

/// The typed field the specification assigns to `dt` (uint32/uint64 values live in
/// `uint64_data`, which the decoder does not read: `None`).
fn typed_field(dt: DataType) -> Option<&'static str> {
    use DataType::*;
    match dt {
        Float => Some("float_data"),
        Double => Some("double_data"),
        Int64 => Some("int64_data"),
        Uint8 | Int8 | Uint16 | Int16 | Int32 | Bool | Float16 | Bfloat16 => Some("int32_data"),
        _ => None,
    }
}

/// Check how `t` stores its values against its declared dims and element type, without
/// reading them (external data: file metadata only). Returns the element count.
pub fn check_storage(t: &proto::TensorProto, model_dir: Option<&Path>) -> Result<usize, String> {
    let count = element_count(&t.dims)?;
    let type_name = data_type_name(t.data_type);
    let dt = DataType::try_from(t.data_type)
        .map_err(|_| format!("unknown element type code {}", t.data_type))?;
    let size =
        element_size(dt).ok_or_else(|| format!("element type {type_name} is not supported"))?;
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    let bytes = count * size;
    let typed = typed_fields(t);
    let need = format!("dims {:?} of {type_name} need {bytes} bytes", t.dims);
    match t.data_location.map(DataLocation::try_from) {
        Some(Ok(DataLocation::External)) => {
            if let Some((field, _)) = typed.first() {
                return Err(format!(
                    "data_location is EXTERNAL but the tensor also holds {field}: ambiguous"
                ));
            }
            if !t.raw_data.is_empty() {
                return Err(
                    "data_location is EXTERNAL but the tensor also holds raw_data: ambiguous"
                        .into(),
                );
            }
            check_external(t, model_dir, bytes, &need)?;
            return Ok(count);
        }
        None | Some(Ok(DataLocation::Default)) => {}
        Some(Err(_)) => return Err(format!("unknown data_location {:?}", t.data_location)),
    }
    if !t.external_data.is_empty() {
        return Err("external_data entries without data_location = EXTERNAL: ambiguous".into());
    }
    if !t.raw_data.is_empty() {
        if let Some((field, _)) = typed.first() {
            return Err(format!(
                "the tensor holds both raw_data and {field}: ambiguous"
            ));
        }
        if t.raw_data.len() != bytes {
            return Err(format!("raw_data holds {} bytes; {need}", t.raw_data.len()));
        }
        return Ok(count);
    }
    let field = typed_field(dt).ok_or_else(|| {
        format!("{type_name} values must be stored in raw_data (typed storage is not supported)")
    })?;
    if let Some((other, _)) = typed.iter().find(|(f, _)| *f != field) {
        return Err(format!(
            "{type_name} values are stored in {field}, not {other}"
        ));
    }
    let held = typed.first().map(|(_, n)| *n).unwrap_or(0);
    if held != count {
        return Err(format!(
            "{field} holds {held} values; dims {:?} need {count}",
            t.dims
        ));
    }
    Ok(count)
}

/// The external data region of `t`: keys `location` (a relative path inside the model's
/// directory, each key once), `offset` and `length` (decimal), `checksum` (not verified); the
/// region must lie in a regular file and hold exactly `bytes` bytes.
fn check_external(
    t: &proto::TensorProto,
    model_dir: Option<&Path>,
    bytes: usize,
    need: &str,
) -> Result<(), String> {
    let (mut location, mut offset, mut length) = (None, None, None);
    for e in &t.external_data {
        let slot = match e.key.as_str() {
            "location" => &mut location,
            "offset" => &mut offset,
            "length" => &mut length,
            "checksum" => continue,
            other => return Err(format!("unknown external_data key `{other}`")),
        };
        if slot.replace(e.value.as_str()).is_some() {
            return Err(format!(
                "external_data key `{}` is given more than once: ambiguous",
                e.key
            ));
        }
    }
    let location = location.ok_or("external data has no `location`")?;
    let number = |key: &str, v: Option<&str>| -> Result<Option<u64>, String> {
        v.map(|s| {
            s.parse::<u64>()
                .map_err(|_| format!("external_data `{key}` = {s:?} is not a byte count"))
        })
        .transpose()
    };
    let offset = number("offset", offset)?.unwrap_or(0);
    let length = number("length", length)?;
    let file = resolve_location(model_dir, location)?;
    let meta = std::fs::metadata(&file).map_err(|e| format!("external data `{location}`: {e}"))?;
    if !meta.is_file() {
        return Err(format!("external data `{location}` is not a regular file"));
    }
    let size = meta.len();
    let region = match length {
        Some(l) if offset.checked_add(l).is_some_and(|end| end <= size) => l,
        None if offset <= size => size - offset,
        _ => {
            return Err(format!(
            "external data `{location}`: offset {offset}{} lies outside the file ({size} bytes)",
            length.map(|l| format!(" + length {l}")).unwrap_or_default()
        ))
        }
    };
    if region != bytes as u64 {
        return Err(format!(
            "external data `{location}` holds {region} bytes from offset {offset}; {need}"
        ));
    }
    Ok(())
}

/// The file an external-data `location` names: a relative path of plain components that stays
/// inside the model's directory after resolving links.
fn resolve_location(model_dir: Option<&Path>, location: &str) -> Result<PathBuf, String> {
    let rel = Path::new(location);
    if location.is_empty()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "external data location {location:?} must be a relative path inside the model's directory"
        ));
    }
    let dir = match model_dir {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("the model's directory: {e}"))?;
    let file = dir
        .join(rel)
        .canonicalize()
        .map_err(|e| format!("external data `{location}`: {e}"))?;
    if !file.starts_with(&dir) {
        return Err(format!(
            "external data `{location}` resolves outside the model's directory"
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_are_checked_before_any_allocation() {
        assert_eq!(element_count(&[]), Ok(1));
        assert_eq!(element_count(&[3, 0, 5]), Ok(0));
        assert!(element_count(&[-1, 4]).unwrap_err().contains("negative"));
        assert!(element_count(&[1 << 32, 1 << 32])
            .unwrap_err()
            .contains("overflows"));
        assert!(element_count(&[1 << 20, 1 << 20])
            .unwrap_err()
            .contains("at most"));
    }

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
