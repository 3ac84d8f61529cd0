//! One gate's work on a prepared subject, in one call: certify every point in every mode,
//! decide with branch and bound what mode `complete` leaves open, trace the robustness curve,
//! and run the falsifier for the bracket ([`run_gate`]). `lipfp certify` asks for its one gate
//! here; `lipfp check` asks [`PolicyWork`] for each policy gate in turn, which loads each target
//! once. What the work produced is judged by `gate`, never here.

use crate::bounds::certify::Mode;
use crate::engine::attack::{falsify, AttackOutcome};
use crate::engine::complete::points::{decide_points, PointDecisions};
use crate::engine::run::{certify_curve, certify_with_options, prepare, ReferencePlan};
use crate::engine::run::{CertifyOptions, CertifyOutcome, CurveOutcome, Shard};
use crate::engine::run::{Subject, SubjectSpec};
use crate::error::LipfpError;
use crate::policy::{CompleteBudget, CurveGrid, Gate, Policy, Radius, Target};
use crate::progress::Progress;

/// What one gate asks of the engine.
pub struct GateWork<'a> {
    /// How progress names the gate (`gate `name`: `, or empty for `lipfp certify`).
    pub label: String,
    /// The radius (uniform or per instance).
    pub radius: &'a Radius,
    /// The modes, the one the gate judges first (never empty).
    pub modes: &'a [Mode],
    /// The local bounds' budget and `best`'s use of them.
    pub options: CertifyOptions,
    /// With mode `complete`: branch and bound's budget.
    pub complete: Option<CompleteBudget>,
    /// The robustness curve's radii, when asked for.
    pub curve: Option<&'a CurveGrid>,
    /// Run the falsifier on the points the judged mode leaves uncertified.
    pub attack: bool,
}

impl<'a> GateWork<'a> {
    /// What policy gate `g` asks for.
    pub fn of_gate(g: &'a Gate) -> GateWork<'a> {
        GateWork {
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
        }
    }
}

/// What one gate's work produced.
pub struct GateOutcome {
    /// Every point's verdict in every mode (mode `complete` settled by its decisions).
    pub outcome: CertifyOutcome,
    /// Branch and bound's decisions and the budget they ran under.
    pub decisions: Option<(PointDecisions, CompleteBudget)>,
    /// The robustness curve.
    pub curve: Option<CurveOutcome>,
    /// The falsifier's run apart from branch and bound (when the judged mode is not
    /// `complete`, whose decisions carry their own falsifier run).
    falsified: Option<AttackOutcome>,
}

impl GateOutcome {
    /// The falsifier's outcome that brackets the judged mode `mode`: the run inside branch and
    /// bound when `mode` is `complete`, else the separate run (when asked for).
    pub fn bracket(&self, mode: Mode) -> Option<&AttackOutcome> {
        match &self.decisions {
            Some((d, _)) if mode == Mode::Complete => Some(&d.attack),
            _ => self.falsified.as_ref(),
        }
    }
}

/// Do `work` on `subject`: certification, then complete decisions, the curve and the
/// falsifier as asked (the falsifier only where branch and bound did not already run it).
pub fn run_gate(
    subject: &Subject,
    work: &GateWork,
    progress: &Progress,
) -> Result<GateOutcome, LipfpError> {
    let stage = |what: &str| progress.stage(&format!("{}{what}", work.label));
    stage(&format!("certifying {} points", subject.n()));
    let mut outcome =
        certify_with_options(subject, work.radius, work.modes, &work.options, progress)?;
    let decisions = (work.complete)
        .filter(|_| work.modes.contains(&Mode::Complete))
        .map(|budget| {
            stage("complete decisions");
            decide_points(subject, work.radius, &mut outcome, budget, progress).map(|d| (d, budget))
        })
        .transpose()?;
    let curve = (work.curve)
        .map(|grid| {
            stage("robustness curve");
            certify_curve(subject, grid, work.modes, &work.options)
        })
        .transpose()?;
    let judged = work.modes.first().copied().unwrap_or(Mode::Real);
    let falsified = match &decisions {
        Some(_) if judged == Mode::Complete => None,
        _ if work.attack => {
            stage("falsifier");
            Some(falsify(subject, work.radius, judged, &outcome, progress)?)
        }
        _ => None,
    };
    Ok(GateOutcome {
        outcome,
        decisions,
        curve,
        falsified,
    })
}

/// A policy's gates worked in turn (on one shard of every test set): each distinct target is
/// loaded once, when the first gate naming it runs, and kept (or the error loading it) for the
/// gates after it.
pub struct PolicyWork<'p> {
    /// The policy.
    policy: &'p Policy,
    /// The shard of every test set, if any.
    shard: Option<Shard>,
    /// One subject (or the error loading it) per target loaded so far, in the order gates
    /// name them.
    subjects: Vec<(Target, Result<Subject, String>)>,
}

impl<'p> PolicyWork<'p> {
    /// Work `policy`'s gates on `shard`.
    pub fn new(policy: &'p Policy, shard: Option<Shard>) -> PolicyWork<'p> {
        PolicyWork {
            policy,
            shard,
            subjects: Vec::new(),
        }
    }

    /// Do gate `g`'s work on its target (loaded now if no earlier gate named it, with the
    /// float64 reference where [`ReferencePlan::for_target`] says): its subject and outcome,
    /// or why it could not run (the target failed to load, or the work failed).
    pub fn run(
        &mut self,
        g: &Gate,
        progress: &Progress,
    ) -> Result<(&Subject, GateOutcome), String> {
        let k = match self.subjects.iter().position(|(t, _)| *t == g.target) {
            Some(k) => k,
            None => {
                let plan = ReferencePlan::for_target(self.policy, &g.target);
                let spec = SubjectSpec::for_target(&g.target, plan, self.shard);
                let subject = prepare(&spec, progress).map_err(|e| e.to_string());
                self.subjects.push((g.target.clone(), subject));
                self.subjects.len() - 1
            }
        };
        let subject = self.subjects[k].1.as_ref().map_err(String::clone)?;
        let done = run_gate(subject, &GateWork::of_gate(g), progress).map_err(|e| e.to_string())?;
        Ok((subject, done))
    }
}
