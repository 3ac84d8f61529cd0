//! lipfp: floating-point-sound Lipschitz robustness certificates for dense ReLU classifiers,
//! gated in CI.
//!
//! Data flows one way: policy -> model + data -> norms (every run) -> per-instance
//! certificates (parallel) -> gate verdicts -> reporters. The folders follow that flow, and a
//! module imports only from the layers below it (ARCHITECTURE.md; enforced by
//! `tests/architecture.rs`):
//!
//! * [`error`], [`files`], [`progress`], [`proto_gen`]: shared leaves, importing no folder;
//! * [`arith`]: deployment formats, directed rounding, execution models, runtimes;
//! * [`onnx`]: the protobuf reader, ONNX spec checks, and the graph -> [`onnx::model::DenseNet`];
//! * [`bounds`]: spectral norms and per-instance certificates;
//! * [`policy`]: the `lipfp.toml` schema;
//! * [`engine`]: data, the centre execution, runs over a test set, and the falsifier;
//! * [`gate`]: gate verdicts, baseline comparison and curve figures;
//! * [`report`]: reporters and certificate files;
//! * [`commands`] and [`cli`]: the subcommands and the argument parser.

pub mod arith;
pub mod bounds;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod error;
pub mod files;
pub mod gate;
pub mod onnx;
pub mod policy;
pub mod progress;
pub mod report;

/// Types generated from `proto/lipfp.proto`.
pub mod proto_gen {
    #![allow(missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/lipfp.v1.rs"));
}
