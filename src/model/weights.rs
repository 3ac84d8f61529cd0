//! Float tensors read late. The loader checks the whole graph against the tensors' declared
//! shapes first and decodes weight and bias values only once every check has passed, so a
//! tensor that cannot fit the model is refused before a byte of it is read.

use std::path::Path;

use ndarray::Array2;

use super::{Activation, Builder, Dense, Value};
use crate::error::LipfpError;
use crate::format::Format;
use crate::onnx::{self, proto, ConstData};
use crate::onnx_checks;

/// Integer tensors of at most this many elements are decoded for shape computations; larger
/// ones are not shape computations and are never read.
const MAX_SHAPE_ELEMENTS: usize = 64;

/// A float constant: its shape now, its values when the layers are finished.
#[derive(Clone, Debug)]
pub(super) struct Weight<'a> {
    /// Declared dimensions.
    pub shape: Vec<usize>,
    source: Source<'a>,
    /// Roundings applied by `Cast` nodes, in order.
    roundings: Vec<Format>,
}

#[derive(Clone, Debug)]
enum Source<'a> {
    /// Values already in memory (`value_float(s)`, an integer constant cast to a float type).
    Values(Vec<f64>),
    /// A tensor of the model whose storage was checked, not yet decoded.
    Stored(&'a proto::TensorProto),
}

impl Weight<'_> {
    /// A float constant whose values are in memory.
    pub fn values(shape: Vec<usize>, values: Vec<f64>) -> Self {
        Weight {
            shape,
            source: Source::Values(values),
            roundings: Vec::new(),
        }
    }

    /// The constant after a `Cast` to `format` (round-to-nearest-even, as runtimes cast).
    pub fn round_to(mut self, format: Format) -> Self {
        self.roundings.push(format);
        self
    }

    /// The values, row-major, widened exactly to `f64`.
    fn decode(&self, dir: Option<&Path>) -> Result<Vec<f64>, String> {
        let mut v = match &self.source {
            Source::Values(v) => v.clone(),
            Source::Stored(t) => match onnx::decode_tensor(t, dir)?.data {
                ConstData::Float(v) => v,
                ConstData::Int(_) => return Err("holds integers".into()),
            },
        };
        for f in &self.roundings {
            v.iter_mut().for_each(|x| *x = f.round(*x));
        }
        let want: usize = self.shape.iter().product();
        if v.len() != want {
            return Err(format!(
                "holds {} values for shape {:?}",
                v.len(),
                self.shape
            ));
        }
        Ok(v)
    }
}

/// The value of a tensor of the model (an initializer or a `Constant`'s `value`), its storage
/// checked first: float tensors stay unread until the layers are finished, small integer
/// tensors are decoded now for shape computations, larger integer tensors are never read.
pub(super) fn tensor_value<'a>(
    t: &'a proto::TensorProto,
    dir: Option<&Path>,
) -> Result<Value<'a>, String> {
    let count = onnx_checks::check_storage(t, dir)?;
    // check_storage proved every dim non-negative
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let type_name = onnx::data_type_name(t.data_type);
    match type_name.as_str() {
        "float" | "float16" | "double" => Ok(Value::Weight(Weight {
            shape,
            source: Source::Stored(t),
            roundings: Vec::new(),
        })),
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

/// A tensor feeding a layer, with the node that reads it (for error messages).
#[derive(Clone, Debug)]
pub(super) struct Part<'a> {
    pub weight: Weight<'a>,
    pub name: String,
    pub label: String,
    pub op: String,
}

/// A dense layer whose shapes are checked and whose values are read by [`Builder::finish`].
#[derive(Clone, Debug)]
pub(super) struct Draft<'a> {
    /// Output dimension.
    pub m: usize,
    /// Input dimension.
    pub n: usize,
    /// The weight, stored `[m, n]`, or `[n, m]` when `transposed`.
    pub w: Part<'a>,
    pub transposed: bool,
    /// The bias, of `m` values or one broadcast value.
    pub b: Option<Part<'a>>,
    pub act: Activation,
    pub nodes: Vec<String>,
    pub ops: Vec<String>,
    pub casts: Vec<Format>,
}

impl Builder<'_> {
    /// Decode every layer's weight and bias and convert them to the deployment format.
    pub(super) fn finish(&mut self) -> Result<Vec<Dense>, LipfpError> {
        let drafts = std::mem::take(&mut self.layers);
        drafts.into_iter().map(|d| self.finish_layer(d)).collect()
    }

    fn read(&self, p: &Part<'_>, want: usize) -> Result<Vec<f64>, LipfpError> {
        let v = p
            .weight
            .decode(self.path.parent())
            .map_err(|m| self.fail(&p.label, &p.op, format!("`{}`: {m}", p.name)))?;
        if v.len() != want {
            return Err(self.fail(
                &p.label,
                &p.op,
                format!("`{}` holds {} values, expected {want}", p.name, v.len()),
            ));
        }
        Ok(v)
    }

    fn finish_layer(&mut self, d: Draft<'_>) -> Result<Dense, LipfpError> {
        let (m, n) = (d.m, d.n);
        let vals = self.read(&d.w, m * n)?;
        let mut w = Array2::zeros((m, n));
        for (k, &x) in vals.iter().enumerate() {
            let at = if d.transposed {
                [k % m, k / m]
            } else {
                [k / n, k % n]
            };
            w[at] = self.convert(x, &d.w.name, k, &d.w.label, &d.w.op)?;
        }
        let b = match &d.b {
            None => vec![0.0; m],
            Some(p) => {
                let count = p.weight.shape.iter().product::<usize>();
                let v = self.read(p, count)?;
                let v = if count == 1 { vec![v[0]; m] } else { v };
                let mut b = Vec::with_capacity(m);
                for (k, x) in v.into_iter().enumerate() {
                    b.push(self.convert(x, &p.name, k, &p.label, &p.op)?);
                }
                b
            }
        };
        Ok(Dense {
            w,
            b,
            act: d.act,
            nodes: d.nodes,
            ops: d.ops,
            casts: d.casts,
        })
    }
}
