//! `lipfp check`: every `[[gate]]` of a policy evaluated into one [`Report`].
//!
//! A gate that cannot be evaluated — its model refused, its data mismatched, its radii file
//! unusable, or a required baseline that does not compare like with like — is an *errored*
//! gate: it is reported with the error (status `error`) and the other gates still run. Gates
//! sharing a target share its load, so they all error with the same message. Only errors
//! outside every gate (the policy, the baseline file, the outputs) stop the run.

use crate::engine::gate_work::{run_gate, GateWork};
use crate::engine::run::{self, CertifyOptions, CertifyOutcome, ReferencePlan};
use crate::engine::run::{Shard, Subject, SubjectSpec};
use crate::error::LipfpError;
use crate::gate::assemble::GateHead;
use crate::gate::baseline::Baseline;
use crate::policy::{Gate, Policy, Target};
use crate::progress::Progress;
use crate::proto_gen::GateCertificates;
use crate::report::certificates::{self, GateMeta};
use crate::report::{ErroredGate, GateReport, Report};

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

/// Load `t` as every gate naming it needs (the float64 reference where
/// [`ReferencePlan::for_target`] says).
fn prepare(
    policy: &Policy,
    t: &Target,
    shard: Option<Shard>,
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let spec = SubjectSpec::for_target(t, ReferencePlan::for_target(policy, t), shard);
    run::prepare(&spec, progress)
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
    for g in &policy.gates {
        for note in g.thresholds.fraction_notes() {
            progress.warn(&format!("gate `{}` (line {}): {note}", g.name, g.line));
        }
    }
    // one subject (or the error loading it) per distinct target, in the order gates name it
    let mut subjects: Vec<(Target, Result<Subject, String>)> = Vec::new();
    let mut gates = Vec::with_capacity(policy.gates.len());
    let mut certs = Vec::new();
    for g in &policy.gates {
        if !subjects.iter().any(|(t, _)| *t == g.target) {
            let s = prepare(policy, &g.target, shard, progress).map_err(|e| e.to_string());
            subjects.push((g.target.clone(), s));
        }
        let Some((_, subject)) = subjects.iter().find(|(t, _)| *t == g.target) else {
            continue;
        };
        let evaluated = subject.as_ref().map_err(String::clone).and_then(|s| {
            evaluate_gate(policy, g, s, baseline.as_ref(), shard, progress)
                .map(|(gate, outcome)| (gate, outcome, s))
        });
        let gate = match evaluated {
            Ok((gate, outcome, subject)) => {
                if keep_certificates && gate.error.is_none() {
                    let meta = GateMeta {
                        name: &g.name,
                        radius: &g.radius,
                        mode: g.mode(),
                        thresholds: &g.thresholds,
                        gram_iterations: g.target.gram_iterations,
                        policy_line: g.line,
                        model_name: &g.model_name,
                        complete: gate.complete.as_ref(),
                    };
                    certs.push(certificates::gate_certificates(&meta, subject, &outcome));
                }
                gate
            }
            Err(e) => errored(g, e),
        };
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

/// The report of gate `g` that could not be evaluated.
fn errored(g: &Gate, error: String) -> GateReport {
    GateReport::errored(
        &ErroredGate {
            name: &g.name,
            format: g.target.format,
            ftz: g.target.ftz,
            radius: &g.radius,
            ball: g.target.ball.describe(),
            mode: g.mode(),
            thresholds: &g.thresholds,
            model: &g.target.model,
            model_name: Some(&g.model_name),
            gram_iterations: g.target.gram_iterations,
            notes: &g.thresholds.fraction_notes(),
            policy_line: Some(g.line),
        },
        error,
    )
}

/// Certify gate `g` on its prepared subject and judge it. A required baseline that does not
/// compare like with like makes the gate errored (its figures kept); a radii file that cannot
/// be used is an `Err` (the caller reports the gate as errored).
fn evaluate_gate(
    policy: &Policy,
    g: &Gate,
    subject: &Subject,
    baseline: Option<&Baseline>,
    shard: Option<Shard>,
    progress: &Progress,
) -> Result<(GateReport, CertifyOutcome), String> {
    let work = GateWork {
        label: format!("gate `{}`: ", g.name),
        radius: &g.radius,
        modes: &g.modes,
        options: CertifyOptions {
            local_budget_s: g.local_budget_s,
            best_local: g.best_local,
        },
        complete: g.complete,
        curve: g.curve.as_ref(),
        attack: g.attack,
    };
    let done = run_gate(subject, &work, progress).map_err(|e| e.to_string())?;
    let required = policy.baseline.as_ref().is_some_and(|b| b.required);
    let head = GateHead {
        name: &g.name,
        radius: &g.radius,
        mode: g.mode(),
        thresholds: &g.thresholds,
        baseline: baseline.map(|b| (b, required)),
        policy_line: Some(g.line),
        model_name: Some(g.model_name.clone()),
        // a shard's figures are partial: thresholds are judged on the merged report
        withheld: shard.map(|_| "thresholds are evaluated by `lipfp report` on the merged shards"),
    };
    let gate = head.judge_run(subject, g.target.gram_iterations, &done);
    Ok((gate, done.outcome))
}
