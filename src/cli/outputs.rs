//! Where reports go ([`ReportOutputs`]): destinations checked before any work, then every
//! requested report rendered and written all or none.

use std::path::PathBuf;

use clap::Args;

use crate::error::LipfpError;
use crate::files;
use crate::report::{self, Report};

/// Where reports go.
#[derive(Debug, Args)]
pub struct ReportOutputs {
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report here (one testcase per gate).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write a pull-request comment body here (Markdown, at most 64 KiB, with a marker line for
    /// updating one comment in place).
    #[arg(long, value_name = "PATH")]
    pub pr_comment: Option<PathBuf>,
    /// Print every note in full under every gate, and each gate's time split (by default each
    /// distinct note is printed once, shortened, after the gates; the JSON, JUnit and step
    /// summary always carry every note).
    #[arg(long, short)]
    pub verbose: bool,
}

/// Refuse report destinations that cannot be written (a directory) before any work is done.
pub(super) fn check_outputs(
    out: &ReportOutputs,
    certificates: Option<&PathBuf>,
) -> Result<(), LipfpError> {
    if let Some(p) = &out.json {
        files::check_target(p, "JSON report")?;
    }
    if let Some(p) = &out.junit {
        files::check_target(p, "JUnit report")?;
    }
    if let Some(p) = &out.pr_comment {
        files::check_target(p, "pull-request comment")?;
    }
    if let Some(p) = certificates {
        files::check_target(p, "certificate file")?;
    }
    Ok(())
}

pub(super) fn suite_name(what: &str) -> String {
    format!("lipfp: {what}")
}

/// Render every requested report from one in-memory result (see [`emit_with`]).
pub(super) fn emit(
    report: &Report,
    out: &ReportOutputs,
    suite: &str,
    policy_file: Option<&str>,
) -> Result<(), LipfpError> {
    emit_with(report, out, suite, policy_file, Vec::new())
}

/// Render every requested report (and the `artifacts` already rendered, e.g. certificates),
/// write them all or none, then print the summary (see [`report::publish::publish`]).
pub(super) fn emit_with(
    report: &Report,
    out: &ReportOutputs,
    suite: &str,
    policy_file: Option<&str>,
    artifacts: Vec<files::Artifact>,
) -> Result<(), LipfpError> {
    let to = report::publish::Destinations {
        json: out.json.as_deref(),
        junit: out.junit.as_deref(),
        pr_comment: out.pr_comment.as_deref(),
        suite,
        policy_file,
        verbose: out.verbose,
    };
    report::publish::publish(report, &to, artifacts)
}
