//! The falsifier's figures of a gate: points attacked and falsified, and the upper end of the
//! bracket `certified VRA <= robust accuracy <= upper`, the points neither misclassified nor
//! falsified.

use serde::Serialize;

use crate::bounds::certify::Mode;
use crate::engine::attack::AttackOutcome;
use crate::engine::run::Subject;
use crate::gate::verdict::{pct, round4};

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
                round4(pct(robust, n))
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
