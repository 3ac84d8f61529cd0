//! A small builder for ONNX models made programmatically in tests.
//!
//! It writes the prost-generated ONNX protobuf types that `lipfp::onnx::reader::proto` re-exports, so
//! the files it produces are read by the loader and by tract exactly as exported files are.
//! Weights come from a deterministic LCG ([`Lcg`]), never from a random-number crate.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lipfp::onnx::reader::proto::attribute_proto::AttributeType;
use lipfp::onnx::reader::proto::tensor_proto::{DataLocation, DataType};
use lipfp::onnx::reader::proto::tensor_shape_proto::dimension::Value as DimValue;
use lipfp::onnx::reader::proto::tensor_shape_proto::Dimension;
use lipfp::onnx::reader::proto::type_proto::{Tensor as TensorType, Value as TypeValue};
use lipfp::onnx::reader::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

/// One dimension of a declared graph input or output shape.
#[derive(Clone, Debug, PartialEq)]
pub enum D {
    /// A symbolic dimension (`dim_param`), e.g. the batch `"N"`.
    Sym(String),
    /// A fixed size (`dim_value`).
    Fixed(i64),
}

/// The symbolic batch dimension `"N"`.
pub fn batch() -> D {
    D::Sym("N".into())
}

/// A shape `[N, dims...]` with a symbolic batch.
pub fn batched(dims: &[usize]) -> Vec<D> {
    let mut v = vec![batch()];
    v.extend(dims.iter().map(|&d| D::Fixed(d as i64)));
    v
}

/// A shape `[batch, dims...]` with a fixed batch size.
pub fn fixed_batch(batch: usize, dims: &[usize]) -> Vec<D> {
    let mut v = vec![D::Fixed(batch as i64)];
    v.extend(dims.iter().map(|&d| D::Fixed(d as i64)));
    v
}

/// A `ValueInfoProto` for a tensor; `shape = None` declares no shape at all.
pub fn value_info(name: &str, elem: DataType, shape: Option<&[D]>) -> ValueInfoProto {
    let shape = shape.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| Dimension {
                denotation: String::new(),
                value: Some(match d {
                    D::Sym(s) => DimValue::DimParam(s.clone()),
                    D::Fixed(k) => DimValue::DimValue(*k),
                }),
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(TypeValue::TensorType(TensorType {
                elem_type: elem as i32,
                shape,
            })),
        }),
        doc_string: String::new(),
    }
}

fn dims_i64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

fn check_len(dims: &[usize], len: usize) {
    assert_eq!(
        dims.iter().product::<usize>(),
        len,
        "tensor data length does not match dims {dims:?}"
    );
}

/// A float32 tensor stored in `raw_data` (little-endian), as PyTorch writes it.
pub fn tensor_f32(name: &str, dims: &[usize], data: &[f32]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Float as i32,
        raw_data: data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// A float32 tensor stored in the typed `float_data` field.
pub fn tensor_f32_typed(name: &str, dims: &[usize], data: &[f32]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Float as i32,
        float_data: data.to_vec(),
        ..Default::default()
    }
}

/// A float16 tensor stored in `raw_data` (little-endian bit patterns).
pub fn tensor_f16(name: &str, dims: &[usize], data: &[half::f16]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Float16 as i32,
        raw_data: data
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        ..Default::default()
    }
}

/// A float16 tensor stored in the typed `int32_data` field (one bit pattern per element).
pub fn tensor_f16_typed(name: &str, dims: &[usize], data: &[half::f16]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Float16 as i32,
        int32_data: data.iter().map(|x| x.to_bits() as i32).collect(),
        ..Default::default()
    }
}

/// A float64 tensor stored in `raw_data` (little-endian).
pub fn tensor_f64(name: &str, dims: &[usize], data: &[f64]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Double as i32,
        raw_data: data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// A float64 tensor stored in the typed `double_data` field.
pub fn tensor_f64_typed(name: &str, dims: &[usize], data: &[f64]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Double as i32,
        double_data: data.to_vec(),
        ..Default::default()
    }
}

/// An int64 tensor stored in `raw_data`; `dims = &[]` makes a scalar.
pub fn tensor_i64(name: &str, dims: &[usize], data: &[i64]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Int64 as i32,
        raw_data: data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// A bool tensor stored in `raw_data` (one byte per element); `dims = &[]` makes a scalar.
pub fn tensor_bool(name: &str, dims: &[usize], data: &[bool]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Bool as i32,
        raw_data: data.iter().map(|&x| x as u8).collect(),
        ..Default::default()
    }
}

/// An int64 tensor stored in the typed `int64_data` field.
pub fn tensor_i64_typed(name: &str, dims: &[usize], data: &[i64]) -> TensorProto {
    check_len(dims, data.len());
    TensorProto {
        name: name.into(),
        dims: dims_i64(dims),
        data_type: DataType::Int64 as i32,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// A tensor whose data lives in an external file next to the model (`data_location` EXTERNAL):
/// `keys` are the `external_data` entries in order, e.g. `[("location", "w.bin"),
/// ("offset", "0"), ("length", "48")]`. The dims are written as given, unchecked.
pub fn tensor_external(
    name: &str,
    elem: DataType,
    dims: &[i64],
    keys: &[(&str, &str)],
) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: elem as i32,
        data_location: Some(DataLocation::External as i32),
        external_data: keys
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn attr_base(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: ty as i32,
        ..Default::default()
    }
}

/// An `INT` attribute.
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        i: v,
        ..attr_base(name, AttributeType::Int)
    }
}

/// A `FLOAT` attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        f: v,
        ..attr_base(name, AttributeType::Float)
    }
}

/// An `INTS` attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr_base(name, AttributeType::Ints)
    }
}

/// A `FLOATS` attribute.
pub fn attr_floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        floats: v.to_vec(),
        ..attr_base(name, AttributeType::Floats)
    }
}

/// A `TENSOR` attribute.
pub fn attr_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        t: Some(t),
        ..attr_base(name, AttributeType::Tensor)
    }
}

/// A node in the default domain.
pub fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

/// Builds a `ModelProto` with one graph.
#[derive(Clone, Debug)]
pub struct ModelBuilder {
    pub ir_version: i64,
    pub opsets: Vec<(String, i64)>,
    pub inputs: Vec<ValueInfoProto>,
    pub outputs: Vec<ValueInfoProto>,
    pub initializers: Vec<TensorProto>,
    pub nodes: Vec<NodeProto>,
    pub functions: Vec<FunctionProto>,
    pub producer: String,
}

impl Default for ModelBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelBuilder {
    /// An empty model: IR version 8, default-domain opset 17.
    pub fn new() -> Self {
        ModelBuilder {
            ir_version: 8,
            opsets: vec![(String::new(), 17)],
            inputs: Vec::new(),
            outputs: Vec::new(),
            initializers: Vec::new(),
            nodes: Vec::new(),
            functions: Vec::new(),
            producer: "lipfp-tests".into(),
        }
    }

    /// Set the default-domain opset version.
    pub fn opset(&mut self, version: i64) -> &mut Self {
        for (d, v) in &mut self.opsets {
            if d.is_empty() {
                *v = version;
            }
        }
        self
    }

    /// Import another domain's opset.
    pub fn import_domain(&mut self, domain: &str, version: i64) -> &mut Self {
        self.opsets.push((domain.into(), version));
        self
    }

    /// A graph input.
    pub fn input(&mut self, name: &str, elem: DataType, shape: &[D]) -> &mut Self {
        self.inputs.push(value_info(name, elem, Some(shape)));
        self
    }

    /// A float32 graph input `[N, dims...]` with a symbolic batch.
    pub fn input_f32(&mut self, name: &str, dims: &[usize]) -> &mut Self {
        self.input(name, DataType::Float, &batched(dims))
    }

    /// A graph output; `shape = None` declares only the element type.
    pub fn output(&mut self, name: &str, elem: DataType, shape: Option<&[D]>) -> &mut Self {
        self.outputs.push(value_info(name, elem, shape));
        self
    }

    /// A float32 graph output `[N, classes]`.
    pub fn output_f32(&mut self, name: &str, classes: usize) -> &mut Self {
        self.output(name, DataType::Float, Some(&batched(&[classes])))
    }

    /// Any initializer.
    pub fn init(&mut self, t: TensorProto) -> &mut Self {
        self.initializers.push(t);
        self
    }

    /// A float32 initializer in `raw_data`.
    pub fn init_f32(&mut self, name: &str, dims: &[usize], data: &[f32]) -> &mut Self {
        self.init(tensor_f32(name, dims, data))
    }

    /// A float32 initializer in `float_data`.
    pub fn init_f32_typed(&mut self, name: &str, dims: &[usize], data: &[f32]) -> &mut Self {
        self.init(tensor_f32_typed(name, dims, data))
    }

    /// A float16 initializer in `raw_data`.
    pub fn init_f16(&mut self, name: &str, dims: &[usize], data: &[half::f16]) -> &mut Self {
        self.init(tensor_f16(name, dims, data))
    }

    /// A float64 initializer in `raw_data`.
    pub fn init_f64(&mut self, name: &str, dims: &[usize], data: &[f64]) -> &mut Self {
        self.init(tensor_f64(name, dims, data))
    }

    /// A float64 initializer in `double_data`.
    pub fn init_f64_typed(&mut self, name: &str, dims: &[usize], data: &[f64]) -> &mut Self {
        self.init(tensor_f64_typed(name, dims, data))
    }

    /// An int64 initializer in `raw_data`.
    pub fn init_i64(&mut self, name: &str, dims: &[usize], data: &[i64]) -> &mut Self {
        self.init(tensor_i64(name, dims, data))
    }

    /// Any node.
    pub fn push(&mut self, n: NodeProto) -> &mut Self {
        self.nodes.push(n);
        self
    }

    /// A node in the default domain.
    pub fn node(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> &mut Self {
        self.push(node(op, name, inputs, outputs, attrs))
    }

    /// A `Constant` node whose `value` attribute holds `t`.
    pub fn constant(&mut self, name: &str, output: &str, t: TensorProto) -> &mut Self {
        self.node(
            "Constant",
            name,
            &[],
            &[output],
            vec![attr_tensor("value", t)],
        )
    }

    /// A model-local function.
    pub fn function(&mut self, f: FunctionProto) -> &mut Self {
        self.functions.push(f);
        self
    }

    /// The `ModelProto`.
    pub fn build(&self) -> ModelProto {
        ModelProto {
            ir_version: self.ir_version,
            opset_import: self
                .opsets
                .iter()
                .map(|(d, v)| OperatorSetIdProto {
                    domain: d.clone(),
                    version: *v,
                })
                .collect(),
            producer_name: self.producer.clone(),
            graph: Some(GraphProto {
                name: "main".into(),
                node: self.nodes.clone(),
                initializer: self.initializers.clone(),
                input: self.inputs.clone(),
                output: self.outputs.clone(),
                ..Default::default()
            }),
            functions: self.functions.clone(),
            ..Default::default()
        }
    }

    /// The encoded protobuf. With `LIPFP_FUZZ_SEED_DIR` set, every model built is also saved
    /// there, named by its hash, as a seed for the `onnx` fuzz target (`fuzz/make_corpus.sh`).
    pub fn bytes(&self) -> Vec<u8> {
        let bytes = self.build().encode_to_vec();
        if let Some(dir) = std::env::var_os("LIPFP_FUZZ_SEED_DIR") {
            use sha2::Digest;
            let hash = lipfp::onnx::model::hex(&sha2::Sha256::digest(&bytes));
            let _ = std::fs::write(
                Path::new(&dir).join(format!("{}.onnx", &hash[..16])),
                &bytes,
            );
        }
        bytes
    }

    /// Write `dir/file` and return its path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let p = dir.join(file);
        std::fs::write(&p, self.bytes()).expect("write the ONNX model");
        p
    }
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants): deterministic test data.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(0x1234_5678))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0
    }

    /// Uniform in `[0, 1)` with 53 random bits (high bits of the state).
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[-1, 1)` as `f64` (generally not a float32 value).
    pub fn sym_f64(&mut self) -> f64 {
        2.0 * self.unit_f64() - 1.0
    }

    /// Uniform in `[-1, 1)` as `f32` (24 random bits).
    pub fn sym_f32(&mut self) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
        2.0 * u - 1.0
    }

    /// `count` values uniform in `[-scale, scale)` as `f32`.
    pub fn f32s(&mut self, count: usize, scale: f32) -> Vec<f32> {
        (0..count).map(|_| self.sym_f32() * scale).collect()
    }

    /// `count` values uniform in `[-scale, scale)` as `f64`.
    pub fn f64s(&mut self, count: usize, scale: f64) -> Vec<f64> {
        (0..count).map(|_| self.sym_f64() * scale).collect()
    }
}
