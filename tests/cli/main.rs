//! The command line as users and CI run it: flags, exit codes, errors, GitHub Actions, hardening against bad input, the action's install script.
//!
//! One test binary per layer (tests/README.md says where the test for a feature lives).

#[path = "../common/mod.rs"]
mod common;

mod ci_experience;
mod ci_integration;
mod cli;
mod hardening;
mod inspect_and_bench;
mod install_script;
