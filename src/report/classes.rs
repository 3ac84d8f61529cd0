//! Per-class figures of a gate: for each true class, its points and how many of them the gate's
//! modes certify (and certify correctly), so a report shows which classes lost robustness.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::engine::run::ClassCount;
use crate::gate::verdict::pct;
use crate::report::GateReport;

/// Most classes listed in the step summary (every class is in the JSON report).
const MAX_SUMMARY_CLASSES: usize = 100;

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

/// The step summary's per-class table of gate `g` in its threshold mode, when labels are known.
pub fn class_section(g: &GateReport, escape: impl Fn(&str) -> String) -> Option<String> {
    let classes = &g.modes.get(g.mode.name())?.classes;
    if classes.is_empty() {
        return None;
    }
    let mut out = format!(
        "\n### Per class: {} ({} mode)\n\n| class | points | certified | VRA |\n|---|---|---|---|\n",
        escape(&g.name),
        g.mode
    );
    for c in classes.iter().take(MAX_SUMMARY_CLASSES) {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2}% ({}) | {:.2}% ({}) |",
            c.class, c.n, c.certified_pct, c.certified, c.vra_pct, c.vra
        );
    }
    if classes.len() > MAX_SUMMARY_CLASSES {
        let _ = writeln!(
            out,
            "\n_{} more classes in the JSON report._",
            classes.len() - MAX_SUMMARY_CLASSES
        );
    }
    Some(out)
}
