//! Console summary on stdout.

use std::fmt::Write;

use crate::certify::Mode;
use crate::report::{GateReport, Report};

fn fmt_pct(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}%"))
        .unwrap_or_else(|| "n/a".into())
}

fn gate_block(out: &mut String, g: &GateReport) {
    let verdict = match g.passed {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "REPORT",
    };
    let eps = g
        .epsilon
        .clone()
        .or_else(|| g.epsilons.as_ref().map(|p| format!("per-instance ({p})")))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{verdict:<6} {}  [{}{}, eps {eps}, mode {}, n {}]",
        g.name,
        g.format,
        if g.ftz { " ftz" } else { "" },
        g.mode,
        g.n
    );
    let _ = writeln!(out, "       accuracy {}", fmt_pct(g.accuracy_pct));
    let ordered = Mode::ALL.iter().filter_map(|mode| {
        g.modes
            .get(mode.name())
            .map(|m| (mode.name().to_string(), m))
    });
    for (name, m) in ordered {
        let label = if m.sound {
            name.clone()
        } else {
            format!("{name} (UNSOUND for fp execution)")
        };
        let ratio = m
            .conservatism_ratio
            .map(|r| format!("  fp degradation {r:.3} x L eps"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "       {label:<36} certified {:>6} ({:>7})  VRA {:>8}{ratio}",
            m.certified,
            format!("{:.2}%", m.certified_pct),
            fmt_pct(m.vra_pct)
        );
    }
    for f in &g.failures {
        let _ = writeln!(out, "       failed: {f}");
    }
    for n in &g.notes {
        let _ = writeln!(out, "       note: {n}");
    }
    let _ = writeln!(
        out,
        "       time: norms {:.3}s, certify {:.3}s",
        g.timing.norms_s, g.timing.certify_s
    );
}

/// The console summary of a report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for g in &report.gates {
        gate_block(&mut out, g);
    }
    let total = report.gates.len();
    let (passed, failed, _) = report.tally();
    if report.policy.is_some() {
        let _ = writeln!(
            out,
            "{passed} passed, {failed} failed, {} without thresholds ({total} gates)",
            total - passed - failed
        );
    }
    out
}
