//! The subcommands behind [`crate::cli`]: `lipfp check` ([`check`]), `lipfp report --config`
//! ([`audit`]), `lipfp inspect` ([`inspect`], [`inspect_runtimes`]) and `lipfp bench`
//! ([`bench`](mod@bench)). They wire the layers together: load, run, judge, report.
//!
//! Imports: every folder except [`crate::cli`].

pub mod audit;
pub mod bench;
pub mod check;
pub mod inspect;
pub mod inspect_runtimes;
