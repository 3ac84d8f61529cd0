//! The one builder of a gate's report: what a gate is ([`GateHead`]) and what its run
//! produced, judged and assembled into its [`GateReport`] once. `lipfp check` and `lipfp
//! certify` hand over the engine's [`GateOutcome`] ([`GateHead::judge_run`]), `lipfp report` the
//! merged shards ([`GateHead::judge_merged`]); none of them computes a figure or patches a
//! report.

use crate::bounds::certify::Mode;
use crate::engine::gate_work::GateOutcome;
use crate::engine::run::{CertifyOutcome, Subject};
use crate::gate::attack::AttackReport;
use crate::gate::baseline::{Baseline, Identity, Unusable};
use crate::gate::complete::CompleteReport;
use crate::gate::curve::CurveReport;
use crate::gate::gate_report::{ErroredGate, GateReport, SubjectFacts};
use crate::gate::regression::{self, Regression};
use crate::gate::verdict::evaluate;
use crate::policy::{Gate, Radius, Thresholds};

/// What a gate is and what it is judged against, apart from what its run produced.
pub struct GateHead<'a> {
    /// The gate's name.
    pub name: &'a str,
    /// The radius.
    pub radius: &'a Radius,
    /// The mode the thresholds judge.
    pub mode: Mode,
    /// The thresholds (none for `lipfp certify`).
    pub thresholds: &'a Thresholds,
    /// The baseline the drop thresholds compare with, and whether the policy requires it to
    /// compare (`[baseline] required`).
    pub baseline: Option<(&'a Baseline, bool)>,
    /// The gate's line in the policy.
    pub policy_line: Option<usize>,
    /// The model as the policy (or the command line) names it.
    pub model_name: Option<String>,
    /// Why the verdict is withheld (a shard's figures are partial).
    pub withheld: Option<&'a str>,
}

impl<'a> GateHead<'a> {
    /// Policy gate `g`, judged against `baseline` (with whether the policy requires it to
    /// compare); on a shard (`sharded`) its verdict is withheld.
    pub fn of_gate(g: &'a Gate, baseline: Option<(&'a Baseline, bool)>, sharded: bool) -> Self {
        GateHead {
            name: &g.name,
            radius: &g.radius,
            mode: g.mode(),
            thresholds: &g.thresholds,
            baseline,
            policy_line: Some(g.line),
            model_name: Some(g.model_name.clone()),
            // a shard's figures are partial: thresholds are judged on the merged report
            withheld: sharded
                .then_some("thresholds are evaluated by `lipfp report` on the merged shards"),
        }
    }

    /// The report of the engine's work `done` on `subject` (its Gram iterations
    /// `gram_iterations`): the curve, complete decisions and the falsifier's bracket figured
    /// here, with the per-point regression against a certificate baseline.
    pub fn judge_run(
        self,
        subject: &Subject,
        gram_iterations: u32,
        done: &GateOutcome,
    ) -> GateReport {
        let outcome = &done.outcome;
        let regression = (self.baseline).and_then(|(b, _)| {
            regression::of_run(b, (self.name, self.mode.name()), subject, outcome)
        });
        let curve = (done.curve.as_ref()).map(|c| (CurveReport::new(c, subject.n()), c.notes()));
        let complete = (done.decisions.as_ref()).and_then(|(d, budget)| {
            let settled = outcome.mode(Mode::Complete)?;
            Some(CompleteReport::new(settled, d.into(), budget.into()))
        });
        let attack = (done.bracket(self.mode)).map(|a| AttackReport::of_subject(a, subject));
        GateRun {
            head: self,
            facts: &SubjectFacts::of(subject, gram_iterations),
            outcome,
            regression,
            curve,
            complete,
            attack,
        }
        .build()
    }

    /// The report of merged shards: their `facts`, `outcome` and complete decisions
    /// (`complete`); no curve, bracket or per-point regression.
    pub fn judge_merged(
        self,
        facts: &SubjectFacts,
        outcome: &CertifyOutcome,
        complete: Option<CompleteReport>,
    ) -> GateReport {
        GateRun {
            head: self,
            facts,
            outcome,
            regression: None,
            curve: None,
            complete,
            attack: None,
        }
        .build()
    }
}

/// The report of policy gate `g`: its work (its subject and the engine's outcome) judged
/// against `baseline` (on a shard, `sharded`, with the verdict withheld), or, when the work
/// could not run, the gate errored with the reason.
pub fn judge_gate(
    g: &Gate,
    baseline: Option<(&Baseline, bool)>,
    sharded: bool,
    work: Result<(&Subject, &GateOutcome), String>,
) -> GateReport {
    match work {
        Ok((subject, done)) => {
            let head = GateHead::of_gate(g, baseline, sharded);
            head.judge_run(subject, g.target.gram_iterations, done)
        }
        Err(error) => errored(g, error),
    }
}

/// The report of policy gate `g` that could not be evaluated.
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

/// A gate and everything its run produced, ready to judge.
struct GateRun<'a> {
    /// What the gate is.
    head: GateHead<'a>,
    /// What was certified: model, format, execution, test set.
    facts: &'a SubjectFacts,
    /// The engine's outcome.
    outcome: &'a CertifyOutcome,
    /// The per-point regression against a certificate baseline (kept only when the baseline
    /// compares like with like; its McNemar p-value is the significance threshold's figure).
    regression: Option<Regression>,
    /// The robustness curve and its notes.
    curve: Option<(CurveReport, Vec<String>)>,
    /// Mode `complete`'s decisions.
    complete: Option<CompleteReport>,
    /// The falsifier's figures.
    attack: Option<AttackReport>,
}

impl GateRun<'_> {
    /// The gate's identity, which a baseline's gate must share to compare.
    fn identity(&self) -> Identity {
        Identity {
            epsilon: self.head.radius.fields().0,
            epsilons_sha256: self.outcome.radii_hash.clone(),
            format: Some(self.facts.format.name().to_string()),
            execution: Some(self.facts.execution.clone()),
            test_set_hash: self.facts.test_set_hash.clone(),
            ball: Some(self.facts.ball.clone()),
        }
    }

    /// Judge the run against its thresholds and baseline and assemble its report: the
    /// verdict, the regression, the thresholds' fraction notes, what a baseline that does not
    /// compare does, the curve (beside the baseline's), complete decisions, the bracket, and a
    /// withheld verdict.
    fn build(self) -> GateReport {
        let identity = self.identity();
        let mut base = match self.head.baseline {
            Some((b, _)) => b
                .compare(self.head.name, self.head.mode.name(), &identity)
                .cloned(),
            None => Err("no baseline report".to_string()),
        };
        let regression = match &mut base {
            Ok(figures) => self.regression.inspect(|r| {
                figures.vra_drop_p = Some(r.drop_p_value());
            }),
            Err(_) => None,
        };
        let verdict = evaluate(
            self.head.thresholds,
            self.head.mode,
            self.outcome,
            base.as_ref().map_err(Clone::clone),
        );
        let mut gate = GateReport::new(
            self.head.name,
            self.facts,
            self.head.radius,
            self.head.mode,
            self.outcome,
            &verdict,
        );
        gate.regression = regression;
        gate.policy_line = self.head.policy_line;
        gate.model_name = self.head.model_name;
        gate.notes.extend(self.head.thresholds.fraction_notes());
        if let (Some((_, required)), Err(why)) = (self.head.baseline, base) {
            gate.baseline_unusable(Unusable::of(why, self.head.thresholds, required));
        }
        if let Some((curve, notes)) = self.curve {
            gate.notes.extend(notes);
            gate.curve = Some(curve);
            gate.baseline_curve = (self.head.baseline)
                .and_then(|(b, _)| b.curve(self.head.name, &identity))
                .cloned();
        }
        gate.complete = self.complete;
        gate.attack = self.attack;
        if let (Some(why), Some(_)) = (self.head.withheld, gate.passed) {
            gate.withhold_verdict(why);
        }
        gate
    }
}
