//! Gate figures against a baseline: per-point regressions and their significance.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod regressions;
