//! Untrusted ONNX in, a checked network out: the protobuf reader and every call into tract
//! ([`reader`]), the spec checks every model passes before it is interpreted ([`checks`]), and
//! the graph -> [`model::DenseNet`] conversion that accepts dense ReLU classifiers and refuses
//! the rest by name ([`model`]).
//!
//! Imports: [`crate::arith`], [`crate::error`], [`crate::files`].

pub mod checks;
pub mod model;
pub mod reader;
