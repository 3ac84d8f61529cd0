//! Helpers shared by the integration tests.

pub mod onnx_builder;
