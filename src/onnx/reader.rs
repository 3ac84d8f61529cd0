//! Every call into tract lives here (tract is pinned with `=`; accessor names move between
//! releases). The project reads op types, attributes and initializers from the protobuf itself
//! (tract renames ops and merges constants when it builds its own graph) and uses tract's
//! executor only to cross-check that reading.

use std::path::Path;

use tract_onnx::pb::{self, tensor_proto::DataType};
use tract_onnx::prelude::*;

/// Re-export of the prost-generated ONNX protobuf types the loader walks.
pub use tract_onnx::pb as proto;

/// A constant tensor decoded from an ONNX `TensorProto`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstTensor {
    /// Tensor dimensions.
    pub shape: Vec<usize>,
    /// Element values.
    pub data: ConstData,
}

/// Element values of a [`ConstTensor`], widened losslessly.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstData {
    /// float16, float32 or float64 values, exactly widened to `f64`.
    Float(Vec<f64>),
    /// Integer values (shape computations, indices).
    Int(Vec<i64>),
}

/// The largest model file read: the protobuf limit of 2 GiB (larger weights live in external
/// data files, checked separately).
pub const MAX_MODEL_BYTES: u64 = 2 << 30;

/// Read the ONNX protobuf without building tract's graph.
pub fn read_model_proto(path: &Path) -> Result<pb::ModelProto, String> {
    // a protobuf message cannot exceed 2 GiB; a device or a FIFO could be read without end
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read the model: {e}"))?;
    if !meta.is_file() {
        return Err("the model is not a regular file".into());
    }
    if meta.len() > MAX_MODEL_BYTES {
        return Err(format!(
            "the model file has {} bytes, more than an ONNX protobuf can hold ({MAX_MODEL_BYTES})",
            meta.len()
        ));
    }
    onnx()
        .proto_model_for_path(path)
        .map_err(|e| format!("not a readable ONNX protobuf: {e}"))
}

/// The ONNX element type name for a `TensorProto.DataType` code.
pub fn data_type_name(code: i32) -> String {
    match DataType::try_from(code) {
        Ok(dt) => format!("{dt:?}").to_lowercase(),
        Err(_) => format!("unknown({code})"),
    }
}

/// Decode a `TensorProto` (raw data, typed fields or external data next to the model), after
/// checking its declared dims against its storage without reading it
/// ([`crate::onnx::checks::check_storage`]): nothing is allocated from an unchecked count.
pub fn decode_tensor(t: &pb::TensorProto, model_dir: Option<&Path>) -> Result<ConstTensor, String> {
    crate::onnx::checks::check_storage(t, model_dir)?;
    let dt = DataType::try_from(t.data_type)
        .map_err(|_| format!("unknown data type code {}", t.data_type))?;
    let is_float = matches!(dt, DataType::Float | DataType::Float16 | DataType::Double);
    let is_int = matches!(
        dt,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Uint8
            | DataType::Uint16
            | DataType::Uint32
            | DataType::Uint64
            | DataType::Bool
    );
    if !is_float && !is_int {
        return Err(format!(
            "element type {} is not supported (float16, float32, float64 or an integer type)",
            data_type_name(t.data_type)
        ));
    }
    let dir = model_dir.and_then(|d| d.to_str());
    let provider = tract_onnx::data_resolver::FopenDataResolver;
    let tensor =
        tract_onnx::tensor::load_tensor(&provider, t, dir).map_err(|e| format!("{e:#}"))?;
    let shape = tensor.shape().to_vec();
    let data = if is_float {
        let c = tensor.cast_to::<f64>().map_err(|e| format!("{e:#}"))?;
        let v = c
            .to_plain_array_view::<f64>()
            .map_err(|e| format!("{e:#}"))?;
        ConstData::Float(v.iter().copied().collect())
    } else {
        let c = tensor.cast_to::<i64>().map_err(|e| format!("{e:#}"))?;
        let v = c
            .to_plain_array_view::<i64>()
            .map_err(|e| format!("{e:#}"))?;
        ConstData::Int(v.iter().copied().collect())
    };
    let expected: usize = shape.iter().product();
    let got = match &data {
        ConstData::Float(v) => v.len(),
        ConstData::Int(v) => v.len(),
    };
    if got != expected {
        return Err(format!("holds {got} values for shape {shape:?}"));
    }
    Ok(ConstTensor { shape, data })
}

/// Run the model with tract's own executor on a float32 batch `[batch, features...]` and
/// return the output as `f64` rows. Used to cross-check the project's reading of the graph.
pub fn run_with_tract(
    path: &Path,
    input_shape: &[usize],
    input: &[f32],
) -> Result<Vec<f64>, String> {
    let model = onnx()
        .model_for_path(path)
        .and_then(|m| m.with_input_fact(0, f32::fact(input_shape).into()))
        .and_then(|m| m.into_optimized())
        .and_then(|m| m.into_runnable())
        .map_err(|e| format!("tract could not prepare the model: {e:#}"))?;
    let tensor = Tensor::from_shape(input_shape, input).map_err(|e| format!("{e:#}"))?;
    let out = model
        .run(tvec!(tensor.into_tvalue()))
        .map_err(|e| format!("tract could not run the model: {e:#}"))?;
    let t = out[0].cast_to::<f64>().map_err(|e| format!("{e:#}"))?;
    let v = t
        .to_plain_array_view::<f64>()
        .map_err(|e| format!("{e:#}"))?;
    Ok(v.iter().copied().collect())
}
