//! Gate verdicts: compare a run's figures with a gate's thresholds.

use crate::baseline::BaselineFigures;
use crate::certify::Mode;
use crate::policy::Thresholds;
use crate::run::CertifyOutcome;

/// Percentage `100 * k / n`.
pub fn pct(k: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * k as f64 / n as f64
    }
}

/// The verdict of one gate.
#[derive(Clone, Debug, PartialEq)]
pub struct GateVerdict {
    /// `None` when the gate has no threshold.
    pub passed: Option<bool>,
    /// One line per failed threshold, e.g. `VRA 94.10% < min_vra_pct 95`.
    pub failures: Vec<String>,
}

/// Evaluate `thresholds` against the figures of `mode` in `outcome` (and, for the drop
/// thresholds, against the same gate's figures in a baseline report).
pub fn evaluate(
    thresholds: &Thresholds,
    mode: Mode,
    outcome: &CertifyOutcome,
    baseline: Option<&BaselineFigures>,
) -> GateVerdict {
    if thresholds.is_empty() {
        return GateVerdict {
            passed: None,
            failures: vec![],
        };
    }
    let n = outcome.n;
    let m = outcome.mode(mode).expect("the gate's mode was computed");
    let real = outcome
        .mode(Mode::Real)
        .expect("the real ceiling is always computed");
    let mut failures = Vec::new();
    let mut check =
        |what: &str, actual: Option<f64>, key: &str, limit: Option<f64>, at_least: bool| {
            if let (Some(limit), Some(actual)) = (limit, actual) {
                let ok = if at_least {
                    actual >= limit
                } else {
                    actual <= limit
                };
                if !ok {
                    let (op, unit) = if at_least { ("<", "%") } else { (">", " pp") };
                    failures.push(format!("{what} {actual:.2}{unit} {op} {key} {limit}"));
                }
            }
        };
    check(
        "accuracy",
        outcome.correct.map(|c| pct(c, n)),
        "min_accuracy_pct",
        thresholds.min_accuracy_pct,
        true,
    );
    check(
        &format!("{mode} certified"),
        Some(pct(m.certified, n)),
        "min_certified_pct",
        thresholds.min_certified_pct,
        true,
    );
    check(
        &format!("{mode} VRA"),
        m.vra.map(|v| pct(v, n)),
        "min_vra_pct",
        thresholds.min_vra_pct,
        true,
    );
    check(
        "floating-point cost",
        Some(pct(real.certified, n) - pct(m.certified, n)),
        "max_fp_cost_pp",
        thresholds.max_fp_cost_pp,
        false,
    );
    if let Some(b) = baseline {
        let drop = |what: &str,
                    before: Option<f64>,
                    now: Option<f64>,
                    key: &str,
                    limit: Option<f64>| {
            let (Some(before), Some(now), Some(limit)) = (before, now, limit) else {
                return None;
            };
            let d = before - now;
            (d > limit).then(|| {
                format!("{mode} {what} dropped {d:.2} pp (baseline {before:.2}% -> now {now:.2}%) > {key} {limit}")
            })
        };
        failures.extend(drop(
            "VRA",
            b.vra_pct,
            m.vra.map(|v| pct(v, n)),
            "max_vra_drop_pp",
            thresholds.max_vra_drop_pp,
        ));
        failures.extend(drop(
            "certified",
            Some(b.certified_pct),
            Some(pct(m.certified, n)),
            "max_certified_drop_pp",
            thresholds.max_certified_drop_pp,
        ));
    }
    GateVerdict {
        passed: Some(failures.is_empty()),
        failures,
    }
}
