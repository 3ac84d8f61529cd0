//! Mode `complete` in certificate files: the budget and branch and bound's figures written per
//! file ([`CompleteSearch`]) and merged over a run's shards (the budget one, the figures
//! summed; the points' decisions are the instances' own refusals).

use std::path::Path;

use crate::engine::run::ModeOutcome;
use crate::proto_gen::{CompleteSearch, GateCertificates};
use crate::report::complete::{BudgetReport, CompleteReport, SearchFigures};

/// A gate's complete figures as a file records them.
pub(super) fn to_proto(c: &CompleteReport) -> CompleteSearch {
    let (s, b) = (&c.branch_and_bound, &c.budget);
    CompleteSearch {
        budget_s: b.seconds,
        total_s: b.total_s,
        budget_subdomains: b.subdomains as u64,
        memory_mib: b.memory_mib as u64,
        searched: s.searched as u64,
        verified: s.verified as u64,
        falsified: s.falsified as u64,
        not_reached: s.not_reached as u64,
        subdomains: s.subdomains as u64,
        seconds: s.seconds,
    }
}

/// Whether two shards ran under the same complete budget (or both without the mode's figures).
pub(super) fn same_budget(a: &GateCertificates, b: &GateCertificates) -> bool {
    match (&a.complete, &b.complete) {
        (None, None) => true,
        (Some(x), Some(y)) => budget(x) == budget(y),
        _ => false,
    }
}

/// The budget a file records.
fn budget(c: &CompleteSearch) -> BudgetReport {
    BudgetReport {
        seconds: c.budget_s,
        total_s: c.total_s,
        subdomains: usize::try_from(c.budget_subdomains).unwrap_or(usize::MAX),
        memory_mib: usize::try_from(c.memory_mib).unwrap_or(usize::MAX),
    }
}

/// The merged report of mode `complete` (its reassembled outcome `mode`) from the shards'
/// figures, summed (saturating: they are the files' claims, shown as such, never gated on);
/// `None` where the mode or a shard's figures are missing.
pub(super) fn merged(
    parts: &[(&Path, &GateCertificates)],
    mode: Option<&ModeOutcome>,
) -> Option<CompleteReport> {
    let mode = mode?;
    let all: Vec<&CompleteSearch> = (parts.iter())
        .map(|(_, g)| g.complete.as_ref())
        .collect::<Option<_>>()?;
    let sum = |f: fn(&CompleteSearch) -> u64| -> usize {
        let total = all.iter().fold(0u64, |acc, c| acc.saturating_add(f(c)));
        usize::try_from(total).unwrap_or(usize::MAX)
    };
    let search = SearchFigures {
        searched: sum(|c| c.searched),
        verified: sum(|c| c.verified),
        falsified: sum(|c| c.falsified),
        not_reached: sum(|c| c.not_reached),
        subdomains: sum(|c| c.subdomains),
        seconds: all.iter().map(|c| c.seconds).sum(),
    };
    Some(CompleteReport::new(mode, search, budget(all.first()?)))
}
