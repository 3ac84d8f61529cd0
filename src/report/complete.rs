//! The line every reporter states of mode `complete`'s figures ([`CompleteReport`]).

pub use crate::gate::complete::{BudgetReport, CompleteReport, SearchFigures};

impl CompleteReport {
    /// The line every reporter states: `complete: 180 verified, 12 falsified, 3 undecided
    /// (branch and bound: 15 points searched, 9 verified, 3 falsified, 2345 subdomains, 12.3s)`.
    pub fn line(&self) -> String {
        let b = &self.branch_and_bound;
        let late = if b.not_reached > 0 {
            format!(", {} left by the total budget", b.not_reached)
        } else {
            String::new()
        };
        format!(
            "complete: {} verified, {} falsified, {} undecided (branch and bound: {} points \
             searched, {} verified, {} falsified, {} subdomains, {:.1}s{late})",
            self.verified,
            self.falsified,
            self.undecided,
            b.searched,
            b.verified,
            b.falsified,
            b.subdomains,
            b.seconds
        )
    }
}
