//! Publishing a run's reports: every artifact rendered to memory, written all or nothing (see
//! [`crate::files::stage`]), and the console summary printed last.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::LipfpError;
use crate::files::{self, Artifact};
use crate::report::{self, Report};

/// Where a run's reports go.
#[derive(Clone, Copy, Debug, Default)]
pub struct Destinations<'a> {
    /// `--json`.
    pub json: Option<&'a Path>,
    /// `--junit`.
    pub junit: Option<&'a Path>,
    /// `--pr-comment`.
    pub pr_comment: Option<&'a Path>,
    /// The JUnit suite name.
    pub suite: &'a str,
    /// The policy file named by GitHub annotations (none for `certify`).
    pub policy_file: Option<&'a str>,
    /// `--verbose`: every note under every gate on the console (else notes several gates share
    /// are printed once, after the gates).
    pub verbose: bool,
}

/// Render every requested report (and the `artifacts` already rendered, e.g. certificates) to
/// memory, then write them all or none: temporary files are staged, GitHub's step summary and
/// outputs appended (when `GITHUB_ACTIONS=true`), the temporaries renamed into place, and only
/// then the console summary and the annotations printed. Any failure (ENOSPC included) is an
/// error naming the path; staged temporaries are removed.
pub fn publish(
    report: &Report,
    to: &Destinations<'_>,
    mut artifacts: Vec<Artifact>,
) -> Result<(), LipfpError> {
    if let Some(p) = to.json {
        let json = report::json::render(report) + "\n";
        artifacts.push(Artifact::new(p, json, "JSON report"));
    }
    if let Some(p) = to.junit {
        let xml = report::junit::render(report, to.suite);
        artifacts.push(Artifact::new(p, xml, "JUnit report"));
    }
    if let Some(p) = to.pr_comment {
        let body = report::pr_comment::render(report);
        artifacts.push(Artifact::new(p, body, "pull-request comment"));
    }
    let mut stdout = report::console::render(report, to.verbose);
    let mut appends = Vec::new();
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        for line in report::github::annotations(report, to.policy_file.unwrap_or("")) {
            stdout.push_str(&line);
            stdout.push('\n');
        }
        for (var, text) in [
            ("GITHUB_STEP_SUMMARY", report::github::step_summary(report)),
            ("GITHUB_OUTPUT", report::github::outputs(report)),
        ] {
            if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
                appends.push((var, PathBuf::from(path), text));
            }
        }
    }
    write_all(&artifacts, appends)?;
    print_stdout(&stdout)
}

/// Publish a run that stopped on an error outside every gate (an unparsable or missing policy,
/// an unreadable baseline, a report that could not be written): the JUnit file, when asked
/// for, holds one `error` testcase; under GitHub Actions the job summary gets the error, the
/// step outputs `passed=false`, `gates={}` and `error`, and stdout an `::error` annotation on
/// the policy file. All or nothing, as [`publish`]; the error itself is printed by the caller.
pub fn publish_error(message: &str, to: &Destinations<'_>) -> Result<(), LipfpError> {
    let mut artifacts = Vec::new();
    if let Some(p) = to.junit {
        let xml = report::junit::render_error(to.suite, message);
        artifacts.push(Artifact::new(p, xml, "JUnit report"));
    }
    if let Some(p) = to.pr_comment {
        let body = report::pr_comment::render_error(to.policy_file, message);
        artifacts.push(Artifact::new(p, body, "pull-request comment"));
    }
    let mut stdout = String::new();
    let mut appends = Vec::new();
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        stdout = report::github::error_annotation(to.policy_file, message) + "\n";
        for (var, text) in [
            (
                "GITHUB_STEP_SUMMARY",
                report::github::error_summary(to.policy_file, message),
            ),
            ("GITHUB_OUTPUT", report::github::error_outputs(message)),
        ] {
            if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
                appends.push((var, PathBuf::from(path), text));
            }
        }
    }
    write_all(&artifacts, appends)?;
    print_stdout(&stdout)
}

/// Stage `artifacts`, append `appends` (GitHub's step summary and outputs), then commit the
/// artifacts: nothing is renamed into place unless every write succeeded.
fn write_all(
    artifacts: &[Artifact],
    appends: Vec<(&str, PathBuf, String)>,
) -> Result<(), LipfpError> {
    let staged = files::stage(artifacts)?;
    for (var, path, text) in appends {
        report::github::append(&path, &text).map_err(|e| LipfpError::Io {
            path,
            message: format!("could not append to ${var}: {e}"),
        })?;
    }
    staged.commit()
}

/// Print `text` on stdout, reporting a failed write (a closed pipe, a full disk) as an error.
fn print_stdout(text: &str) -> Result<(), LipfpError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| LipfpError::Io {
            path: PathBuf::from("<stdout>"),
            message: format!("could not print the summary: {e}"),
        })
}
