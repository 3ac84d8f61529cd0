//! `lipfp check`: every `[[gate]]` of a policy evaluated into one [`Report`].
//!
//! A gate that cannot be evaluated — its model refused, its data mismatched, its radii file
//! unusable, or a required baseline that does not compare like with like — is an *errored*
//! gate: it is reported with the error (status `error`) and the other gates still run. Gates
//! sharing a target share its load, so they all error with the same message. Only errors
//! outside every gate (the policy, the baseline file, the outputs) stop the run.

use crate::engine::gate_work::PolicyWork;
use crate::engine::run::Shard;
use crate::error::LipfpError;
use crate::gate::assemble::judge_gate;
use crate::gate::baseline::Baseline;
use crate::policy::Policy;
use crate::progress::Progress;
use crate::proto_gen::GateCertificates;
use crate::report::certificates::{self, GateMeta};
use crate::report::Report;

/// The result of `lipfp check` before it is published.
pub struct CheckRun {
    /// Every gate, in policy order (errored gates included).
    pub report: Report,
    /// The certificates of every gate that was evaluated (when asked for).
    pub certificates: Vec<GateCertificates>,
}

/// The baseline of a policy: `None` when the policy has none, or when it is missing and not
/// required (a warning).
fn load_baseline(policy: &Policy, progress: &Progress) -> Result<Option<Baseline>, LipfpError> {
    let Some(b) = &policy.baseline else {
        return Ok(None);
    };
    if !b.path.exists() && !b.required {
        progress.warn(&format!(
            "baseline {} not found; the drop thresholds are skipped (set required = true to make this an error)",
            b.path.display()
        ));
        return Ok(None);
    }
    if b.certificates {
        crate::report::certificates::read_baseline(&b.path).map(Some)
    } else {
        Baseline::load(&b.path).map(Some)
    }
}

/// Evaluate every gate of `policy` (on shard `shard` of every test set), keeping the
/// certificates when `keep_certificates`. Fails only on errors outside every gate: a baseline
/// report that cannot be read.
pub fn run(
    policy: &Policy,
    shard: Option<Shard>,
    keep_certificates: bool,
    progress: &Progress,
) -> Result<CheckRun, LipfpError> {
    let baseline = load_baseline(policy, progress)?;
    let required = policy.baseline.as_ref().is_some_and(|b| b.required);
    let mut work = PolicyWork::new(policy, shard);
    let mut gates = Vec::with_capacity(policy.gates.len());
    let mut certs = Vec::new();
    for g in &policy.gates {
        let done = work.run(g, progress);
        let done = done.as_ref().map(|(s, d)| (*s, d)).map_err(String::clone);
        let gate = judge_gate(
            g,
            baseline.as_ref().map(|b| (b, required)),
            shard.is_some(),
            done.clone(),
        );
        if let (true, None, Ok((subject, d))) = (keep_certificates, &gate.error, done) {
            let meta = GateMeta::of_gate(g, gate.complete.as_ref());
            certs.push(certificates::gate_certificates(&meta, subject, &d.outcome));
        }
        if let Some(e) = &gate.error {
            progress.error(&format!("gate `{}` (line {}): {e}", g.name, g.line));
        }
        gates.push(gate);
    }
    Ok(CheckRun {
        report: Report {
            lipfp_version: env!("CARGO_PKG_VERSION").into(),
            policy: Some(policy.path.display().to_string()),
            gates,
        },
        certificates: certs,
    })
}
