//! The one builder of a gate's report: what a gate's run produced ([`GateRun`]) judged and
//! assembled into its [`GateReport`] once. `lipfp check`, `lipfp certify` and `lipfp report`
//! fill a `GateRun`; none of them patches a report.

use crate::bounds::certify::Mode;
use crate::engine::run::CertifyOutcome;
use crate::gate::attack::AttackReport;
use crate::gate::baseline::{Baseline, Identity, Unusable};
use crate::gate::complete::CompleteReport;
use crate::gate::curve::CurveReport;
use crate::gate::gate_report::{GateReport, SubjectFacts};
use crate::gate::regression::Regression;
use crate::gate::verdict::evaluate;
use crate::policy::{Radius, Thresholds};

/// Everything one gate's run produced, and what it is judged against.
pub struct GateRun<'a> {
    /// The gate's name.
    pub name: &'a str,
    /// What was certified: model, format, execution, test set.
    pub facts: &'a SubjectFacts,
    /// The radius.
    pub radius: &'a Radius,
    /// The mode the thresholds judge.
    pub mode: Mode,
    /// The engine's outcome.
    pub outcome: &'a CertifyOutcome,
    /// The thresholds (none for `lipfp certify`).
    pub thresholds: &'a Thresholds,
    /// The baseline the drop thresholds compare with, and whether the policy requires it to
    /// compare (`[baseline] required`).
    pub baseline: Option<(&'a Baseline, bool)>,
    /// The per-point regression against a certificate baseline (kept only when the baseline
    /// compares like with like; its McNemar p-value is the significance threshold's figure).
    pub regression: Option<Regression>,
    /// The gate's line in the policy.
    pub policy_line: Option<usize>,
    /// The model as the policy (or the command line) names it.
    pub model_name: Option<String>,
    /// The robustness curve and its notes.
    pub curve: Option<(CurveReport, Vec<String>)>,
    /// Mode `complete`'s decisions.
    pub complete: Option<CompleteReport>,
    /// The falsifier's figures.
    pub attack: Option<AttackReport>,
    /// Why the verdict is withheld (a shard's figures are partial).
    pub withheld: Option<&'a str>,
}

impl GateRun<'_> {
    /// The gate's identity, which a baseline's gate must share to compare.
    fn identity(&self) -> Identity {
        Identity {
            epsilon: self.radius.fields().0,
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
    pub fn build(self) -> GateReport {
        let identity = self.identity();
        let mut base = match self.baseline {
            Some((b, _)) => b.compare(self.name, self.mode.name(), &identity).cloned(),
            None => Err("no baseline report".to_string()),
        };
        let regression = match &mut base {
            Ok(figures) => self.regression.inspect(|r| {
                figures.vra_drop_p = Some(r.drop_p_value());
            }),
            Err(_) => None,
        };
        let verdict = evaluate(
            self.thresholds,
            self.mode,
            self.outcome,
            base.as_ref().map_err(Clone::clone),
        );
        let mut gate = GateReport::new(
            self.name,
            self.facts,
            self.radius,
            self.mode,
            self.outcome,
            &verdict,
        );
        gate.regression = regression;
        gate.policy_line = self.policy_line;
        gate.model_name = self.model_name;
        gate.notes.extend(self.thresholds.fraction_notes());
        if let (Some((_, required)), Err(why)) = (self.baseline, base) {
            gate.baseline_unusable(Unusable::of(why, self.thresholds, required));
        }
        if let Some((curve, notes)) = self.curve {
            gate.notes.extend(notes);
            gate.curve = Some(curve);
            gate.baseline_curve = (self.baseline)
                .and_then(|(b, _)| b.curve(self.name, &identity))
                .cloned();
        }
        gate.complete = self.complete;
        gate.attack = self.attack;
        if let (Some(why), Some(_)) = (self.withheld, gate.passed) {
            gate.withhold_verdict(why);
        }
        gate
    }
}
