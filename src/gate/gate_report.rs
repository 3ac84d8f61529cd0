//! A gate's report: every figure of one gate (rates, rounding, floating-point cost, the
//! falsifier's bracket, complete decisions, the baseline comparison, notes), computed here
//! once from the engine's outcomes and the verdict; every reporter (`crate::report`) renders
//! it and computes nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arith::format::Format;
use crate::bounds::certify::Mode;
use crate::engine::run::{CertifyOutcome, Subject};
use crate::gate::attack::AttackReport;
use crate::gate::baseline::Unusable;
use crate::gate::classes::{class_reports, ClassReport};
use crate::gate::complete::CompleteReport;
use crate::gate::curve::CurveReport;
use crate::gate::regression::Regression;
use crate::gate::verdict::{fp_cost_pp, pct, round4, unevaluated, GateVerdict, ThresholdCheck};
use crate::policy::{Radius, Thresholds};

/// Figures of one mode. A baseline reads them back into this type (every field but
/// `certified_pct` may be absent, as in reports of earlier versions).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeReport {
    /// Points certified.
    #[serde(default)]
    pub certified: usize,
    /// Certified rate in percent of all points.
    pub certified_pct: f64,
    /// Points certified and correctly classified (null without labels).
    #[serde(default)]
    pub vra: Option<usize>,
    /// VRA in percent of all points (null without labels).
    #[serde(default)]
    pub vra_pct: Option<f64>,
    /// False for `real`: the real-arithmetic check is unsound for floating-point execution.
    #[serde(default)]
    pub sound: bool,
    /// Why the remaining points were not certified.
    #[serde(default)]
    pub refusals: BTreeMap<String, usize>,
    /// Seconds spent on this mode's certificates (forward passes excluded).
    #[serde(default)]
    pub seconds: f64,
    /// Mean floating-point degradation relative to the real right-hand side `L eps`
    /// (the paper's conservatism ratio; null for `real`).
    #[serde(default)]
    pub conservatism_ratio: Option<f64>,
    /// Per true class: points, certified and VRA (empty without labels).
    #[serde(default)]
    pub classes: Vec<ClassReport>,
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

/// The outcome of one gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateStatus {
    /// Every threshold was met.
    Pass,
    /// Every threshold was met but at least one warn-level (`warn_*`) threshold: reported,
    /// never failing the run.
    Warn,
    /// At least one threshold was not met.
    Fail,
    /// The gate has no thresholds (or its verdict is withheld, e.g. on a shard): it reports.
    Report,
    /// The gate could not be evaluated (model refused, data mismatch, bad radii file, a
    /// required baseline that does not compare); `error` says why.
    Error,
}

impl GateStatus {
    /// The status of a verdict.
    pub fn of(verdict: &GateVerdict) -> GateStatus {
        match verdict.passed {
            Some(true) if !verdict.warnings.is_empty() => GateStatus::Warn,
            Some(true) => GateStatus::Pass,
            Some(false) => GateStatus::Fail,
            None => GateStatus::Report,
        }
    }

    /// `pass`, `warn`, `fail`, `report` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            GateStatus::Pass => "pass",
            GateStatus::Warn => "warn",
            GateStatus::Fail => "fail",
            GateStatus::Report => "report",
            GateStatus::Error => "error",
        }
    }
}

/// One gate (or the single `certify` run).
#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    /// Gate name.
    pub name: String,
    /// `pass`, `warn` (a warn-level threshold not met), `fail`, `report` (no thresholds) or
    /// `error` (not evaluated: see `error`).
    pub status: GateStatus,
    /// Why the gate could not be evaluated (only with status `error`).
    pub error: Option<String>,
    /// Deployment format (null when the gate errored before it was known).
    pub format: Option<Format>,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
    /// The execution model the certificates cover (null when the gate errored before it).
    pub execution: Option<String>,
    /// The radius as written (null with per-instance radii).
    pub epsilon: Option<String>,
    /// The set the radius stands for around each point: `l2`, `linf`, with ` in [lo, hi]` when
    /// clipped to an input range.
    pub ball: String,
    /// Per-instance radii file, when used.
    pub epsilons: Option<String>,
    /// SHA-256 of the per-instance radii (float64 values, little-endian), when used and read.
    pub epsilons_sha256: Option<String>,
    /// Number of test points.
    pub n: usize,
    /// SHA-256 of the test set as certified: the inputs converted to the format, and the
    /// labels (null when unknown, e.g. for an unverified merge).
    pub test_set_hash: Option<String>,
    /// Clean accuracy in percent (null without labels).
    pub accuracy_pct: Option<f64>,
    /// The mode the thresholds apply to.
    pub mode: Mode,
    /// Verdict: null for a gate without thresholds, and for an errored gate.
    pub passed: Option<bool>,
    /// One line per failed threshold.
    pub failures: Vec<String>,
    /// One line per warn-level threshold not met.
    pub warnings: Vec<String>,
    /// Every threshold with the measured figure and the margin to it.
    pub thresholds: Vec<ThresholdCheck>,
    /// Every computed mode, `real` included (labelled unsound).
    pub modes: BTreeMap<String, ModeReport>,
    /// Timing.
    pub timing: Timing,
    /// Model file.
    pub model: String,
    /// The model as the policy names it (relative to the policy file), or as given on the
    /// command line; JUnit classnames are made from it.
    pub model_name: Option<String>,
    /// SHA-256 of the converted network (null when the gate errored before it was loaded).
    pub model_hash: Option<String>,
    /// Gram iterations of the norms.
    pub gram_iterations: u32,
    /// Conversions, execution model and vacuity notes.
    pub notes: Vec<String>,
    /// 1-based line of the gate in the policy file (`check` only).
    pub policy_line: Option<usize>,
    /// The robustness curve, when asked for (`--curve`, `curve` in the gate).
    pub curve: Option<CurveReport>,
    /// The baseline report's curve of the same gate, for the charts.
    pub baseline_curve: Option<CurveReport>,
    /// The falsifier's figures, when asked for (`--attack`, `attack = true` in the gate).
    pub attack: Option<AttackReport>,
    /// The floating-point cost of `mode` (real certified minus its certified rate, percentage
    /// points; null when either was not computed).
    pub fp_cost_pp: Option<f64>,
    /// Mode `complete`'s decisions (verified, falsified, undecided), when it ran.
    pub complete: Option<CompleteReport>,
    /// The per-point regression against a certificate baseline (`[baseline] certificates`).
    pub regression: Option<Regression>,
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

/// Gate counts by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Gates that passed.
    pub passed: usize,
    /// Gates that met every threshold but a warn-level one.
    pub warned: usize,
    /// Gates that failed a threshold.
    pub failed: usize,
    /// Gates without thresholds (or with a withheld verdict).
    pub report: usize,
    /// Gates that could not be evaluated.
    pub errored: usize,
}

impl Tally {
    /// Every gate.
    pub fn total(&self) -> usize {
        self.passed + self.warned + self.failed + self.report + self.errored
    }

    /// `"1 passed, 1 warned, 1 failed, 1 errored, 0 without thresholds (4 gates)"` (`warned`
    /// and `errored` only when a gate warned or errored).
    pub fn line(&self) -> String {
        let errored = if self.errored > 0 {
            format!("{} errored, ", self.errored)
        } else {
            String::new()
        };
        let warned = if self.warned > 0 {
            format!("{} warned, ", self.warned)
        } else {
            String::new()
        };
        format!(
            "{} passed, {warned}{} failed, {errored}{} without thresholds ({} gates)",
            self.passed,
            self.failed,
            self.report,
            self.total()
        )
    }
}

impl Report {
    /// Gate counts by status.
    pub fn tally(&self) -> Tally {
        let count = |s: GateStatus| self.gates.iter().filter(|g| g.status == s).count();
        Tally {
            passed: count(GateStatus::Pass),
            warned: count(GateStatus::Warn),
            failed: count(GateStatus::Fail),
            report: count(GateStatus::Report),
            errored: count(GateStatus::Error),
        }
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
    /// SHA-256 of the converted test inputs and labels (`None` when unknown).
    pub test_set_hash: Option<String>,
    /// Notes.
    pub notes: Vec<String>,
    /// The set a radius stands for ([`crate::bounds::ball::BallSpec::describe`]).
    pub ball: String,
}

impl SubjectFacts {
    /// The facts of a prepared subject that go into its gates' reports.
    pub fn of(subject: &Subject, gram_iterations: u32) -> SubjectFacts {
        SubjectFacts {
            model: subject.net.path.display().to_string(),
            model_hash: subject.net.hash(),
            format: subject.net.format,
            ftz: subject.ftz,
            execution: subject.execution.to_string(),
            gram_iterations,
            test_set_hash: Some(subject.test_set_hash.clone()),
            notes: subject.notes.clone(),
            ball: subject.ball.describe(),
        }
    }
}

impl GateReport {
    /// Assemble a gate's report from the engine's outcome and the gate verdict.
    pub(super) fn new(
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
                        conservatism_ratio: m.conservatism.map(round6),
                        classes: class_reports(&m.by_class),
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
        notes.extend(outcome.notes.iter().cloned());
        GateReport {
            name: name.to_string(),
            status: GateStatus::of(verdict),
            error: None,
            format: Some(facts.format),
            ftz: facts.ftz,
            execution: Some(facts.execution.clone()),
            epsilon: radius.fields().0,
            ball: facts.ball.clone(),
            epsilons: radius.fields().1,
            epsilons_sha256: outcome.radii_hash.clone(),
            n,
            test_set_hash: facts.test_set_hash.clone(),
            accuracy_pct: outcome.correct.map(|c| round4(pct(c, n))),
            mode,
            passed: verdict.passed,
            failures: verdict.failures.clone(),
            warnings: verdict.warnings.clone(),
            thresholds: verdict.checks.clone(),
            modes,
            timing: Timing {
                norms_s: outcome.norms_s,
                certify_s: outcome.certify_s,
                reference_s: outcome.reference_s,
            },
            model: facts.model.clone(),
            model_name: None,
            model_hash: Some(facts.model_hash.clone()),
            gram_iterations: facts.gram_iterations,
            notes,
            policy_line: None,
            curve: None,
            baseline_curve: None,
            attack: None,
            fp_cost_pp: fp_cost_pp(outcome, mode).ok().map(round4),
            complete: None,
            regression: None,
        }
    }

    /// The report of a gate that could not be evaluated: status `error`, no figures, every
    /// threshold listed as not evaluated.
    pub fn errored(spec: &ErroredGate<'_>, error: String) -> GateReport {
        let (epsilon, epsilons) = spec.radius.fields();
        GateReport {
            name: spec.name.to_string(),
            status: GateStatus::Error,
            error: Some(error),
            format: spec.format,
            ftz: spec.ftz,
            execution: None,
            epsilon,
            ball: spec.ball.clone(),
            epsilons,
            epsilons_sha256: None,
            n: 0,
            test_set_hash: None,
            accuracy_pct: None,
            mode: spec.mode,
            passed: None,
            failures: Vec::new(),
            warnings: Vec::new(),
            thresholds: unevaluated(spec.thresholds, spec.mode),
            modes: BTreeMap::new(),
            timing: Timing {
                norms_s: 0.0,
                certify_s: 0.0,
                reference_s: 0.0,
            },
            model: spec.model.display().to_string(),
            model_name: spec.model_name.map(str::to_string),
            model_hash: None,
            gram_iterations: spec.gram_iterations,
            notes: spec.notes.to_vec(),
            policy_line: spec.policy_line,
            curve: None,
            baseline_curve: None,
            attack: None,
            fp_cost_pp: None,
            complete: None,
            regression: None,
        }
    }

    /// The radius as reports show it: the decimal, or the per-instance radii file, followed by
    /// [`GateReport::ball_suffix`].
    pub fn radius_text(&self) -> String {
        let radius = (self.epsilon.clone())
            .or_else(|| {
                self.epsilons
                    .as_ref()
                    .map(|p| format!("per-instance ({p})"))
            })
            .unwrap_or_default();
        radius + &self.ball_suffix()
    }

    /// ` (linf in [0, 1])` after a radius of any set but the plain l2 ball (which every report
    /// before input sets certified, and still shows without a suffix).
    pub fn ball_suffix(&self) -> String {
        if self.ball == "l2" {
            String::new()
        } else {
            format!(" ({})", self.ball)
        }
    }

    /// Withhold the verdict (e.g. on a shard, whose figures are partial): status `report`.
    pub(super) fn withhold_verdict(&mut self, why: &str) {
        self.passed = None;
        self.warnings.clear();
        self.status = GateStatus::Report;
        self.notes.push(why.to_string());
    }

    /// Add a warning: a passing gate warns (a failing one still fails).
    pub(super) fn warn(&mut self, warning: String) {
        if self.status == GateStatus::Pass {
            self.status = GateStatus::Warn;
        }
        self.warnings.push(warning);
    }

    /// What a baseline that does not compare does to the gate ([`Unusable`]).
    pub(super) fn baseline_unusable(&mut self, u: Unusable) {
        match u {
            Unusable::Error(e) => self.set_error(e),
            Unusable::Warning(w) => self.warn(w),
            Unusable::Note(n) => self.notes.push(n),
        }
    }

    /// Turn an evaluated gate into an errored one (e.g. a required baseline that does not
    /// compare), keeping its figures: status `error`, no verdict.
    pub(super) fn set_error(&mut self, error: String) {
        self.passed = None;
        self.warnings.clear();
        self.status = GateStatus::Error;
        self.error = Some(error);
    }
}

/// What is known about a gate that could not be evaluated.
#[derive(Clone, Debug)]
pub struct ErroredGate<'a> {
    /// Gate name.
    pub name: &'a str,
    /// Declared format, if any.
    pub format: Option<Format>,
    /// Flush-to-zero declared.
    pub ftz: bool,
    /// Radius.
    pub radius: &'a Radius,
    /// The set the radius stands for, described.
    pub ball: String,
    /// Mode the thresholds apply to.
    pub mode: Mode,
    /// Thresholds.
    pub thresholds: &'a Thresholds,
    /// Model file.
    pub model: &'a std::path::Path,
    /// The model as the policy names it.
    pub model_name: Option<&'a str>,
    /// Gram iterations.
    pub gram_iterations: u32,
    /// Notes known before the error (e.g. thresholds that look like fractions).
    pub notes: &'a [String],
    /// 1-based line of the gate in the policy.
    pub policy_line: Option<usize>,
}

/// Round a ratio to 6 decimals for stable output; a value too large to scale is kept as is
/// (rounding must not turn a finite ratio into infinity).
fn round6(x: f64) -> f64 {
    let scaled = x * 1e6;
    if scaled.is_finite() {
        scaled.round() / 1e6
    } else {
        x
    }
}
