//! The falsifier's figures as reported, and the bracket every reporter states:
//! `certified VRA <= robust accuracy <= upper`, the upper bound being the points neither
//! misclassified nor falsified.

use serde::Serialize;

use crate::bounds::certify::Mode;
use crate::engine::attack::AttackOutcome;
use crate::engine::run::Subject;
use crate::gate::verdict::pct;
use crate::report::GateReport;

/// A gate's falsifier figures: in JSON `"attack": {"attacked": N, "falsified": N,
/// "robust_upper_pct": x, "seconds": t, ...}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttackReport {
    /// Points attacked: not certified by `mode`, with finite logits and (with labels)
    /// correctly classified.
    pub attacked: usize,
    /// Points with a confirmed adversarial example in the ball.
    pub falsified: usize,
    /// Upper bound on robust accuracy: `(n - misclassified - falsified) / n`, in percent
    /// (null without labels).
    pub robust_upper_pct: Option<f64>,
    /// Wall seconds of the search.
    pub seconds: f64,
    /// The sound mode whose uncertified points were attacked.
    pub mode: Mode,
    /// Gradient steps per start and starts per point.
    pub steps: usize,
    /// Starts per point (the centre, then random points of the ball).
    pub restarts: usize,
}

impl AttackReport {
    /// The report of `a` on `n` points of which `misclassified` (when labels are known) are
    /// misclassified.
    pub fn new(a: &AttackOutcome, n: usize, misclassified: Option<usize>) -> AttackReport {
        let falsified = a.witnesses.len();
        AttackReport {
            attacked: a.attacked.len(),
            falsified,
            robust_upper_pct: misclassified.map(|m| {
                let robust = n.saturating_sub(m).saturating_sub(falsified);
                (pct(robust, n) * 1e4).round() / 1e4
            }),
            seconds: a.seconds,
            mode: a.mode,
            steps: crate::engine::attack::STEPS,
            restarts: crate::engine::attack::RESTARTS,
        }
    }

    /// The report of `a` on the points of `subject` (misclassified counted from its labels).
    pub fn of_subject(a: &AttackOutcome, subject: &Subject) -> AttackReport {
        let misclassified = subject.correct().map(|c| subject.n() - c);
        AttackReport::new(a, subject.n(), misclassified)
    }
}

/// The bracket of a gate with falsifier figures, in plain text:
/// `standard VRA 95.17% <= robust accuracy <= 97.80% (falsifier: 123 of 290 attacked points
/// falsified, 1.234s)`; without labels only the falsified count.
pub fn bracket_line(g: &GateReport) -> Option<String> {
    let a = g.attack.as_ref()?;
    let tail = format!(
        "falsifier: {} of {} attacked points falsified, {:.3}s",
        a.falsified, a.attacked, a.seconds
    );
    let vra = g.modes.get(a.mode.name()).and_then(|m| m.vra_pct);
    Some(match (vra, a.robust_upper_pct) {
        (Some(v), Some(u)) => {
            format!(
                "certified VRA ({}) {v:.2}% <= robust accuracy <= {u:.2}% ({tail})",
                a.mode
            )
        }
        _ => format!("{tail}; no labels: no bound on robust accuracy"),
    })
}

/// The step summary's line for a gate with falsifier figures (`md` escapes user text).
pub fn summary_section(g: &GateReport, md: impl Fn(&str) -> String) -> Option<String> {
    let line = bracket_line(g)?;
    Some(format!(
        "\n**{}** robustness bracket: {}\n",
        md(&g.name),
        line.replace("<=", "≤")
    ))
}
