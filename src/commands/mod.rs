//! The subcommands behind [`crate::cli`]: `lipfp check` ([`check`]), `lipfp certify`
//! ([`certify`](mod@certify)), `lipfp report` ([`report`](mod@report), and [`audit`] for
//! `--config`), `lipfp inspect` ([`inspect`], [`inspect_runtimes`]) and `lipfp bench`
//! ([`bench`](mod@bench)). They wire the layers together: load, run, judge, and build the
//! [`Report`](crate::report::Report) and files to publish. They take plain requests, never the
//! `clap` arguments: [`crate::cli`] parses the flags, writes the outputs and picks the exit code.
//!
//! Imports: every folder except [`crate::cli`].

pub mod audit;
pub mod bench;
pub mod certify;
pub mod check;
pub mod inspect;
pub mod inspect_runtimes;
pub mod regressions;
pub mod report;
pub mod verify;
