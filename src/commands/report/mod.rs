//! `lipfp report`: certificate files (e.g. the shards of a CI matrix) merged per gate, checked
//! against a policy when one is given (`audit`), compared with a
//! baseline report and judged against each gate's thresholds, into one [`Report`] — without
//! recomputing the certificates.
//!
//! The command line is parsed by [`crate::cli`] into a [`ReportRequest`]; [`run()`] builds the
//! report, which the caller publishes.

mod audit;

use std::path::{Path, PathBuf};

use crate::error::LipfpError;
use crate::gate::baseline::Baseline;
use crate::policy::Policy;
use crate::progress::Progress;
use crate::proto_gen::CertificateFile;
use crate::report::certificates::{self, MergedGate};
use crate::report::{GateReport, Report};
use audit::audit;

/// The note on every gate of a merge that no policy checked.
const UNVERIFIED: &str = "unverified merge: the figures and thresholds are the certificate \
     files' own; `lipfp report --config <policy> --verify <K>` checks them against the model \
     and data";

/// What `lipfp report` reads, its flags already parsed.
#[derive(Clone, Copy, Debug)]
pub struct ReportRequest<'a> {
    /// Certificate files (shards of one run are merged), in the order given.
    pub files: &'a [PathBuf],
    /// Baseline JSON report for the `max_*_drop_pp` thresholds.
    pub baseline: Option<&'a Path>,
    /// Check the files against this policy and the model and data it names.
    pub config: Option<&'a Path>,
    /// With `config`: points of every file to re-certify (0: none).
    pub verify: usize,
}

/// Read, merge, audit and judge the certificate files of `req` into one report; its `policy`
/// is the first policy name a file records.
pub fn run(req: &ReportRequest<'_>, progress: &Progress) -> Result<Report, LipfpError> {
    let mut files = Vec::with_capacity(req.files.len());
    for p in req.files {
        files.push((p.clone(), certificates::read(p)?));
    }
    let baseline = req.baseline.map(Baseline::load).transpose()?;
    let policy = policy_name(&files);
    progress.stage(&format!("merging {} certificate files", files.len()));
    let mut merged = certificates::merge(&files)?;
    let required = match req.config {
        Some(config) => {
            let policy = Policy::load(config)?;
            audit(&policy, &mut merged, req.verify, progress)?;
            policy.baseline.as_ref().is_some_and(|b| b.required)
        }
        None => {
            for m in &mut merged {
                m.facts.notes.push(UNVERIFIED.into());
            }
            false
        }
    };
    let gates = merged
        .iter()
        .map(|m| gate_report(m, (baseline.as_ref(), required), progress))
        .collect();
    Ok(Report {
        lipfp_version: env!("CARGO_PKG_VERSION").into(),
        policy,
        gates,
    })
}

/// The first non-empty policy name among the files.
fn policy_name(files: &[(PathBuf, CertificateFile)]) -> Option<String> {
    files
        .iter()
        .map(|(_, f)| f.policy.clone())
        .find(|p| !p.is_empty())
}

/// One merged gate judged: its thresholds evaluated (the drop thresholds against `baseline`),
/// with the notes on fractional thresholds (also warned), and a baseline that does not compare
/// as the policy's `[baseline] required` says (`Unusable`).
fn gate_report(
    m: &MergedGate,
    (baseline, required): (Option<&Baseline>, bool),
    progress: &Progress,
) -> GateReport {
    for note in m.thresholds.fraction_notes() {
        progress.warn(&format!("gate `{}`: {note}", m.name));
    }
    m.judge(baseline.map(|b| (b, required)))
}
