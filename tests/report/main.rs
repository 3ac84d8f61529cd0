//! Reporters (console, JSON, JUnit, step summary, Mermaid charts) and merged certificate files.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod mermaid_parser;
mod report_merge;
mod reporters;
