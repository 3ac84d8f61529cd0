//! The step summary's section on a gate's per-point regression against a certificate baseline:
//! the VRA before and now with Wilson intervals, the points lost and gained (per class, and the
//! first lost indices), and McNemar's p-value; and the lost points as `.npy` files
//! (`--regressions`).

use std::fmt::Write;

use std::path::{Path, PathBuf};

use crate::files::{npy_bytes, Artifact};
use crate::gate::regression::{Regression, SHOWN_INDICES};
use crate::report::GateReport;

/// The section of gate `g`, when it was compared point by point with a baseline.
pub fn regression_section(g: &GateReport, escape: impl Fn(&str) -> String) -> Option<String> {
    let r = g.regression.as_ref()?;
    let mut out = format!(
        "\n### Against the baseline: {} ({} mode)\n\n{}\n\n",
        escape(&g.name),
        g.mode,
        escape(&r.line())
    );
    let classes: Vec<String> = (0..r.lost_by_class.len().max(r.gained_by_class.len()))
        .filter_map(|c| {
            let lost = r.lost_by_class.get(c).copied().unwrap_or(0);
            let gained = r.gained_by_class.get(c).copied().unwrap_or(0);
            (lost + gained > 0).then(|| format!("| {c} | {lost} | {gained} |"))
        })
        .collect();
    if !classes.is_empty() {
        out.push_str("| class | lost | gained |\n|---|---|---|\n");
        for line in &classes {
            let _ = writeln!(out, "{line}");
        }
    }
    if !r.lost.is_empty() {
        let shown: Vec<String> = r
            .lost
            .iter()
            .take(SHOWN_INDICES)
            .map(usize::to_string)
            .collect();
        let more = r.lost.len().saturating_sub(SHOWN_INDICES);
        let _ = writeln!(
            out,
            "\nLost (test-set indices): {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more (JSON report, `--regressions`)")
            } else {
                String::new()
            }
        );
    }
    Some(out)
}

/// The lost points of every gate with a regression as `.npy` files of `u64` test-set indices:
/// at `path` for one such gate, else at `<stem>-<gate key>.npy` beside it per gate.
pub fn artifacts(gates: &[GateReport], path: &Path) -> Vec<Artifact> {
    let with: Vec<(&GateReport, &Regression)> = gates
        .iter()
        .filter_map(|g| g.regression.as_ref().map(|r| (g, r)))
        .collect();
    let target = |g: &GateReport| -> PathBuf {
        if with.len() == 1 {
            return path.to_path_buf();
        }
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let key = crate::report::github::output_key(&g.name);
        path.with_file_name(format!("{stem}-{key}.npy"))
    };
    with.iter()
        .map(|(g, r)| {
            let lost: Vec<u64> = r.lost.iter().map(|&i| i as u64).collect();
            let bytes = npy_bytes(&[lost.len() as u64], &lost);
            Artifact::new(&target(g), bytes, "regressions file")
        })
        .collect()
}
