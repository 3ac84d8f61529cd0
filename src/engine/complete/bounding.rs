//! The bounding step of branch and bound: a group of subdomains bounded together (their
//! slope searches one batch, [`LocalNet::split_lower_bounds_many`]), each then closed where its
//! bounds exclude every disjunct, or given its branch and its candidate point checked.
//!
//! [`LocalNet::split_lower_bounds_many`]: crate::bounds::local::LocalNet::split_lower_bounds_many

use std::sync::Arc;

use ndarray::{Array2, Axis};

use super::branch;
use super::domain::{Branch, Subdomain};
use super::search::{Objective, Plan, SearchSet};
use crate::arith::format::Format;
use crate::bounds::local::{
    group_rank, HiddenBounds, InputSet, Multipliers, Refined, RowGroups, SlopeSearch, SplitBounds,
    SplitJob, SplitOutcome,
};
use crate::engine::run::BoundedNet;

/// A bounded subdomain: open again (with its gap and branch), closed, or infeasible; with the
/// caller's verdict on its candidate point.
pub(super) struct Bounded<C> {
    pub(super) domain: Subdomain,
    pub(super) closed: bool,
    pub(super) infeasible: bool,
    pub(super) found: Option<C>,
    /// The hidden bounds it rested on (kept at the root only).
    pub(super) hidden: Option<HiddenBounds>,
    /// What computing its layers again above its split did.
    pub(super) refined: Refined,
}

/// Bounds every subdomain of `group` (each `(d, refine)`: its box first shrunk to the values of
/// the deployment `format`, its layers above its split computed again where `refine` says so),
/// their slope searches one batch; closes the disjuncts each one's bounds exclude, chooses its
/// branch, and checks its candidate point. The results are in the group's order.
pub(super) fn bound_group<C>(
    (net, format): (&BoundedNet<'_>, Format),
    objective: &Objective,
    group: Vec<(Subdomain, bool)>,
    search: Option<SlopeSearch>,
    plan: &Plan,
    confirm: &(dyn Fn(&[f64]) -> Option<C> + Sync),
) -> Vec<Bounded<C>> {
    let mut out: Vec<Option<Bounded<C>>> = (0..group.len()).map(|_| None).collect();
    let mut ready = Vec::with_capacity(group.len());
    for (k, (d, refine)) in group.into_iter().enumerate() {
        match Ready::new(format, objective, d, plan) {
            Ok(r) => ready.push((k, r, refine)),
            Err(d) => out[k] = Some(closed(*d, true)),
        }
    }
    let jobs: Vec<SplitJob<'_>> = (ready.iter())
        .map(|(_, r, refine)| SplitJob {
            set: r.set(plan),
            c: &r.c,
            lip_slack: &net.slack,
            splits: &r.d.splits,
            search,
            warm: r.warm.as_ref().map(|(at, m)| (&at[..], m)),
            groups: Some(RowGroups {
                group: &r.group,
                offset: &r.offset,
            }),
            known: r.d.known(plan.base.as_ref(), *refine),
        })
        .collect();
    let outcomes = net.net.split_lower_bounds_many(&jobs);
    drop(jobs);
    for ((k, r, _), outcome) in ready.into_iter().zip(outcomes) {
        out[k] = Some(settle(net, objective, r, outcome, plan, confirm));
    }
    out.into_iter().flatten().collect()
}

/// A subdomain ready for its bounds: its box on the deployment's grid, the rows of its open
/// disjuncts (`c`, with each one's disjunct and offset, an unusable row's `-inf`), and its
/// parent's multipliers for those of them its parent searched (with their rows of `c`).
struct Ready {
    d: Subdomain,
    rows: Vec<usize>,
    c: Array2<f64>,
    group: Vec<usize>,
    offset: Vec<f64>,
    warm: Option<(Vec<usize>, Multipliers)>,
}

impl Ready {
    /// `d` ready, or back when its box holds no value of `format` (then it is infeasible).
    fn new(
        format: Format,
        objective: &Objective,
        mut d: Subdomain,
        plan: &Plan,
    ) -> Result<Ready, Box<Subdomain>> {
        match branch::onto_grid(format, &d.lo, &d.hi).filter(|_| plan.ball.is_none()) {
            None if plan.ball.is_none() => return Err(Box::new(d)),
            None => {}
            Some((lo, hi)) => {
                if *lo != *d.lo {
                    d.lo = Arc::new(lo);
                }
                if *hi != *d.hi {
                    d.hi = Arc::new(hi);
                }
            }
        }
        let rows = objective.rows_of(&d.open);
        let c = objective.c.select(Axis(0), &rows);
        let warm = d.warm.as_ref().map(|w| {
            // of the parent's rows, those still open, with their rows of `c`
            let (at, of): (Vec<usize>, Vec<usize>) = (w.0.iter().enumerate())
                .filter_map(|(k, r)| Some((rows.iter().position(|o| o == r)?, k)))
                .unzip();
            (at, w.1.select_rows(&of))
        });
        let group = rows.iter().map(|&r| objective.disjunct[r]).collect();
        let offset = (rows.iter())
            .map(|&r| match objective.usable[r] {
                true => objective.offset[r],
                false => f64::NEG_INFINITY,
            })
            .collect();
        Ok(Ready {
            d,
            rows,
            c,
            group,
            offset,
            warm,
        })
    }

    /// The input set its bounds are over.
    fn set<'a>(&'a self, plan: &Plan<'a>) -> InputSet<'a> {
        input_set((&self.d.lo, &self.d.hi), plan)
    }
}

/// The input set of a subdomain's bounds: the search's ball, or its box `[lo, hi]`.
fn input_set<'a>((lo, hi): (&'a [f64], &'a [f64]), plan: &Plan<'a>) -> InputSet<'a> {
    match plan.ball {
        Some((x0, eps)) => InputSet::Ball { x0, eps },
        None => InputSet::Box { lo, hi },
    }
}

/// A closed subdomain (shown infeasible, or every disjunct excluded).
fn closed<C>(domain: Subdomain, infeasible: bool) -> Bounded<C> {
    Bounded {
        domain,
        closed: true,
        infeasible,
        found: None,
        hidden: None,
        refined: Refined::default(),
    }
}

/// Subdomain `r` given its bounds `outcome`: closed, or open with its gap, branch and
/// candidate's verdict.
fn settle<C>(
    net: &BoundedNet<'_>,
    objective: &Objective,
    Ready {
        mut d,
        rows,
        offset,
        ..
    }: Ready,
    outcome: SplitOutcome,
    plan: &Plan,
    confirm: &(dyn Fn(&[f64]) -> Option<C> + Sync),
) -> Bounded<C> {
    let mut b = match outcome {
        SplitOutcome::Infeasible(_) => return closed(d, true),
        SplitOutcome::NotFinite => {
            // nothing known: split on (an input box always can be, until it is a point)
            d.branch = fallback_branch(&d, plan);
            return open(d, None);
        }
        SplitOutcome::Bounded(b) => *b,
    };
    let set = input_set((&d.lo, &d.hi), plan);
    let optimised = b.optimised.take();
    let r0 = match plan.ball {
        Some((x0, eps)) => SearchSet::Ball {
            x0,
            eps,
            within: (&d.lo, &d.hi),
        },
        None => SearchSet::Box(&d.lo, &d.hi),
    };
    let per = if net.overflow_excluded(&b.hidden, r0.norm_up()).is_ok() {
        objective.disjunct_bounds(&d.open, &rows, &b.lower)
    } else {
        // the bounds assume no overflow (B7): they exclude nothing here
        vec![f64::NEG_INFINITY; d.open.len()]
    };
    let keep: Vec<usize> = (d.open.iter().zip(&per))
        .filter(|(_, v)| !excluded(**v))
        .map(|(k, _)| *k)
        .collect();
    if keep.is_empty() {
        return Bounded {
            refined: b.hidden.refined,
            ..closed(d, false)
        };
    }
    // the row to improve: of the open disjunct furthest from excluded, the row nearest to
    // excluding it (a disjunct is excluded by any one of its rows)
    let target = (d.open.iter().zip(&per))
        .filter(|(_, v)| !excluded(**v))
        .min_by(|a, b2| a.1.total_cmp(b2.1))
        .map(|(k, _)| *k)
        .unwrap_or(0);
    d.gap = per
        .iter()
        .copied()
        .filter(|v| !excluded(*v))
        .fold(f64::INFINITY, f64::min);
    // ranked as the search ranks it (the row it searched, where it searched this disjunct)
    let worst = (0..rows.len())
        .filter(|&t| objective.disjunct[rows[t]] == target)
        .max_by(|&a, &b2| {
            let value = |t: usize| group_rank(b.lower[t], offset[t]);
            value(a).total_cmp(&value(b2)).then(b2.cmp(&a))
        })
        .unwrap_or(0);
    d.open = keep;
    let a = b.trace.input.row(worst);
    let candidate = match plan.ball {
        Some((x0, eps)) => branch::ball_minimiser(a, (x0, eps), (&d.lo, &d.hi)),
        None => branch::linear_minimiser(a, &d.lo, &d.hi),
    };
    // the searched multipliers of the row to improve, where it was searched
    let searched =
        (optimised.as_ref()).and_then(|(at, m)| Some((m, at.iter().position(|&t| t == worst)?)));
    let relu = (!plan.by_input)
        .then(|| relu_to_split(net, (&b, searched), (set, plan.candidates), worst))
        .flatten();
    d.branch = match relu {
        Some((l, j)) => Branch::Relu(l, j),
        None if plan.ball.is_some() => Branch::Exhausted,
        None => (branch::input_to_split(a, &d.lo, &d.hi, &plan.root_width))
            .map_or(Branch::Exhausted, Branch::Input),
    };
    d.warm = optimised.and_then(|(at, m)| {
        let stored = m.stored(b.hidden.relaxations(), &d.splits)?;
        Some(Arc::new((at.iter().map(|&t| rows[t]).collect(), stored)))
    });
    d.inherited = Some(Arc::new(b.hidden.kept()));
    let found = confirm(&candidate);
    Bounded {
        refined: b.hidden.refined,
        hidden: Some(b.hidden),
        ..open(d, found)
    }
}

/// The unit to split for row `row` of a subdomain's bounds `b` over `set`: of the `candidates`
/// best scored, the one whose children's estimated bounds gain most
/// ([`branch::split_by_gains`]).
fn relu_to_split(
    net: &BoundedNet<'_>,
    (b, optimised): (&SplitBounds, Option<(&Multipliers, usize)>),
    (set, candidates): (InputSet<'_>, usize),
    row: usize,
) -> Option<(usize, usize)> {
    let relax = b.hidden.relaxations();
    let candidates = branch::relu_candidates(relax, &b.trace.hidden, row, candidates);
    if candidates.len() <= 1 {
        return candidates.first().copied();
    }
    let gains = (net.net).split_gains(set, (&b.hidden, &b.trace, optimised), row, &candidates);
    branch::split_by_gains(&candidates, &gains)
}

/// Whether a disjunct's bound `v` excludes it: strictly above zero (NaN excludes nothing).
pub fn excluded(v: f64) -> bool {
    v > 0.0
}

/// An open subdomain.
fn open<C>(domain: Subdomain, found: Option<C>) -> Bounded<C> {
    Bounded {
        domain,
        closed: false,
        infeasible: false,
        found,
        hidden: None,
        refined: Refined::default(),
    }
}

/// The branch of a subdomain without finite bounds: halve its widest coordinate.
fn fallback_branch(d: &Subdomain, plan: &Plan) -> Branch {
    if plan.ball.is_some() {
        return Branch::Exhausted;
    }
    let none = ndarray::Array1::<f64>::zeros(d.lo.len());
    (branch::input_to_split(none.view(), &d.lo, &d.hi, &plan.root_width))
        .map_or(Branch::Exhausted, Branch::Input)
}
