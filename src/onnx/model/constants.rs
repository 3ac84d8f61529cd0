//! Constants: the graph's initializers and `Constant` nodes. A tensor's storage is checked
//! before anything else; float tensors become weights whose values are read only once the layers
//! are finished, small integer tensors are decoded at once for shape computations, and larger
//! integer tensors are never read.

use std::path::Path;

use super::builder::{Builder, Value};
use super::weights::Weight;
use crate::error::LipfpError;
use crate::onnx::checks as onnx_checks;
use crate::onnx::reader::{self as onnx, proto, ConstData, ConstTensor};

/// Integer tensors of at most this many elements are decoded for shape computations; larger
/// ones are not shape computations and are never read.
const MAX_SHAPE_ELEMENTS: usize = 64;

impl<'a> Builder<'a> {
    /// Seed the value table with every initializer of the graph.
    pub(super) fn initializers(&mut self) -> Result<(), LipfpError> {
        let (dir, graph) = (self.path.parent(), self.graph);
        for init in &graph.initializer {
            let v = tensor_value(init, dir).map_err(|m| {
                LipfpError::model(self.path, format!("initializer `{}`: {m}", init.name))
            })?;
            self.values.insert(init.name.clone(), v);
        }
        Ok(())
    }

    /// A `Constant` node: its one value attribute.
    pub(super) fn constant(
        &mut self,
        node: &'a proto::NodeProto,
        label: &str,
    ) -> Result<(), LipfpError> {
        let v = constant_value(node, self.path.parent())
            .map_err(|m| self.fail(label, "Constant", m))?;
        self.set(node, v);
        Ok(())
    }
}

/// The value of a tensor of the model (an initializer or a `Constant`'s `value`), its storage
/// checked first: float tensors stay unread until the layers are finished, small integer
/// tensors are decoded now for shape computations, larger integer tensors are never read.
fn tensor_value<'a>(t: &'a proto::TensorProto, dir: Option<&Path>) -> Result<Value<'a>, String> {
    let count = onnx_checks::check_storage(t, dir)?;
    // check_storage proved every dim non-negative
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let type_name = onnx::data_type_name(t.data_type);
    match type_name.as_str() {
        "float" | "float16" | "double" => Ok(Value::Weight(Weight::stored(shape, t))),
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64"
        | "bool" => {
            if count <= MAX_SHAPE_ELEMENTS {
                onnx::decode_tensor(t, dir).map(Value::Const)
            } else {
                Ok(Value::Unusable(format!(
                    "it is an integer tensor of {count} elements, not a shape computation"
                )))
            }
        }
        _ => Err(format!(
            "element type {type_name} is not supported (float16, float32, float64 or an integer type)"
        )),
    }
}

/// The value a `Constant` node defines.
fn constant_value<'a>(node: &'a proto::NodeProto, dir: Option<&Path>) -> Result<Value<'a>, String> {
    // the schema check admits only the value attributes; the specification wants exactly one
    let [a] = &node.attribute[..] else {
        let names: Vec<&str> = node.attribute.iter().map(|a| a.name.as_str()).collect();
        return Err(format!(
            "a Constant needs exactly one value attribute, found {names:?}"
        ));
    };
    let int = |shape, v| {
        Ok(Value::Const(ConstTensor {
            shape,
            data: ConstData::Int(v),
        }))
    };
    match a.name.as_str() {
        "value" => tensor_value(
            a.t.as_ref().ok_or("attribute `value` holds no tensor")?,
            dir,
        ),
        "value_float" => Ok(Value::Weight(Weight::values(vec![], vec![a.f as f64]))),
        "value_floats" => Ok(Value::Weight(Weight::values(
            vec![a.floats.len()],
            a.floats.iter().map(|&x| x as f64).collect(),
        ))),
        "value_int" => int(vec![], vec![a.i]),
        "value_ints" => int(vec![a.ints.len()], a.ints.clone()),
        other => Err(format!("a Constant given by `{other}` is not supported")),
    }
}
