//! The stages of a ReLU-splitting search: first from the plain root, then, if that did not
//! decide, from a root that bounds each unstable unit by a branch and bound of its own
//! ([`UnitBranching`], docs/soundness.md B12). A branched root costs 10 to 50 s on mnistfc's
//! 256x4 and 256x6 networks and decides there what no search from the plain root decided in
//! 300 s; the plain root decides most properties in a second or two (docs/performance.md
//! "Session 27"). Either stage is sound; the stages only spend the budget.

use std::time::{Duration, Instant};

use super::search::{
    by_input, search_once, Budget, CompleteOutcome, Decision, Objective, SearchSet,
};
use crate::bounds::local::UnitBranching;
use crate::engine::run::Subject;

/// Subdomains a root bounds per unstable hidden unit and side when it branches on its units.
pub const ROOT_UNIT_LEAVES: usize = 100;
/// The share of a time budget the root's branching on its units may take; past it, the bounds
/// it found so far are kept.
pub const ROOT_UNIT_SHARE: f64 = 0.25;
/// The share of a budget (time and subdomains) the first stage spends from the plain root.
pub const PLAIN_SHARE: f64 = 0.1;

/// When a ReLU-splitting search's root branches on its units (all three sound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootBranching {
    /// After [`PLAIN_SHARE`] of the budget from the plain root left the question open.
    #[default]
    Staged,
    /// From the start.
    Always,
    /// Never.
    Never,
}

impl RootBranching {
    /// Reads `staged`, `always` or `never` (`lipfp verify --root-branching`).
    pub fn parse(text: &str) -> Result<RootBranching, String> {
        match text {
            "staged" => Ok(RootBranching::Staged),
            "always" => Ok(RootBranching::Always),
            "never" => Ok(RootBranching::Never),
            other => Err(format!(
                "`{other}` is not a root-branching setting: use \"staged\", \"always\" or \"never\""
            )),
        }
    }
}

/// Decides whether some execution of the subject's deployed model on an input of the set puts
/// its outputs in the unsafe region `objective` describes, within `budget`; `confirm` turns a
/// candidate input into a counterexample when the model's execution confirms it. A search that
/// splits inputs runs once; one that splits ReLUs as `budget.root_branching` says, its second
/// stage with what the first left of the budget (none when the first spent the time or the
/// subdomains).
pub fn decide<C: Send>(
    subject: &Subject,
    set: SearchSet<'_>,
    objective: &Objective,
    budget: Budget,
    confirm: &(dyn Fn(&[f64]) -> Option<C> + Sync),
) -> CompleteOutcome<C> {
    let start = Instant::now();
    let run = |budget: Budget, branching: Option<UnitBranching>, before: usize| {
        let at = (budget, start, before);
        search_once(subject, (set, objective), at, branching, confirm)
    };
    let branching = || UnitBranching {
        leaves: ROOT_UNIT_LEAVES,
        deadline: deadline(start, budget.seconds),
    };
    match budget.root_branching {
        _ if by_input(subject, set) => run(budget, None, 0),
        RootBranching::Never => run(budget, None, 0),
        RootBranching::Always => run(budget, Some(branching()), 0),
        RootBranching::Staged => {
            let plain = run(share(budget, PLAIN_SHARE), None, 0);
            let decided = matches!(plain.decision, Decision::Holds | Decision::Violated(_));
            let spent = start.elapsed().as_secs_f64() >= budget.seconds;
            if decided || spent || plain.bounded >= budget.subdomains {
                return plain;
            }
            // the second search counts the first's subdomains against the budget
            let branched = run(budget, Some(branching()), plain.bounded);
            CompleteOutcome {
                infeasible: plain.infeasible + branched.infeasible,
                peak_queue: plain.peak_queue.max(branched.peak_queue),
                depth: plain.depth.max(branched.depth),
                ..branched
            }
        }
    }
}

/// When a root's branching on its units stops: [`ROOT_UNIT_SHARE`] of the time budget from now,
/// and never past the budget itself (`start` plus `seconds`); none without a finite budget.
fn deadline(start: Instant, seconds: f64) -> Option<Instant> {
    let after = |s: f64, from: Instant| {
        (Duration::try_from_secs_f64(s).ok()).and_then(|d| from.checked_add(d))
    };
    let share = after(seconds * ROOT_UNIT_SHARE, Instant::now())?;
    Some(after(seconds, start).map_or(share, |end| share.min(end)))
}

/// `part` of the budget's time and subdomains (at least one, at most all), the same memory cap
/// and settings.
fn share(budget: Budget, part: f64) -> Budget {
    // a float's `as` saturates: an unbounded count stays unbounded
    let subdomains = (budget.subdomains as f64 * part).ceil() as usize;
    Budget {
        seconds: budget.seconds * part,
        subdomains: subdomains.clamp(1, budget.subdomains.max(1)),
        ..budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::complete::Recompute;

    #[test]
    fn a_share_of_a_budget_keeps_one_subdomain_and_an_unbounded_count() {
        let budget = Budget {
            seconds: 300.0,
            subdomains: 2000,
            memory_bytes: 7,
            recompute: Recompute::Never,
            root_branching: RootBranching::Staged,
        };
        let part = share(budget, 0.1);
        assert_eq!(
            (part.seconds, part.subdomains, part.memory_bytes),
            (30.0, 200, 7)
        );
        assert_eq!(
            share(
                Budget {
                    subdomains: 3,
                    ..budget
                },
                0.1
            )
            .subdomains,
            1
        );
        assert_eq!(
            share(
                Budget {
                    subdomains: 0,
                    ..budget
                },
                0.1
            )
            .subdomains,
            1
        );
        let open = share(
            Budget {
                subdomains: usize::MAX,
                seconds: f64::INFINITY,
                ..budget
            },
            0.1,
        );
        assert!(open.subdomains > usize::MAX / 20 && open.seconds.is_infinite());
    }

    /// A quarter of the budget from now, never past the budget's end; none without a finite
    /// budget.
    #[test]
    fn the_branching_deadline_stays_within_the_budget() {
        let start = Instant::now();
        let d = deadline(start, 100.0).expect("a finite budget has a deadline");
        assert!(d <= start + Duration::from_secs(100));
        assert!(
            d >= start + Duration::from_secs(25) && d <= Instant::now() + Duration::from_secs(25)
        );
        let late = start
            .checked_sub(Duration::from_secs(90))
            .expect("a past instant");
        assert_eq!(deadline(late, 100.0), Some(late + Duration::from_secs(100)));
        assert_eq!(deadline(start, f64::INFINITY), None);
        assert_eq!(deadline(start, f64::NAN), None);
    }

    #[test]
    fn root_branching_reads_its_three_settings() {
        assert_eq!(RootBranching::parse("staged"), Ok(RootBranching::Staged));
        assert_eq!(RootBranching::parse("always"), Ok(RootBranching::Always));
        assert_eq!(RootBranching::parse("never"), Ok(RootBranching::Never));
        assert!(RootBranching::parse("sometimes")
            .unwrap_err()
            .contains("staged"));
    }
}
