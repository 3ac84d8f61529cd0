//! GitHub Actions reporters: the job summary (`$GITHUB_STEP_SUMMARY`), error annotations
//! (workflow commands on stdout) and step outputs (`$GITHUB_OUTPUT`).
//!
//! Pure renderers over [`Report`]; the caller decides when to use them (`GITHUB_ACTIONS=true`)
//! and where to write ([`append`]). The one derived figure is the floating-point cost (real
//! certified rate minus the gated mode's certified rate, in percentage points).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::bounds::certify::Mode;
use crate::gate::verdict::ThresholdCheck;
use crate::policy::thresholds::Unit;
use crate::report::{GateReport, GateStatus, Report};

/// GitHub rejects a job summary above 1 MiB; stay clearly below it.
pub const SUMMARY_LIMIT_BYTES: usize = 1_000_000;

/// GitHub shows at most 10 error annotations per step.
pub const MAX_ANNOTATIONS: usize = 10;

/// The longest text put into one table cell (bytes, cut at a character boundary).
const MAX_CELL_BYTES: usize = 2_000;

/// Remove control characters (tab, newline and carriage return become spaces).
fn one_line(s: &str) -> String {
    s.chars()
        .filter_map(|c| match c {
            '\t' | '\n' | '\r' => Some(' '),
            c if c.is_control() || c == '\u{FFFE}' || c == '\u{FFFF}' => None,
            c => Some(c),
        })
        .collect()
}

/// Cut `s` to at most `max` bytes at a character boundary, marking the cut with `…`.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Text safe inside a Markdown table cell or list item: one line, HTML special characters as
/// entities, Markdown punctuation and `|` backslash-escaped.
pub(super) fn md(s: &str) -> String {
    let mut out = String::new();
    for c in truncate(&one_line(s), MAX_CELL_BYTES).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' | '\\' | '`' | '*' | '_' | '[' | ']' | '~' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A percentage cell: `fmt_pct`, `n/a` when there is none.
pub(super) fn pct(x: Option<f64>) -> String {
    super::figure_text::fmt_pct(x, "n/a")
}

/// The icon of a run's heading: ❌ when a gate failed or errored, ⚠️ when one warned, else ✅.
pub(super) fn heading_icon(tally: &super::Tally) -> &'static str {
    if tally.failed + tally.errored > 0 {
        "❌"
    } else if tally.warned > 0 {
        "⚠️"
    } else {
        "✅"
    }
}

pub(super) fn result_cell(status: GateStatus) -> &'static str {
    match status {
        GateStatus::Pass => "✅ pass",
        GateStatus::Warn => "⚠️ warn",
        GateStatus::Fail => "❌ fail",
        GateStatus::Report => "➖ report",
        GateStatus::Error => "⛔ error",
    }
}

/// One threshold in a table cell: `min_certified_pct ≥ 50: 80.67% (+30.67 pp) ✅` (⚠️ for a
/// warn-level threshold not met), or "not evaluated" with the reason.
fn threshold_cell(c: &ThresholdCheck) -> String {
    let (op, unit) = (c.def.symbol(), c.def.unit_suffix());
    let limit = format!("{} {op} {}", md(c.key), c.limit);
    let icon = |ok: bool| match (ok, c.key.starts_with("warn_")) {
        (true, _) => "✅",
        (false, true) => "⚠️",
        (false, false) => "❌",
    };
    if let (true, Some(v), Some(ok)) = (c.def.unit == Unit::Significance, c.value, c.passed) {
        let p = crate::gate::verdict::p_text(v);
        return format!("{} ≥ {}: McNemar p = {p} {}", md(c.key), c.limit, icon(ok));
    }
    match (c.value, c.margin_pp, c.passed) {
        (Some(v), Some(m), Some(ok)) => format!("{limit}: {v:.2}{unit} ({m:+.2} pp) {}", icon(ok)),
        _ => format!(
            "{limit}: not evaluated ({})",
            md(c.skipped.as_deref().unwrap_or("no figure"))
        ),
    }
}

/// The thresholds cell of a gate: every threshold with its margin, else the failures, else —.
pub(super) fn thresholds_cell(g: &GateReport) -> String {
    if !g.thresholds.is_empty() {
        g.thresholds
            .iter()
            .map(threshold_cell)
            .collect::<Vec<_>>()
            .join("<br>")
    } else if !g.failures.is_empty() {
        g.failures
            .iter()
            .map(|f| md(f))
            .collect::<Vec<_>>()
            .join("<br>")
    } else {
        "—".to_string()
    }
}

/// One table row of a gate.
fn row(g: &GateReport) -> String {
    let m = g.modes.get(g.mode.name());
    let format = match g.format {
        Some(f) => format!("{f}{}", if g.ftz { " +ftz" } else { "" }),
        None => "—".into(),
    };
    let eps = match (&g.epsilon, &g.epsilons) {
        (Some(e), _) => md(e),
        (None, Some(p)) => format!("per-instance ({})", md(p)),
        (None, None) => "—".into(),
    } + &g.ball_suffix();
    let certified = m
        .map(|m| format!("{:.2}% ({})", m.certified_pct, m.certified))
        .unwrap_or_else(|| "n/a".into());
    let vra = pct(m.and_then(|m| m.vra_pct));
    let real = g
        .modes
        .get(Mode::Real.name())
        .map(|r| format!("{:.2}% (unsound)", r.certified_pct))
        .unwrap_or_else(|| "n/a".into());
    let cost = g
        .fp_cost_pp
        .map(|c| format!("{c:.2} pp"))
        .unwrap_or_else(|| "n/a".into());
    let result = match &g.error {
        Some(e) => format!("{}: {}", result_cell(g.status), md(e)),
        None => result_cell(g.status).to_string(),
    };
    format!(
        "| {} | {} | {format} | {eps} | {} | {certified} | {vra} | {real} | {cost} | {} | {result} |\n",
        md(&g.name),
        g.mode,
        pct(g.accuracy_pct),
        thresholds_cell(g)
    )
}

/// The job summary in Markdown: a heading with the counts, one table row per gate (gate, mode,
/// format and `+ftz`, eps, accuracy, certified, VRA, the real ceiling labelled unsound, the
/// floating-point cost in percentage points, every threshold with the figure and the margin to
/// it — or "—" — and ✅ pass / ❌ fail / ➖ report / ⛔ error with the error), then the notes.
///
/// The text stays below [`SUMMARY_LIMIT_BYTES`]: rows and notes that do not fit are left out,
/// with a final line saying how many.
pub fn step_summary(report: &Report) -> String {
    let tally = report.tally();
    let title = summary_title(report.policy.as_deref());
    let mut out = format!(
        "## {} {title}\n\n{} — lipfp {}\n\n",
        heading_icon(&tally),
        tally.line(),
        md(&report.lipfp_version)
    );
    out.push_str(
        "| gate | mode | format | eps | accuracy | certified | VRA | real ceiling (unsound) \
         | fp cost | thresholds (margin) | result |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");

    // Room kept for the closing lines (omission notice, legend).
    let budget = SUMMARY_LIMIT_BYTES - 1_000;
    let mut omitted_rows = 0;
    for g in &report.gates {
        let r = row(g);
        if omitted_rows == 0 && out.len() + r.len() <= budget {
            out.push_str(&r);
        } else {
            omitted_rows += 1;
        }
    }
    out.push_str(
        "\n_real ceiling_: the classical real-arithmetic certificate, **unsound** for \
         floating-point execution; _fp cost_: real certified minus the gated mode's certified \
         rate.\n",
    );

    for g in &report.gates {
        let sections = [
            super::mermaid::curve_section(g, md),
            super::classes::class_section(g, md),
            super::regressions::regression_section(g, md),
            super::attack::summary_section(g, md),
            (g.complete.as_ref()).map(|c| format!("\n**{}** {}\n", md(&g.name), c.line())),
        ];
        for section in sections.into_iter().flatten() {
            if out.len() + section.len() <= budget {
                out.push_str(&section);
            }
        }
    }

    let notes: Vec<String> = report
        .gates
        .iter()
        .flat_map(|g| {
            g.notes
                .iter()
                .map(move |n| format!("- **{}**: {}\n", md(&g.name), md(n)))
        })
        .collect();
    let mut omitted_notes = 0;
    if !notes.is_empty() && omitted_rows == 0 {
        out.push_str("\n### Notes\n\n");
        for n in &notes {
            if omitted_notes == 0 && out.len() + n.len() <= budget {
                out.push_str(n);
            } else {
                omitted_notes += 1;
            }
        }
    } else {
        omitted_notes = notes.len();
    }
    if omitted_rows > 0 || omitted_notes > 0 {
        let _ = writeln!(
            out,
            "\n_{omitted_rows} gate rows and {omitted_notes} notes omitted: the job summary is \
             limited to 1 MiB; see the JUnit or JSON report for every gate._"
        );
    }
    out
}

/// The summary heading's title: `lipfp check: <policy>` or `lipfp certify`.
pub(super) fn summary_title(policy: Option<&str>) -> String {
    policy
        .map(|p| format!("lipfp check: {}", md(p)))
        .unwrap_or_else(|| "lipfp certify".into())
}

/// The job summary of a run that stopped on an error outside every gate (exit 2): the heading
/// and the error.
pub fn error_summary(policy: Option<&str>, message: &str) -> String {
    format!(
        "## ⛔ {}\n\n**error**: {}\n\nNo gate was evaluated.\n",
        summary_title(policy),
        md(message)
    )
}

/// The `::error` annotation of a run that stopped on an error outside every gate: on the
/// policy file when there is one.
pub fn error_annotation(policy_file: Option<&str>, message: &str) -> String {
    let mut props = Vec::new();
    if let Some(p) = policy_file.filter(|p| !p.is_empty()) {
        props.push(format!("file={}", escape_property(p)));
    }
    props.push(format!("title={}", escape_property("lipfp error")));
    format!("::error {}::{}", props.join(","), escape_data(message))
}

/// Escape workflow-command data (the message): `%`, `\r`, `\n`.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escape a workflow-command property value (`file`, `title`): as [`escape_data`], plus `:`
/// and `,`.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// The annotation text of a failing, errored or warned gate: its title and message.
fn annotation_text(g: &GateReport) -> (String, String) {
    let eps = g.radius_text();
    let format = match g.format {
        Some(f) => format!("{f}{}, ", if g.ftz { " ftz" } else { "" }),
        None => String::new(),
    };
    let facts = format!("({format}eps {eps}, mode {})", g.mode);
    if let Some(e) = &g.error {
        return (
            format!("lipfp gate {} errored", g.name),
            format!("{e} {facts}"),
        );
    }
    if g.status == GateStatus::Warn {
        return (
            format!("lipfp gate {} warned", g.name),
            format!("{} {facts}", g.warnings.join("; ")),
        );
    }
    let verdict = if g.failures.is_empty() {
        "gate failed its thresholds".to_string()
    } else {
        g.failures.join("; ")
    };
    (
        format!("lipfp gate {} failed", g.name),
        format!("{verdict} {facts}"),
    )
}

/// One workflow command for `g` at `level` (`error` or `warning`): `::<level>
/// file=<policy>,line=<policy_line>,title=<title>::<message>`.
fn annotation(g: &GateReport, level: &str, policy_file: &str) -> String {
    let mut props = Vec::new();
    if !policy_file.is_empty() {
        props.push(format!("file={}", escape_property(policy_file)));
    }
    if let Some(line) = g.policy_line {
        props.push(format!("line={line}"));
    }
    let (title, message) = annotation_text(g);
    props.push(format!("title={}", escape_property(&title)));
    format!("::{level} {}::{}", props.join(","), escape_data(&message))
}

/// The workflow commands of a run, at most [`MAX_ANNOTATIONS`] per level (GitHub shows no more
/// per step): one `::error` per failing or errored gate (an errored gate's message is its
/// error) and one `::warning` per gate that met its thresholds but a warn-level one, in gate
/// order. Gates beyond the limit are folded into one summarising `::warning::` per kind (the
/// warned gates give up a slot for them). `line=` is omitted for a gate without a policy line,
/// and `file=` when `policy_file` is empty. Messages and properties are escaped per the
/// workflow-command rules.
pub fn annotations(report: &Report, policy_file: &str) -> Vec<String> {
    let of = |pick: fn(GateStatus) -> bool| -> Vec<&GateReport> {
        report.gates.iter().filter(|g| pick(g.status)).collect()
    };
    let flagged = of(|s| matches!(s, GateStatus::Fail | GateStatus::Error));
    let warned = of(|s| s == GateStatus::Warn);
    let mut out: Vec<String> = (flagged.iter().take(MAX_ANNOTATIONS))
        .map(|g| annotation(g, "error", policy_file))
        .collect();
    let mut notices = Vec::new();
    if flagged.len() > MAX_ANNOTATIONS {
        notices.push(format!(
            "::warning::{} more gates failed or errored (not annotated: GitHub shows at most {} \
             errors per step); see the job summary",
            flagged.len() - MAX_ANNOTATIONS,
            MAX_ANNOTATIONS
        ));
    }
    let mut room = MAX_ANNOTATIONS - notices.len();
    if warned.len() > room {
        room -= 1;
        notices.push(format!(
            "::warning::{} more gates warned (not annotated: GitHub shows at most {} warnings \
             per step); see the job summary",
            warned.len() - room,
            MAX_ANNOTATIONS
        ));
    }
    out.extend((warned.iter().take(room)).map(|g| annotation(g, "warning", policy_file)));
    out.extend(notices);
    out
}

/// The output key of a gate: every character outside `[A-Za-z0-9_]` replaced by `_`.
pub fn output_key(gate_name: &str) -> String {
    gate_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One `$GITHUB_OUTPUT` entry: `key=value`, or, should `value` ever hold a line break, the
/// multi-line form `key<<DELIMITER`, the value, `DELIMITER`, with a random delimiter that does
/// not occur in the value (so no value can add an output of its own).
fn output_entry(out: &mut String, key: &str, value: &str) {
    if !value.contains(['\n', '\r']) {
        let _ = writeln!(out, "{key}={value}");
        return;
    }
    let delimiter = loop {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let d = format!("ghadelimiter_{random:016x}");
        if !value.contains(&d) {
            break d;
        }
    };
    let _ = writeln!(out, "{key}<<{delimiter}\n{value}\n{delimiter}");
}

/// Lines for `$GITHUB_OUTPUT`: `passed=true|false` (false when any gate failed or errored),
/// then per gate `<key>_vra_pct=`, `<key>_certified_pct=` (the gated mode's rates),
/// `<key>_passed=` (`true`, `false`, or empty for a gate without thresholds or an errored
/// gate) and `<key>_status=` (`pass`, `warn`, `fail`, `report` or `error`), with `<key>` from
/// [`output_key`]; last `gates=`, one line of JSON holding all of them by gate name (see
/// `gates_json`). An unavailable rate (VRA without labels, an errored gate) is empty. When
/// two gate names map to the same key, the later one gets `_2`, `_3`, … appended. Every value
/// is a single line (a value with a line break would use the `key<<delimiter` form with a
/// random delimiter).
pub fn outputs(report: &Report) -> String {
    let t = report.tally();
    let mut out = String::new();
    output_entry(&mut out, "passed", &(t.failed + t.errored == 0).to_string());
    let mut used = BTreeSet::new();
    let mut keys = Vec::with_capacity(report.gates.len());
    for g in &report.gates {
        let base = output_key(&g.name);
        let mut key = base.clone();
        let mut k = 2;
        while !used.insert(key.clone()) {
            key = format!("{base}_{k}");
            k += 1;
        }
        let m = g.modes.get(g.mode.name());
        let num = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
        output_entry(
            &mut out,
            &format!("{key}_vra_pct"),
            &num(m.and_then(|m| m.vra_pct)),
        );
        output_entry(
            &mut out,
            &format!("{key}_certified_pct"),
            &num(m.map(|m| m.certified_pct)),
        );
        output_entry(
            &mut out,
            &format!("{key}_passed"),
            &g.passed.map(|p| p.to_string()).unwrap_or_default(),
        );
        output_entry(&mut out, &format!("{key}_status"), g.status.name());
        keys.push(key);
    }
    output_entry(&mut out, "gates", &gates_json(report, &keys));
    out
}

/// The `gates` output: a JSON object on one line, keyed by gate name, each value holding the
/// gate's output key and its `vra_pct`, `certified_pct` (numbers or null), `passed` (true,
/// false or null), `status` and `error` (null unless errored).
fn gates_json(report: &Report, keys: &[String]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = report
        .gates
        .iter()
        .zip(keys)
        .map(|(g, key)| {
            let m = g.modes.get(g.mode.name());
            (
                g.name.clone(),
                serde_json::json!({
                    "key": key,
                    "vra_pct": m.and_then(|m| m.vra_pct),
                    "certified_pct": m.map(|m| m.certified_pct),
                    "passed": g.passed,
                    "status": g.status.name(),
                    "error": g.error,
                }),
            )
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// `$GITHUB_OUTPUT` lines of a run that stopped on an error outside every gate: `passed=false`,
/// `gates={}` and `error=` the message.
pub fn error_outputs(message: &str) -> String {
    let mut out = String::new();
    output_entry(&mut out, "passed", "false");
    output_entry(&mut out, "gates", "{}");
    output_entry(&mut out, "error", message);
    out
}

/// Append `text` to the file at `path` (creating it), as for `$GITHUB_STEP_SUMMARY` and
/// `$GITHUB_OUTPUT`; a newline is added when `text` does not end with one. The data is synced
/// so that a full disk is reported here.
pub fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut buf = text.to_string();
    if !buf.is_empty() && !buf.ends_with('\n') {
        buf.push('\n');
    }
    f.write_all(buf.as_bytes())?;
    f.flush()?;
    if f.metadata()?.is_file() {
        f.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_workflow_command_rules() {
        assert_eq!(escape_data("50% a\r\nb: c, d"), "50%25 a%0D%0Ab: c, d");
        assert_eq!(escape_property("a:b,c%\n"), "a%3Ab%2Cc%25%0A");
    }

    #[test]
    fn output_values_cannot_add_outputs() {
        let mut out = String::new();
        output_entry(&mut out, "k", "1.5");
        assert_eq!(out, "k=1.5\n");
        out.clear();
        output_entry(&mut out, "k", "a\npassed=true");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        let delimiter = lines[0].strip_prefix("k<<").unwrap();
        assert!(delimiter.starts_with("ghadelimiter_"), "{out}");
        assert_eq!(&lines[1..], ["a", "passed=true", delimiter]);
    }

    #[test]
    fn keys_are_sanitised() {
        assert_eq!(output_key("digits-float32.v2 é"), "digits_float32_v2__");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "é".repeat(10);
        let t = truncate(&s, 7);
        assert!(t.len() <= 7 && t.ends_with('…'));
    }

    #[test]
    fn markdown_cells_are_escaped() {
        assert_eq!(md("a|b<c>\nd_e"), "a\\|b&lt;c&gt; d\\_e");
    }
}
