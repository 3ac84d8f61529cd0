//! Reports. [`Report`] is built once from the engine's outcomes and the gates' verdicts; every
//! reporter (console, JSON, JUnit, GitHub annotations and step summary, Mermaid, SVG plot,
//! publishing) renders it and computes nothing. Certificate files ([`certificates`]) are
//! written here and read back as untrusted input by `lipfp report`.
//!
//! Imports: [`crate::gate`], [`crate::engine`], [`crate::policy`], [`crate::bounds`],
//! [`crate::onnx`], [`crate::arith`] and the shared leaves (with [`crate::proto_gen`]).

pub mod attack;
pub mod certificates;
pub mod classes;
pub mod complete;
pub mod console;
pub mod figure_text;
pub mod github;
pub mod json;
pub mod junit;
pub mod mermaid;
pub mod plot;
pub mod pr_comment;
pub mod publish;
pub mod regressions;

pub use crate::gate::gate_report::{
    ErroredGate, GateReport, GateStatus, ModeReport, Report, SubjectFacts, Tally, Timing,
};
