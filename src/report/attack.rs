//! The bracket every reporter states from the falsifier's figures ([`AttackReport`]):
//! `certified VRA <= robust accuracy <= upper`, the upper bound being the points neither
//! misclassified nor falsified.

use crate::report::GateReport;

pub use crate::gate::attack::AttackReport;

/// The bracket of a gate with falsifier figures, in plain text:
/// `standard VRA 95.17% <= robust accuracy <= 97.80% (falsifier: 123 of 290 attacked points
/// falsified, 1.234s)`; without labels only the falsified count.
pub fn bracket_line(g: &GateReport) -> Option<String> {
    let a = g.attack.as_ref()?;
    let tail = format!(
        "falsifier: {} of {} attacked points falsified, {:.3}s",
        a.falsified, a.attacked, a.seconds
    );
    let vra = g.modes.get(a.mode.name()).and_then(|m| m.vra_pct);
    Some(match (vra, a.robust_upper_pct) {
        (Some(v), Some(u)) => {
            format!(
                "certified VRA ({}) {v:.2}% <= robust accuracy <= {u:.2}% ({tail})",
                a.mode
            )
        }
        _ => format!("{tail}; no labels: no bound on robust accuracy"),
    })
}

/// The step summary's line for a gate with falsifier figures (`md` escapes user text).
pub fn summary_section(g: &GateReport, md: impl Fn(&str) -> String) -> Option<String> {
    let line = bracket_line(g)?;
    Some(format!(
        "\n**{}** robustness bracket: {}\n",
        md(&g.name),
        line.replace("<=", "≤")
    ))
}
