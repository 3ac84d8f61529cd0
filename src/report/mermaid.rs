//! The robustness curve of a gate in the step summary: a Mermaid `xychart-beta` chart, which
//! GitHub renders, with the baseline's curve beside the current one when the baseline report has
//! one over the same radii, and the quantiles of the certified radii.

use std::fmt::Write;

use crate::bounds::certify::Mode;
use crate::gate::curve::CurveReport;
use crate::report::GateReport;

/// Line colours, in the order the lines are drawn (Mermaid's `plotColorPalette`).
const COLOURS: [&str; 12] = [
    "#969696", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#c7c7c7", "#aec7e8",
    "#ffbb78", "#98df8a", "#c5b0d5", "#ff9896",
];

/// Colour names for the legend line, matching [`COLOURS`].
const COLOUR_NAMES: [&str; 12] = [
    "grey",
    "blue",
    "orange",
    "green",
    "purple",
    "red",
    "light grey",
    "light blue",
    "light orange",
    "light green",
    "light purple",
    "light red",
];

/// Text safe inside a Mermaid quoted string: quotes, backslashes and control characters out.
fn quoted(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' | '\\' | '`' => '\'',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// The modes of `c` in report order.
fn modes_of(c: &CurveReport) -> Vec<&'static str> {
    Mode::ALL
        .iter()
        .map(|m| m.name())
        .filter(|m| c.modes.contains_key(*m))
        .collect()
}

/// A series as Mermaid numbers.
fn numbers(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The chart and quantile table of gate `g`, when it has a curve.
pub fn curve_section(g: &GateReport, escape: impl Fn(&str) -> String) -> Option<String> {
    let c = g.curve.as_ref()?;
    let radii = c.radii();
    let baseline = g.baseline_curve.as_ref().filter(|b| b.radii() == radii);
    let what = if c.shows_vra() {
        "VRA %"
    } else {
        "certified %"
    };
    let mut lines: Vec<(String, Vec<f64>)> = modes_of(c)
        .into_iter()
        .map(|m| (m.to_string(), c.series(m)))
        .collect();
    if let Some(b) = baseline {
        lines.extend(
            modes_of(b)
                .into_iter()
                .map(|m| (format!("{m} (baseline)"), b.series(m))),
        );
    }
    lines.truncate(COLOURS.len());
    let mut out = format!("\n### Robustness curve: {}\n\n", escape(&g.name));
    let palette = COLOURS[..lines.len()].join(", ");
    let _ = writeln!(
        out,
        "```mermaid\n%%{{init: {{\"themeVariables\": {{\"xyChart\": {{\"plotColorPalette\": \"{palette}\"}}}}}}}}%%\nxychart-beta"
    );
    let _ = writeln!(out, "    title \"{}: {what} by radius\"", quoted(&g.name));
    let cats: Vec<String> = radii.iter().map(|r| format!("\"{}\"", quoted(r))).collect();
    let _ = writeln!(out, "    x-axis \"radius\" [{}]", cats.join(", "));
    let _ = writeln!(out, "    y-axis \"{what}\" 0 --> 100");
    for (_, v) in &lines {
        let _ = writeln!(out, "    line [{}]", numbers(v));
    }
    out.push_str("```\n\n");
    let legend: Vec<String> = lines
        .iter()
        .zip(COLOUR_NAMES)
        .map(|((name, _), colour)| format!("{colour}: {name}"))
        .collect();
    let _ = writeln!(
        out,
        "_Lines_ — {}. `real` is the unsound real-arithmetic ceiling.{}\n",
        legend.join("; "),
        if g.baseline_curve.is_some() && baseline.is_none() {
            " The baseline's curve has other radii and is not drawn."
        } else {
            ""
        }
    );
    out.push_str("| mode | radius p10 | p25 | median | p75 | p90 |\n|---|---|---|---|---|---|\n");
    for m in modes_of(c) {
        if let Some(q) = c.radius_quantiles.get(m) {
            let _ = writeln!(
                out,
                "| {m} | {} | {} | {} | {} | {} |",
                q.p10, q.p25, q.p50, q.p75, q.p90
            );
        }
    }
    Some(out)
}
