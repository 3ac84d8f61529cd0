//! Writing certificate files: a gate's run (its subject, outcome, thresholds and complete
//! search) as a `GateCertificates` message, and the file as an all-or-nothing artifact.

use std::path::Path;

use prost::Message;

use crate::bounds::certify::{Mode, Refusal};
use crate::engine::run::{CertifyOutcome, Subject};
use crate::policy::{Gate, Radius, Thresholds};
use crate::proto_gen::{CertificateFile, GateCertificates, Instance};
use crate::report::complete::CompleteReport;

use super::complete;

/// What a gate was about, beyond its outcome.
pub struct GateMeta<'a> {
    /// Gate name.
    pub name: &'a str,
    /// Radius.
    pub radius: &'a Radius,
    /// Mode the thresholds apply to.
    pub mode: Mode,
    /// Thresholds.
    pub thresholds: &'a Thresholds,
    /// Gram iterations.
    pub gram_iterations: u32,
    /// 1-based line in the policy (0 when not from a policy).
    pub policy_line: usize,
    /// The model as the policy names it, or as given on the command line.
    pub model_name: &'a str,
    /// Mode `complete`'s figures, when it ran.
    pub complete: Option<&'a CompleteReport>,
}

impl<'a> GateMeta<'a> {
    /// What policy gate `g` is about (`complete`: its report's complete decisions).
    pub fn of_gate(g: &'a Gate, complete: Option<&'a CompleteReport>) -> GateMeta<'a> {
        GateMeta {
            name: &g.name,
            radius: &g.radius,
            mode: g.mode(),
            thresholds: &g.thresholds,
            gram_iterations: g.target.gram_iterations,
            policy_line: g.line,
            model_name: &g.model_name,
            complete,
        }
    }
}

/// The certificates of one gate run.
pub fn gate_certificates(
    meta: &GateMeta<'_>,
    subject: &Subject,
    outcome: &CertifyOutcome,
) -> GateCertificates {
    let instances = (0..outcome.n)
        .map(|k| Instance {
            index: (subject.first + k) as u64,
            label: subject.labels.as_ref().map(|l| l[k] as i64).unwrap_or(-1),
            prediction: subject.predictions[k].map(|p| p as i64).unwrap_or(-1),
            certified: outcome.modes.iter().map(|m| m.verdicts[k]).collect(),
            slack: outcome.modes.iter().map(|m| m.slacks[k]).collect(),
            refusal: outcome
                .modes
                .iter()
                .map(|m| m.refusal_of[k].map(Refusal::code).unwrap_or_default())
                .collect(),
        })
        .collect();
    let (epsilon, epsilons) = meta.radius.fields();
    let (epsilon, epsilons) = (epsilon.unwrap_or_default(), epsilons.unwrap_or_default());
    GateCertificates {
        gate: meta.name.to_string(),
        model: subject.net.path.display().to_string(),
        model_hash: subject.net.hash(),
        format: subject.net.format.name().to_string(),
        ftz: subject.ftz,
        execution: subject.execution.to_string(),
        epsilon,
        epsilons,
        ball: subject.ball.describe(),
        complete: meta.complete.map(complete::to_proto),
        gram_iterations: meta.gram_iterations,
        modes: outcome
            .modes
            .iter()
            .map(|m| m.mode.name().to_string())
            .collect(),
        threshold_mode: meta.mode.name().to_string(),
        thresholds: Some(meta.thresholds.to_proto()),
        total: subject.total as u64,
        first: subject.first as u64,
        count: outcome.n as u64,
        has_labels: subject.labels.is_some(),
        norms_s: outcome.norms_s,
        certify_s: outcome.certify_s,
        reference_s: outcome.reference_s,
        notes: subject.notes.clone(),
        degradation_sum: outcome.modes.iter().map(|m| m.degradation_sums.0).collect(),
        leps_sum: outcome.modes.iter().map(|m| m.degradation_sums.1).collect(),
        mode_seconds: outcome.modes.iter().map(|m| m.seconds).collect(),
        instances,
        policy_line: meta.policy_line as u32,
        model_name: meta.model_name.to_string(),
        test_set_sha256: if subject.first == 0 && outcome.n == subject.total {
            subject.test_set_hash.clone()
        } else {
            String::new()
        },
    }
}

/// A certificate file as an artifact to write at `path` (with the command's other reports:
/// see [`crate::files::stage`]).
pub fn artifact(file: &CertificateFile, path: &Path) -> crate::files::Artifact {
    crate::files::Artifact::new(path, file.encode_to_vec(), "certificate file")
}
