//! lipfp: floating-point-sound Lipschitz robustness certificates for dense ReLU classifiers,
//! gated in CI.
//!
//! Data flows one way: policy -> model + data -> norms (every run) -> per-instance
//! certificates (parallel) -> gate verdicts -> reporters.

pub mod attack;
pub mod audit;
pub mod baseline;
pub mod bench;
pub mod certificates;
pub mod certify;
pub mod check;
pub mod cli;
pub mod data;
pub mod digest;
pub mod error;
pub mod exec;
pub mod execution;
pub mod files;
pub mod format;
pub mod gate;
pub mod inspect;
pub mod inspect_runtimes;
pub mod model;
pub mod norms;
pub mod onnx;
pub mod onnx_checks;
pub mod policy;
pub mod progress;
pub mod report;
pub mod run;
pub mod runtime;
pub mod sound;

/// Types generated from `proto/lipfp.proto`.
pub mod proto_gen {
    #![allow(missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/lipfp.v1.rs"));
}
