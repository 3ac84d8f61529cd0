//! The pull-request comment (`--pr-comment PATH`): a compact Markdown body for one comment that
//! a workflow posts and updates in place (the marker line finds it), with each gate's verdict,
//! gated figure and thresholds (margins, and the drops against the baseline where gated). It
//! never exceeds [`PR_COMMENT_LIMIT_BYTES`]: rows that do not fit are counted in a last line.

use std::fmt::Write as _;

use super::github::{heading_icon, md, pct, result_cell, summary_title, thresholds_cell};
use super::{GateReport, Report};

/// GitHub limits a comment to 65,536 characters; stay below 64 KiB in bytes.
pub const PR_COMMENT_LIMIT_BYTES: usize = 64 * 1024;

/// The first line of every body, for an in-place update.
pub const MARKER: &str = "<!-- lipfp-pr-comment -->";

/// One gate's row: gate, mode, eps, the gated mode's certified rate and VRA, thresholds, result.
fn row(g: &GateReport) -> String {
    let m = g.modes.get(g.mode.name());
    let eps = match (&g.epsilon, &g.epsilons) {
        (Some(e), _) => md(e),
        (None, Some(_)) => "per-instance".into(),
        (None, None) => "—".into(),
    };
    let result = match &g.error {
        Some(e) => format!("{} {}", result_cell(g.status), md(e)),
        None => result_cell(g.status).to_string(),
    };
    format!(
        "| {} | {} | {eps} | {} | {} | {} | {result} |\n",
        md(&g.name),
        g.mode,
        pct(m.map(|m| m.certified_pct)),
        pct(m.and_then(|m| m.vra_pct)),
        thresholds_cell(g),
    )
}

/// The comment body.
pub fn render(report: &Report) -> String {
    let tally = report.tally();
    let mut out = format!(
        "{MARKER}\n### {} {}\n\n{} — lipfp {}\n\n\
         | gate | mode | eps | certified | VRA | thresholds (margin) | result |\n\
         |---|---|---|---|---|---|---|\n",
        heading_icon(&tally),
        summary_title(report.policy.as_deref()),
        tally.line(),
        md(&report.lipfp_version)
    );
    // room for the closing line
    let budget = PR_COMMENT_LIMIT_BYTES - 512;
    let mut omitted = 0;
    for g in &report.gates {
        let r = row(g);
        if omitted == 0 && out.len() + r.len() <= budget {
            out.push_str(&r);
        } else {
            omitted += 1;
        }
    }
    if omitted > 0 {
        let _ = writeln!(
            out,
            "\n_{omitted} more gates not shown (a comment is limited to 64 KiB): see the job \
             summary or the JSON report._"
        );
    }
    out
}

/// The body for a run that stopped on an error outside every gate: the marker, the error, and
/// no verdict that could read as a pass.
pub fn render_error(policy: Option<&str>, message: &str) -> String {
    let mut text = md(message);
    if text.len() > PR_COMMENT_LIMIT_BYTES / 2 {
        let mut cut = PR_COMMENT_LIMIT_BYTES / 2;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(" …");
    }
    format!(
        "{MARKER}\n### ⛔ {}\n\nlipfp stopped on an error; no gate was judged:\n\n> {text}\n",
        summary_title(policy)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_marked_bounded_and_no_pass() {
        let long = "x".repeat(200_000);
        let body = render_error(Some("lipfp.toml"), &long);
        assert!(body.starts_with(MARKER));
        assert!(body.len() < PR_COMMENT_LIMIT_BYTES);
        assert!(body.contains("⛔") && !body.contains("✅"));
    }
}
