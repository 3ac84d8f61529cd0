//! Console summary on stdout.
//!
//! Every line starts with fixed text (a verdict word, indentation and a label, or the counts):
//! user-controlled text (gate names, paths, notes) is made [`printable`] first, so it can never
//! start a line of its own — on GitHub Actions a line starting with `::` is a workflow command.

use std::fmt::Write;

use crate::bounds::certify::Mode;
use crate::gate::curve::CurveReport;
use crate::progress::printable;
use crate::report::figure_text::{fmt_pct, fmt_ratio};
use crate::report::{GateReport, GateStatus, Report};

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

/// The bracketed facts of a gate's first line: format, eps, mode and (when evaluated) n.
fn gate_facts(g: &GateReport) -> String {
    let eps = g.radius_text();
    let format = g
        .format
        .map(|f| f.to_string())
        .unwrap_or_else(|| "format n/a".into());
    let n = if g.status == GateStatus::Error {
        String::new()
    } else {
        format!(", n {}", g.n)
    };
    format!(
        "[{format}{}, eps {}, mode {}{n}]",
        if g.ftz { " ftz" } else { "" },
        printable(&eps),
        g.mode
    )
}

/// The verdict word of a gate's first line.
fn verdict_word(status: GateStatus) -> &'static str {
    match status {
        GateStatus::Pass => "PASS",
        GateStatus::Warn => "WARN",
        GateStatus::Fail => "FAIL",
        GateStatus::Report => "REPORT",
        GateStatus::Error => "ERROR",
    }
}

/// A gate's block: its first line (verdict, name, facts, accuracy and time), the error, one
/// line per mode, the curve, the bracket, branch and bound's decisions, the baseline
/// comparison, failures and warnings; with `verbose`, every note and the time split.
fn gate_block(out: &mut String, g: &GateReport, verbose: bool) {
    let mut first = format!(
        "{:<6} {}  {}",
        verdict_word(g.status),
        printable(&g.name),
        gate_facts(g)
    );
    if !g.modes.is_empty() {
        let total = g.timing.norms_s + g.timing.certify_s;
        let _ = write!(
            first,
            "  accuracy {}  {total:.3}s",
            fmt_pct(g.accuracy_pct, "n/a")
        );
    }
    let _ = writeln!(out, "{first}");
    if let Some(e) = &g.error {
        let _ = writeln!(out, "       error: {}", printable(e));
    }
    mode_lines(out, g);
    if let Some(c) = &g.curve {
        curve_table(out, c);
    }
    if let Some(line) = crate::report::attack::bracket_line(g) {
        let _ = writeln!(out, "       attack: {line}");
    }
    if let Some(c) = &g.complete {
        let _ = writeln!(out, "       {}", c.line());
    }
    if let Some(r) = &g.regression {
        let _ = writeln!(out, "       baseline: {}", printable(&r.line()));
    }
    for f in &g.failures {
        let _ = writeln!(out, "       failed: {}", printable(f));
    }
    for w in &g.warnings {
        let _ = writeln!(out, "       warning: {}", printable(w));
    }
    if verbose {
        for n in &g.notes {
            let _ = writeln!(out, "       note: {}", printable(n));
        }
        if !g.modes.is_empty() {
            let _ = writeln!(
                out,
                "       time: norms {:.3}s, certify {:.3}s",
                g.timing.norms_s, g.timing.certify_s
            );
        }
    }
}

/// One line per computed mode, in [`Mode::ALL`] order: certified count and rate, VRA and the
/// floating-point degradation; `real` labelled UNSOUND.
fn mode_lines(out: &mut String, g: &GateReport) {
    let ordered: Vec<(String, &crate::report::ModeReport)> = (Mode::ALL.iter())
        .filter_map(|mode| g.modes.get(mode.name()).map(|m| (mode.name(), m)))
        .map(|(name, m)| match m.sound {
            true => (name.to_string(), m),
            false => (format!("{name} (UNSOUND)"), m),
        })
        .collect();
    let width = ordered.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (label, m) in ordered {
        let ratio = match (m.conservatism_ratio, m.sound) {
            (Some(r), _) => format!("  fp degradation {} x L eps", fmt_ratio(r)),
            (None, true) => "  fp degradation n/a".to_string(),
            (None, false) => String::new(),
        };
        let _ = writeln!(
            out,
            "       {label:<width$}  certified {:>6} ({:>7})  VRA {:>8}{ratio}",
            m.certified,
            format!("{:.2}%", m.certified_pct),
            fmt_pct(m.vra_pct, "n/a")
        );
    }
}

/// The curve as a table: one row per radius, one column per mode (VRA %, or certified % without
/// labels), then the median certified radius per mode.
fn curve_table(out: &mut String, c: &CurveReport) {
    let modes: Vec<&str> = Mode::ALL
        .iter()
        .map(|m| m.name())
        .filter(|m| c.modes.contains_key(*m))
        .collect();
    let what = if c.shows_vra() {
        "VRA %"
    } else {
        "certified %"
    };
    let mut head = format!("       curve ({what})  {:>10}", "radius");
    for m in &modes {
        let _ = write!(head, "  {m:>14}");
    }
    let _ = writeln!(out, "{head}");
    let series: Vec<Vec<f64>> = modes.iter().map(|m| c.series(m)).collect();
    for (k, eps) in c.radii().iter().enumerate() {
        let mut row = format!(
            "       {:>width$}  {:>10}",
            "",
            printable(eps),
            width = what.len() + 8
        );
        for s in &series {
            let _ = write!(
                row,
                "  {:>14}",
                s.get(k).map_or("n/a".into(), |v| format!("{v:.2}"))
            );
        }
        let _ = writeln!(out, "{row}");
    }
    let mut median = format!(
        "       {:>width$}  {:>10}",
        "median radius",
        "",
        width = what.len() + 8
    );
    for m in &modes {
        let v = c.radius_quantiles.get(*m).map_or(0.0, |q| q.p50);
        let _ = write!(median, "  {v:>14.6}");
    }
    let _ = writeln!(out, "{median}");
}

/// A note and the gates that carry it.
struct GateNote<'a> {
    text: &'a str,
    gates: Vec<&'a str>,
}

/// Every distinct note of the report with the gates carrying it, in the order they first
/// appear.
fn distinct_notes(report: &Report) -> Vec<GateNote<'_>> {
    let mut notes: Vec<GateNote> = Vec::new();
    for g in &report.gates {
        for n in &g.notes {
            match notes.iter_mut().find(|s| s.text == n.as_str()) {
                Some(s) if s.gates.last() != Some(&g.name.as_str()) => s.gates.push(&g.name),
                Some(_) => {}
                None => notes.push(GateNote {
                    text: n,
                    gates: vec![&g.name],
                }),
            }
        }
    }
    notes
}

/// The longest a note is shown on the console without `-v`, in characters.
const NOTE_CHARS: usize = 96;

/// `text` cut at a word boundary to at most [`NOTE_CHARS`] characters, with `…` when cut.
fn shortened(text: &str) -> String {
    if text.chars().count() <= NOTE_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(NOTE_CHARS).collect();
    let cut = head.rfind(' ').unwrap_or(head.len());
    format!("{}…", head[..cut].trim_end_matches([',', ';', ':', ' ']))
}

/// The notes section: each distinct note once, shortened, after the gates carrying it.
fn notes_section(out: &mut String, report: &Report) {
    let notes = distinct_notes(report);
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "notes (each once, shortened; -v prints every note in full under its gate):"
    );
    for n in notes {
        let which = match n.gates.len() {
            k if k == report.gates.len() && k > 1 => "every gate".to_string(),
            1 => printable(n.gates[0]),
            k => format!("{k} gates"),
        };
        let _ = writeln!(out, "  {which}: {}", printable(&shortened(n.text)));
    }
}

/// The console summary of a report: a block per gate, then each distinct note once (shortened,
/// naming the gates that carry it; with `verbose`, every note in full under every gate
/// instead, and the time split), then the tally.
pub fn render(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    for g in &report.gates {
        gate_block(&mut out, g, verbose);
    }
    if !verbose {
        notes_section(&mut out, report);
    }
    if report.policy.is_some() {
        let _ = writeln!(out, "{}", report.tally().line());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_word() {
        assert_eq!(shortened("short note"), "short note");
        let long = format!("{} tail", "word ".repeat(30));
        let cut = shortened(&long);
        assert!(
            cut.ends_with("word…") && cut.chars().count() <= NOTE_CHARS + 1,
            "{cut}"
        );
        assert_eq!(shortened(&"é".repeat(200)).chars().count(), NOTE_CHARS + 1);
    }

    #[test]
    fn user_text_cannot_start_a_line() {
        assert_eq!(
            diagnostic("p.toml: bad\n  ::error::x\n1 | a\r::b"),
            "p.toml: bad\nlipfp:   ::error::x\n1 | a\\r::b"
        );
    }
}
