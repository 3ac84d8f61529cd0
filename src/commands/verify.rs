//! `lipfp verify`: one VNN-LIB property of one model, or a benchmark's list of instances, decided
//! by [`crate::engine::verify`] and written in VNN-COMP's result format.
//!
//! Exit codes (docs/commands.md "lipfp verify"): 0 holds (`unsat`), 1 violated (`sat`), 2 error,
//! 3 unknown, 4 timeout; with `--instances`, 0 once every instance ran.

use std::fmt::Write as _;
use std::path::Path;

pub use crate::engine::verify::instance::{instance, VerifyRequest};
use crate::engine::verify::instance::{read_instances, InstanceResult};
use crate::engine::verify::{SearchSummary, Verdict, VerifyOutcome};
use crate::error::LipfpError;
use crate::files::{self, Artifact};
use crate::progress::Progress;

/// What branch and bound did, for the line printed per instance: `; branch and bound: N
/// subdomains (K infeasible), depth D, queue Q` summed over the boxes searched, the hardest
/// open subdomain's bound where one was left (`hardest open bound G`), and why it
/// decided nothing where it did not; empty when it did not run.
pub fn search_note(o: &VerifyOutcome) -> String {
    if o.searches.is_empty() {
        return String::new();
    }
    let sum = |f: fn(&SearchSummary) -> usize| o.searches.iter().map(f).sum::<usize>();
    let depth = o.searches.iter().map(|s| s.depth).max().unwrap_or(0);
    let peak = o.searches.iter().map(|s| s.peak_queue).max().unwrap_or(0);
    let open =
        (o.hardest_open()).map_or(String::new(), |g| format!(", hardest open bound {g:.4e}"));
    let why: Vec<&str> = o
        .searches
        .iter()
        .filter_map(|s| s.unknown.as_deref())
        .collect();
    format!(
        "; branch and bound: {} subdomains ({} infeasible), depth {depth}, queue {peak}{open}{}",
        sum(|s| s.bounded),
        sum(|s| s.infeasible),
        if why.is_empty() {
            String::new()
        } else {
            format!(", {}", why.join("; "))
        }
    )
}

/// VNN-COMP's result file: the verdict word, and for `sat` the counterexample
/// `((X_0 v) ... (Y_0 v) ...)` with every value written exactly (shortest round-trip decimal).
pub fn result_text(outcome: &VerifyOutcome) -> String {
    let mut out = format!("{}\n", outcome.verdict.word());
    if let Verdict::Violated(cx) = &outcome.verdict {
        out.push('(');
        for (i, v) in cx.input.iter().enumerate() {
            let _ = writeln!(out, "(X_{i} {v:e})");
        }
        for (j, v) in cx.outputs.iter().enumerate() {
            let _ = writeln!(out, "(Y_{j} {v:e})");
        }
        out.push_str(")\n");
    }
    out
}

/// Run every instance of `list` (`scale` times its timeouts), printing a line per instance;
/// returns the results and the table as CSV (`onnx,vnnlib,result,seconds`).
pub fn instances(
    req: &VerifyRequest,
    list: &Path,
    scale: f64,
    progress: &Progress,
) -> Result<(Vec<InstanceResult>, String), LipfpError> {
    let mut results = Vec::new();
    let mut csv = String::from("onnx,vnnlib,result,seconds\n");
    for (model_path, prop, timeout) in read_instances(list)? {
        let r = instance(req, (&model_path, &prop), timeout * scale, progress)?;
        let name = |p: &Path| {
            p.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        println!(
            "{:<36} {:<24} {:<8} {:>8.2} s  ({}/{} disjuncts excluded by bounds{})",
            name(&r.model),
            name(&r.property),
            r.outcome.verdict.word(),
            r.seconds,
            r.outcome.excluded,
            r.outcome.disjuncts,
            search_note(&r.outcome)
        );
        let _ = writeln!(
            csv,
            "{},{},{},{:.3}",
            name(&r.model),
            name(&r.property),
            r.outcome.verdict.word(),
            r.seconds
        );
        results.push(r);
    }
    Ok((results, csv))
}

/// Write `text` to `path` all-or-nothing.
pub fn write_result(path: &Path, text: String) -> Result<(), LipfpError> {
    files::stage(&[Artifact::new(path, text.into_bytes(), "result file")])?.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(bounded: usize, hardest_open: Option<f64>, unknown: Option<&str>) -> SearchSummary {
        SearchSummary {
            bounded,
            infeasible: 1,
            peak_queue: bounded / 2,
            depth: bounded / 10,
            hardest_open,
            seconds: 1.0,
            unknown: unknown.map(String::from),
        }
    }

    /// Summed over the boxes searched: subdomains and infeasible ones; the deepest and the
    /// largest queue; the lowest hardest open bound of the boxes that left one; every reason.
    #[test]
    fn the_search_note_sums_the_boxes_and_names_the_hardest_open_bound() {
        let outcome = |searches| VerifyOutcome {
            verdict: Verdict::Timeout,
            excluded: 0,
            searches,
            disjuncts: 9,
            bounds_note: None,
        };
        assert_eq!(search_note(&outcome(vec![])), "");
        let two = vec![
            summary(30, Some(-0.5), None),
            summary(100, Some(-1.25), Some("100 subdomains bounded")),
            summary(20, None, None),
        ];
        assert_eq!(
            search_note(&outcome(two)),
            "; branch and bound: 150 subdomains (3 infeasible), depth 10, queue 50, \
             hardest open bound -1.2500e0, 100 subdomains bounded"
        );
        let closed = vec![summary(40, None, None)];
        assert_eq!(
            search_note(&outcome(closed)),
            "; branch and bound: 40 subdomains (1 infeasible), depth 4, queue 20"
        );
    }
}
