//! Reports. [`Report`] is built once from the engine's results; every reporter renders it and
//! computes nothing.

pub mod console;
pub mod github;
pub mod json;
pub mod junit;
pub mod publish;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::certify::Mode;
use crate::format::Format;
use crate::gate::{pct, GateVerdict};
use crate::policy::Radius;
use crate::run::CertifyOutcome;

/// Figures of one mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeReport {
    /// Points certified.
    pub certified: usize,
    /// Certified rate in percent of all points.
    pub certified_pct: f64,
    /// Points certified and correctly classified (null without labels).
    pub vra: Option<usize>,
    /// VRA in percent of all points (null without labels).
    pub vra_pct: Option<f64>,
    /// False for `real`: the real-arithmetic check is unsound for floating-point execution.
    pub sound: bool,
    /// Why the remaining points were not certified.
    pub refusals: BTreeMap<String, usize>,
    /// Seconds spent on this mode's certificates (forward passes excluded).
    pub seconds: f64,
    /// Mean floating-point degradation relative to the real right-hand side `L eps`
    /// (the paper's conservatism ratio; null for `real`).
    pub conservatism_ratio: Option<f64>,
}

/// Timing of a gate.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    /// Seconds computing the norms.
    pub norms_s: f64,
    /// Seconds for the forward passes and all certificates.
    pub certify_s: f64,
    /// Seconds of the float64 reference pass (included in `certify_s`).
    pub reference_s: f64,
}

/// One gate (or the single `certify` run).
#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    /// Gate name.
    pub name: String,
    /// Deployment format.
    pub format: Format,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
    /// The execution model the certificates cover.
    pub execution: String,
    /// The radius as written (null with per-instance radii).
    pub epsilon: Option<String>,
    /// Per-instance radii file, when used.
    pub epsilons: Option<String>,
    /// Number of test points.
    pub n: usize,
    /// Clean accuracy in percent (null without labels).
    pub accuracy_pct: Option<f64>,
    /// The mode the thresholds apply to.
    pub mode: Mode,
    /// Verdict: null for a gate without thresholds.
    pub passed: Option<bool>,
    /// One line per failed threshold.
    pub failures: Vec<String>,
    /// Every computed mode, `real` included (labelled unsound).
    pub modes: BTreeMap<String, ModeReport>,
    /// Timing.
    pub timing: Timing,
    /// Model file.
    pub model: String,
    /// SHA-256 of the converted network.
    pub model_hash: String,
    /// Gram iterations of the norms.
    pub gram_iterations: u32,
    /// Conversions, execution model and vacuity notes.
    pub notes: Vec<String>,
    /// 1-based line of the gate in the policy file (`check` only).
    pub policy_line: Option<usize>,
}

/// Everything a run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Tool version.
    pub lipfp_version: String,
    /// The policy file, for `check`.
    pub policy: Option<String>,
    /// One entry per gate.
    pub gates: Vec<GateReport>,
}

impl Report {
    /// `(passed, failed, without thresholds)` gate counts.
    pub fn tally(&self) -> (usize, usize, usize) {
        let count = |v: Option<bool>| self.gates.iter().filter(|g| g.passed == v).count();
        (count(Some(true)), count(Some(false)), count(None))
    }
}

/// Static facts about the subject that go into a gate report.
#[derive(Clone, Debug)]
pub struct SubjectFacts {
    /// Model file.
    pub model: String,
    /// Model hash.
    pub model_hash: String,
    /// Format.
    pub format: Format,
    /// FTZ.
    pub ftz: bool,
    /// The execution model, as text.
    pub execution: String,
    /// Gram iterations.
    pub gram_iterations: u32,
    /// Notes.
    pub notes: Vec<String>,
}

impl GateReport {
    /// Assemble a gate's report from the engine's outcome and the gate verdict.
    pub fn new(
        name: &str,
        facts: &SubjectFacts,
        radius: &Radius,
        mode: Mode,
        outcome: &CertifyOutcome,
        verdict: &GateVerdict,
    ) -> GateReport {
        let n = outcome.n;
        let modes = outcome
            .modes
            .iter()
            .map(|m| {
                (
                    m.mode.name().to_string(),
                    ModeReport {
                        certified: m.certified,
                        certified_pct: round4(pct(m.certified, n)),
                        vra: m.vra,
                        vra_pct: m.vra.map(|v| round4(pct(v, n))),
                        sound: m.mode.is_sound(),
                        refusals: m.refusals.clone(),
                        seconds: m.seconds,
                        conservatism_ratio: m.conservatism.map(|c| (c * 1e6).round() / 1e6),
                    },
                )
            })
            .collect();
        let mut notes = facts.notes.clone();
        if !mode.is_sound() {
            notes.push(
                "this gate judges the real-arithmetic mode, which is UNSOUND for floating-point execution: \
                 its certificates can be wrong for the deployed model"
                    .into(),
            );
        }
        if let Some(r) = &outcome.model_refusal {
            if !notes.iter().any(|n| n.contains(r.as_str())) {
                notes.push(r.clone());
            }
        }
        GateReport {
            name: name.to_string(),
            format: facts.format,
            ftz: facts.ftz,
            execution: facts.execution.clone(),
            epsilon: radius.fields().0,
            epsilons: radius.fields().1,
            n,
            accuracy_pct: outcome.correct.map(|c| round4(pct(c, n))),
            mode,
            passed: verdict.passed,
            failures: verdict.failures.clone(),
            modes,
            timing: Timing {
                norms_s: outcome.norms_s,
                certify_s: outcome.certify_s,
                reference_s: outcome.reference_s,
            },
            model: facts.model.clone(),
            model_hash: facts.model_hash.clone(),
            gram_iterations: facts.gram_iterations,
            notes,
            policy_line: None,
        }
    }
}

/// Round a percentage to 4 decimals for stable output.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}
