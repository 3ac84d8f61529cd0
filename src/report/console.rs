//! Console summary on stdout.
//!
//! Every line starts with fixed text (a verdict word, indentation and a label, or the counts):
//! user-controlled text (gate names, paths, notes) is made [`printable`] first, so it can never
//! start a line of its own — on GitHub Actions a line starting with `::` is a workflow command.

use std::fmt::Write;

use crate::bounds::certify::Mode;
use crate::gate::curve::CurveReport;
use crate::progress::printable;
use crate::report::{fmt_pct, fmt_ratio, GateReport, GateStatus, Report};

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

/// `gate_block` prints `g`'s notes except those in `shared` (said once, at the end).
fn gate_block(out: &mut String, g: &GateReport, shared: &[SharedNote]) {
    let own = || (g.notes.iter()).filter(|n| !shared.iter().any(|s| s.text == **n));
    let verdict = match g.status {
        GateStatus::Pass => "PASS",
        GateStatus::Warn => "WARN",
        GateStatus::Fail => "FAIL",
        GateStatus::Report => "REPORT",
        GateStatus::Error => "ERROR",
    };
    let _ = writeln!(
        out,
        "{verdict:<6} {}  {}",
        printable(&g.name),
        gate_facts(g)
    );
    if let Some(e) = &g.error {
        let _ = writeln!(out, "       error: {}", printable(e));
    }
    if g.modes.is_empty() {
        for n in own() {
            let _ = writeln!(out, "       note: {}", printable(n));
        }
        return;
    }
    let _ = writeln!(out, "       accuracy {}", fmt_pct(g.accuracy_pct, "n/a"));
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
        let ratio = match (m.conservatism_ratio, m.sound) {
            (Some(r), _) => format!("  fp degradation {} x L eps", fmt_ratio(r)),
            (None, true) => "  fp degradation n/a".to_string(),
            (None, false) => String::new(),
        };
        let _ = writeln!(
            out,
            "       {label:<36} certified {:>6} ({:>7})  VRA {:>8}{ratio}",
            m.certified,
            format!("{:.2}%", m.certified_pct),
            fmt_pct(m.vra_pct, "n/a")
        );
    }
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
    for n in own() {
        let _ = writeln!(out, "       note: {}", printable(n));
    }
    let _ = writeln!(
        out,
        "       time: norms {:.3}s, certify {:.3}s",
        g.timing.norms_s, g.timing.certify_s
    );
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

/// A note that several gates carry, and which.
struct SharedNote<'a> {
    text: &'a str,
    gates: Vec<&'a str>,
}

/// The notes more than one gate carries, in the order they first appear.
fn shared_notes(report: &Report) -> Vec<SharedNote<'_>> {
    let mut notes: Vec<SharedNote> = Vec::new();
    for g in &report.gates {
        for n in &g.notes {
            match notes.iter_mut().find(|s| s.text == n.as_str()) {
                Some(s) if s.gates.last() != Some(&g.name.as_str()) => s.gates.push(&g.name),
                Some(_) => {}
                None => notes.push(SharedNote {
                    text: n,
                    gates: vec![&g.name],
                }),
            }
        }
    }
    notes.retain(|s| s.gates.len() > 1);
    notes
}

/// The console summary of a report: a block per gate, then the notes several gates share
/// (once each, under a line naming the gates that share them; with `verbose`, every note under
/// every gate instead), then the tally.
pub fn render(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    let shared = if verbose {
        Vec::new()
    } else {
        shared_notes(report)
    };
    for g in &report.gates {
        gate_block(&mut out, g, &shared);
    }
    let mut groups: Vec<(&[&str], Vec<&str>)> = Vec::new();
    for s in &shared {
        match groups
            .iter_mut()
            .find(|(gates, _)| *gates == s.gates.as_slice())
        {
            Some((_, texts)) => texts.push(s.text),
            None => groups.push((&s.gates, vec![s.text])),
        }
    }
    for (gates, texts) in groups {
        let which = if gates.len() == report.gates.len() {
            format!("every gate ({})", gates.len())
        } else {
            let names: Vec<String> = gates.iter().map(|n| printable(n)).collect();
            format!("gates {}", names.join(", "))
        };
        let _ = writeln!(out, "notes for {which}:");
        for t in texts {
            let _ = writeln!(out, "       note: {}", printable(t));
        }
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
    fn user_text_cannot_start_a_line() {
        assert_eq!(
            diagnostic("p.toml: bad\n  ::error::x\n1 | a\r::b"),
            "p.toml: bad\nlipfp:   ::error::x\n1 | a\\r::b"
        );
    }
}
