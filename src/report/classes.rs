//! The step summary's per-class table of a gate's figures ([`ClassReport`]).

use std::fmt::Write;

use crate::report::GateReport;

/// Most classes listed in the step summary (every class is in the JSON report).
const MAX_SUMMARY_CLASSES: usize = 100;

pub use crate::gate::classes::{class_reports, ClassReport};

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
