//! Bounds pinned against exact rationals (the tests `cargo mutants` runs for every mutant of the bound code).
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod best_dispatch;
mod bounds_exact;
mod componentwise;
mod lazy_reference;
mod local_deployed;
mod local_exact;
mod pointwise_exact;
mod runtime_bounds;
