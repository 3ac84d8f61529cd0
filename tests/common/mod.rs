//! Helpers shared by the integration tests.

pub mod affine;
pub mod affine_nets;
pub mod ball;
pub mod bundles;
pub mod classifiers;
pub mod emulated;
pub mod exact;
pub mod exact_bounds;
pub mod exact_margin;
pub mod exact_points;
pub mod local_nets;
pub mod mermaid;
pub mod on_actions;
pub mod onnx_builder;
pub mod runtime;
pub mod shape_family;
pub mod verify_request;
