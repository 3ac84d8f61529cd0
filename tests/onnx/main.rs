//! Reading ONNX models: the op set, exporters' patterns, classifier heads, data files and what is refused.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod corpus;
mod data_formats;
mod export_shapes;
mod heads;
mod onnx_spec;
mod refusals;
