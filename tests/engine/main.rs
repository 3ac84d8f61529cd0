//! Running certification on data: the falsifier, complete verification (branch and bound), curves, l_inf sets, VNN-LIB properties, shards and the benchmarks.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod attack;
mod complete;
mod complete_gate;
mod curves;
mod determinism_and_shards;
mod embedded_example;
mod linf;
mod mnist_benchmark;
mod robustness;
mod verify;
