//! Mode `complete`'s figures of a gate: in JSON `"complete": {"verified": N, "falsified": N,
//! "undecided": N, "branch_and_bound": {...}, "budget": {...}}`.

use serde::Serialize;

use crate::bounds::certify::Refusal;
use crate::engine::complete::points::PointDecisions;
use crate::engine::run::ModeOutcome;
use crate::policy::CompleteBudget;

/// A gate's complete decisions over all its points.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompleteReport {
    /// Points certified (by `best`, local bounds or branch and bound).
    pub verified: usize,
    /// Points with a confirmed counterexample (the falsifier's or branch and bound's).
    pub falsified: usize,
    /// Points searched and left undecided by the budget.
    pub undecided: usize,
    /// What branch and bound did.
    pub branch_and_bound: SearchFigures,
    /// The budget it ran under.
    pub budget: BudgetReport,
}

/// Branch and bound's share of the decisions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchFigures {
    /// Points searched (left by `best` and the falsifier).
    pub searched: usize,
    /// Of those, verified.
    pub verified: usize,
    /// Of those, falsified.
    pub falsified: usize,
    /// Points the total budget left unsearched (counted as undecided).
    pub not_reached: usize,
    /// Subdomains bounded over all searches.
    pub subdomains: usize,
    /// Wall seconds.
    pub seconds: f64,
}

/// [`CompleteBudget`] as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetReport {
    /// Seconds per point.
    pub seconds: f64,
    /// Seconds for all points (null: no limit).
    pub total_s: Option<f64>,
    /// Subdomains per point.
    pub subdomains: usize,
    /// MiB one search's queue may hold.
    pub memory_mib: usize,
}

impl From<&PointDecisions> for SearchFigures {
    fn from(d: &PointDecisions) -> Self {
        SearchFigures {
            searched: d.searched,
            verified: d.verified,
            falsified: d.falsified,
            not_reached: d.not_reached,
            subdomains: d.subdomains,
            seconds: d.seconds,
        }
    }
}

impl From<&CompleteBudget> for BudgetReport {
    fn from(budget: &CompleteBudget) -> Self {
        BudgetReport {
            seconds: budget.seconds,
            total_s: budget.total_s,
            subdomains: budget.subdomains,
            memory_mib: budget.memory_bytes >> 20,
        }
    }
}

impl CompleteReport {
    /// The report of `mode` (mode `complete`'s settled outcome) and of branch and bound's
    /// `search` that settled it under `budget`.
    pub fn new(mode: &ModeOutcome, search: SearchFigures, budget: BudgetReport) -> Self {
        let count = |r: Refusal| mode.refusal_of.iter().filter(|w| **w == Some(r)).count();
        CompleteReport {
            verified: mode.certified,
            falsified: count(Refusal::Falsified),
            undecided: count(Refusal::Undecided),
            branch_and_bound: search,
            budget,
        }
    }
}
