//! The subcommands behind [`crate::cli`]: `lipfp check` ([`check`]), `lipfp certify`
//! ([`certify`](mod@certify)), `lipfp report` ([`report`](mod@report), which audits
//! certificate files against `--config`), `lipfp inspect` ([`inspect`]) and `lipfp bench`
//! ([`bench`](mod@bench)). They wire the layers together: load, run, judge, and build the
//! [`Report`](crate::report::Report) and files to publish. They take plain requests, never the
//! `clap` arguments: [`crate::cli`] parses the flags, writes the outputs and picks the exit code.
//!
//! Imports: [`crate::report`], [`crate::gate`], [`crate::engine`], [`crate::policy`],
//! [`crate::bounds`], [`crate::onnx`], [`crate::arith`] and the shared leaves; never
//! another command.

pub mod bench;
pub mod certify;
pub mod check;
pub mod inspect;
pub mod report;
pub mod verify;
