//! Certificates against other implementations: onnxruntime, emulated GPU and CPU runtimes, the CROWN reference, every network shape and execution.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod affine_models;
mod affine_steps;
mod affine_steps_runtime;
mod conformance;
mod execution_model;
mod local_reference;
mod runtime_conformance;
mod shapes;
