//! Console summary on stdout.
//!
//! Every line starts with fixed text (a verdict word, indentation and a label, or the counts):
//! user-controlled text (gate names, paths, notes) is made [`printable`] first, so it can never
//! start a line of its own — on GitHub Actions a line starting with `::` is a workflow command.

use std::fmt::Write;

use crate::certify::Mode;
use crate::report::{GateReport, Report};

/// `s` on one line: control characters (newline, carriage return, escape, ...) written as
/// Rust escapes (`\n`, `\r`, `\u{1b}`).
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Diagnostic text for stderr: control characters other than newline escaped, and any line
/// that would start with `::` once leading whitespace is removed (a workflow command on
/// GitHub Actions) prefixed with `lipfp: `.
pub fn diagnostic(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let line = printable(line);
            if line.trim_start().starts_with("::") {
                format!("lipfp: {line}")
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

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
    let eps = printable(&eps);
    let _ = writeln!(
        out,
        "{verdict:<6} {}  [{}{}, eps {eps}, mode {}, n {}]",
        printable(&g.name),
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
        let _ = writeln!(out, "       failed: {}", printable(f));
    }
    for n in &g.notes {
        let _ = writeln!(out, "       note: {}", printable(n));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_cannot_start_a_line() {
        assert_eq!(
            printable("a\n::error ::x\r\u{1b}"),
            "a\\n::error ::x\\r\\u{1b}"
        );
        assert_eq!(printable("dé-jà vu"), "dé-jà vu");
        assert_eq!(
            diagnostic("p.toml: bad\n  ::error::x\n1 | a\r::b"),
            "p.toml: bad\nlipfp:   ::error::x\n1 | a\\r::b"
        );
    }
}
