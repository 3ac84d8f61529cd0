//! Per-class figures of a gate: for each true class, its points and how many of them the gate's
//! modes certify (and certify correctly), so a report shows which classes lost robustness.

use serde::{Deserialize, Serialize};

use crate::engine::run::ClassCount;
use crate::gate::verdict::pct;

/// One true class's figures in one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassReport {
    /// The class index (the label).
    pub class: usize,
    /// Points labelled with the class.
    pub n: usize,
    /// Of those, certified.
    pub certified: usize,
    /// Certified in percent of the class's points.
    pub certified_pct: f64,
    /// Of those, certified and correctly classified.
    pub vra: usize,
    /// VRA in percent of the class's points.
    pub vra_pct: f64,
}

/// The per-class reports of one mode's counts (classes without points left out).
pub fn class_reports(counts: &[ClassCount]) -> Vec<ClassReport> {
    counts
        .iter()
        .enumerate()
        .filter(|(_, c)| c.n > 0)
        .map(|(class, c)| ClassReport {
            class,
            n: c.n,
            certified: c.certified,
            certified_pct: round2(pct(c.certified, c.n)),
            vra: c.vra,
            vra_pct: round2(pct(c.vra, c.n)),
        })
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
