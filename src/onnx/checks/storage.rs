//! Storage before values: a tensor's dims are non-negative, their product does not overflow
//! and stays within [`MAX_TENSOR_ELEMENTS`], and exactly one storage (raw bytes, the typed field
//! of its element type, or an external file region inside the model's directory) holds exactly
//! the declared number of bytes. Only file metadata is consulted, so a malformed or oversized
//! tensor is refused before a byte of it is read.

use std::path::{Component, Path, PathBuf};

use crate::onnx::reader::{data_type_name, proto};
use proto::tensor_proto::{DataLocation, DataType};

/// The largest tensor rank lipfp reads (NumPy's limit), and the most axes one `Squeeze` or
/// `Unsqueeze` may name.
pub const MAX_RANK: usize = 64;

/// The largest number of elements lipfp reads from one tensor: 2^28 (1 GiB of float32, far
/// above any dense layer a certificate is practical for). A larger claim is refused before any
/// allocation.
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 28;

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
}
