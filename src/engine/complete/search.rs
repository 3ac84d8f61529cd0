//! Branch and bound itself: one search over a set ([`SearchSet`]) for an objective ([`Objective`])
//! under a budget ([`Budget`]), bounding children in fixed batches ([`search_once`]; `stages` runs it).

use std::sync::Arc;
use std::time::Instant;

use ndarray::Array2;
use rayon::prelude::*;

use super::bounding::{bound_group, Bounded};
use super::branch;
use super::domain::{Branch, Queue, Subdomain};
use super::refinement::{Recompute, RefinementRule};
use super::stages::RootBranching;
use crate::arith::format::Format;
use crate::arith::sound::{add_down, add_up, l2_norm_up};
use crate::bounds::local::{HiddenBounds, SlopeSearch, Splits, UnitBranching};
use crate::engine::run::{box_norm_up, with_bounded_net, BoundedNet, Subject};

/// Subdomains bounded together (a fixed number: the batches, hence the result, do not depend on
/// the thread count).
const BATCH: usize = 16;
/// Of a batch, subdomains whose slope searches run as one (every layer one product for all of
/// them, [`bound_group`]); the groups of a batch are bounded in parallel. A fixed number, like
/// [`BATCH`]: a subdomain's bounds depend on its group, never on the thread count.
const GROUP: usize = 4;
/// Inputs up to this many are split by coordinate; more, by ReLU.
pub const INPUT_SPLIT_MAX_DIM: usize = 16;
/// Steps of the search for lower slopes and split multipliers at the root.
const ROOT_SLOPE_STEPS: usize = 20;
/// The same in every other subdomain (where the split multipliers first appear), from its
/// parent's slopes and multipliers, on a network with at most [`branch::SPLIT_LAYERS`] hidden
/// layers: there a subdomain computes at most one layer again, and the search is most of its
/// cost (on mnistfc's 256x2 the l_inf gate run of docs/performance.md took 1.5 times as long
/// with 10 steps, for the same decisions).
const SHALLOW_CHILD_SLOPE_STEPS: usize = 5;
/// The same on deeper networks (not [`shallow`]) split by ReLU, where computing the layers above
/// a split again is most of a subdomain's cost. On mnistfc (docs/performance.md "Session 21")
/// 10 steps left the hardest open bound higher than 5 after the same number of subdomains in
/// about the same time (256x6 `prop_13_0.03` after 2,000: -2.10 against -2.17; 256x4
/// `prop_3_0.03` after 8,000: -0.39 against -0.43), and after 60 s on all six open instances
/// tried; 2 and 20 steps did worse.
const DEEP_CHILD_SLOPE_STEPS: usize = 10;
/// The same in a search that splits inputs ([`Plan::by_input`]; ACAS Xu's 50-unit layers, where
/// the search is a larger share of a subdomain's cost than on mnistfc's 256-unit ones). On ACAS
/// Xu `4_2 prop_2` (docs/performance.md "Session 25") 5 steps decided in 58.4 s (106,701
/// subdomains) what 10 decided in 72.6 s (101,919) and 3 in 57.8 s (118,903); 0 steps left it
/// open after 116 s.
const INPUT_CHILD_SLOPE_STEPS: usize = 5;

/// The unsafe region as rows of linear forms of the outputs: disjunct `d` is excluded over a
/// subdomain when some usable row `r` of it has `lower_r + offset_r > 0`.
#[derive(Clone, Debug)]
pub struct Objective {
    /// The rows `a` (one per constraint), over the outputs.
    pub c: Array2<f64>,
    /// Per row, a lower bound of the constant `c` (rounded down).
    pub offset: Vec<f64>,
    /// Per row, whether its float64 coefficients are exactly the constraint's (else it excludes
    /// nothing).
    pub usable: Vec<bool>,
    /// Per row, its disjunct.
    pub disjunct: Vec<usize>,
    /// Number of disjuncts.
    pub disjuncts: usize,
}

impl Objective {
    /// Per open disjunct (in `open`'s order), the largest sound lower bound of its rows'
    /// values, from `lower` computed for the rows of `rows` (`-inf` for a disjunct no usable row
    /// bounds).
    pub fn disjunct_bounds(&self, open: &[usize], rows: &[usize], lower: &[f64]) -> Vec<f64> {
        open.iter()
            .map(|&d| {
                (rows.iter().zip(lower))
                    .filter(|(r, _)| self.disjunct[**r] == d && self.usable[**r])
                    .map(|(r, v)| add_down(*v, self.offset[*r]))
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect()
    }

    /// The rows of the disjuncts in `open`.
    pub(super) fn rows_of(&self, open: &[usize]) -> Vec<usize> {
        (0..self.disjunct.len())
            .filter(|r| open.contains(&self.disjunct[*r]))
            .collect()
    }
}

/// Limits of one search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Wall-clock seconds (the search stops with `timeout` past them).
    pub seconds: f64,
    /// Subdomains bounded at most (then `unknown`; a budget in subdomains gives the same result
    /// on every machine).
    pub subdomains: usize,
    /// Bytes the queue may hold (then `unknown`).
    pub memory_bytes: usize,
    /// Whether ReLU-splitting subdomains compute their layers again above their split (not a
    /// limit: how the budget is spent).
    pub recompute: Recompute,
    /// When a ReLU-splitting search's root branches on its units (not a limit either).
    pub root_branching: RootBranching,
}

/// What a search came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision<C> {
    /// Every subdomain closed: no execution reaches the unsafe region.
    Holds,
    /// A counterexample the caller's check confirmed.
    Violated(C),
    /// Neither, with the reason (the subdomain or memory budget, or a subdomain that cannot be
    /// split further, or bounds that are not finite).
    Unknown(String),
    /// The time budget ran out first.
    Timeout,
}

/// A search's decision and what it did.
#[derive(Clone, Debug)]
pub struct CompleteOutcome<C> {
    /// The decision.
    pub decision: Decision<C>,
    /// Subdomains bounded (the root included).
    pub bounded: usize,
    /// Of those, shown infeasible.
    pub infeasible: usize,
    /// The most subdomains queued at once.
    pub peak_queue: usize,
    /// The deepest subdomain bounded.
    pub depth: usize,
    /// The gap of the hardest subdomain left open when the search stopped (how far its bounds
    /// were from closing every subdomain); `None` when none was left.
    pub hardest_open: Option<f64>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// The input set a search decides over.
#[derive(Clone, Copy, Debug)]
pub enum SearchSet<'a> {
    /// The box `[lo, hi]`: split by coordinate for low-dimensional inputs, else by ReLU.
    Box(&'a [f64], &'a [f64]),
    /// The l2 ball of radius `eps` around `x0`, inside the box `within` (the input range it
    /// is clipped to, or the ball's own bounding box): split by ReLU only.
    Ball {
        /// The centre.
        x0: &'a [f64],
        /// The radius (an upper bound).
        eps: f64,
        /// A box holding the set (candidates are clipped to it).
        within: (&'a [f64], &'a [f64]),
    },
}

impl SearchSet<'_> {
    /// An upper bound on the l2 norm of every input of the set.
    pub(super) fn norm_up(&self) -> f64 {
        match *self {
            SearchSet::Box(lo, hi) => box_norm_up(lo, hi),
            SearchSet::Ball { x0, eps, .. } => add_up(l2_norm_up(x0.iter().copied()), eps),
        }
    }

    /// A box holding the set.
    fn bounding_box(&self) -> (&[f64], &[f64]) {
        match *self {
            SearchSet::Box(lo, hi) => (lo, hi),
            SearchSet::Ball { within, .. } => within,
        }
    }
}

/// How subdomains are split.
pub(super) struct Plan<'a> {
    /// The ball every subdomain lies in (its centre and radius), for a ball's search.
    pub(super) ball: Option<(&'a [f64], f64)>,
    /// By input coordinate (low-dimensional inputs), else by ReLU.
    pub(super) by_input: bool,
    /// The root box's widths (no coordinate may lag far behind, [`branch::input_to_split`]).
    pub(super) root_width: Vec<f64>,
    /// Candidates a ReLU split is chosen among by estimating their children's bounds
    /// ([`relu_to_split`]; one: the best scored, without estimates).
    pub(super) candidates: usize,
    /// With ReLU splits, the root's hidden bounds: every subdomain reuses them up to its
    /// shallowest split's layer and computes the layers above again with its splits
    /// ([`crate::bounds::local::Known::Refine`]; every subdomain's set is the root's).
    pub(super) base: Option<HiddenBounds>,
}

/// One search from a root bounded with `branching` where given ([`super::stages::decide`] runs
/// one or two): whether some execution of the subject's deployed model on an input of the set
/// puts its outputs in the unsafe region `objective` describes, within `budget` counted from
/// `start`, the subdomains a search before it bounded (`before`) counted against the budget's;
/// `confirm` turns a candidate input into a counterexample when the model's execution confirms
/// it.
pub(super) fn search_once<C: Send>(
    subject: &Subject,
    (set, objective): (SearchSet<'_>, &Objective),
    (budget, start, before): (Budget, Instant, usize),
    branching: Option<UnitBranching>,
    confirm: &(dyn Fn(&[f64]) -> Option<C> + Sync),
) -> CompleteOutcome<C> {
    let by_input = by_input(subject, set);
    let steps = if by_input { 0 } else { ROOT_SLOPE_STEPS };
    let format = subject.net.format;
    let searched = with_bounded_net(subject, set.norm_up(), (steps, branching), |net| {
        search(
            (net, format),
            set,
            objective,
            (budget, before),
            confirm,
            start,
        )
    });
    searched.unwrap_or_else(|why| CompleteOutcome {
        decision: Decision::Unknown(why),
        bounded: before,
        infeasible: 0,
        peak_queue: 0,
        depth: 0,
        hardest_open: None,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Whether a search over `set` splits input coordinates (a box of at most
/// [`INPUT_SPLIT_MAX_DIM`] inputs) rather than ReLUs.
pub(super) fn by_input(subject: &Subject, set: SearchSet<'_>) -> bool {
    matches!(set, SearchSet::Box(..)) && subject.net.input_dim() <= INPUT_SPLIT_MAX_DIM
}

/// The search loop of [`search_once`], its count of subdomains bounded starting at `before`.
fn search<C: Send>(
    (net, format): (&BoundedNet<'_>, Format),
    set: SearchSet<'_>,
    objective: &Objective,
    (budget, before): (Budget, usize),
    confirm: &(dyn Fn(&[f64]) -> Option<C> + Sync),
    start: Instant,
) -> CompleteOutcome<C> {
    let (lo, hi) = set.bounding_box();
    let mut out = CompleteOutcome {
        decision: Decision::Holds,
        bounded: before,
        infeasible: 0,
        peak_queue: 0,
        depth: 0,
        hardest_open: None,
        seconds: 0.0,
    };
    let ball = match set {
        SearchSet::Ball { x0, eps, .. } => Some((x0, eps)),
        SearchSet::Box(..) => None,
    };
    let mut plan = Plan {
        ball,
        by_input: ball.is_none() && net.net.input_dim() <= INPUT_SPLIT_MAX_DIM,
        root_width: lo.iter().zip(hi).map(|(l, h)| h - l).collect(),
        candidates: if shallow(net) {
            branch::LOOKAHEAD_CANDIDATES
        } else {
            1
        },
        base: None,
    };
    let root = Subdomain {
        lo: Arc::new(lo.to_vec()),
        hi: Arc::new(hi.to_vec()),
        splits: Splits::none(),
        open: (0..objective.disjuncts).collect(),
        depth: 0,
        gap: f64::NEG_INFINITY,
        branch: Branch::Exhausted,
        id: 0,
        warm: None,
        inherited: None,
        newest: None,
    };
    let root_search = SlopeSearch {
        iterations: ROOT_SLOPE_STEPS,
        target: f64::INFINITY,
    };
    let child_search = SlopeSearch {
        iterations: child_slope_steps(shallow(net), plan.by_input),
        target: f64::INFINITY,
    };
    let mut queue = Queue::default();
    let root_group = vec![(root, true)];
    let mut batch = bound_group(
        (net, format),
        objective,
        root_group,
        Some(root_search),
        &plan,
        confirm,
    );
    let mut first = batch.pop().expect("a group of one bounds one subdomain");
    if !plan.by_input {
        plan.base = first.hidden.take();
    }
    // the root's bounds and slopes, which every subdomain of a ReLU-splitting search is
    // computed with, count against the cap with the queue
    let root_bytes = plan.base.as_ref().map_or(0, HiddenBounds::bytes);
    batch.push(first);
    let (mut next_id, mut stuck) = (0u64, false);
    let mut rule = RefinementRule::new(budget.recompute);
    loop {
        for b in batch {
            rule.record(b.refined);
            out.bounded += 1;
            out.depth = out.depth.max(b.domain.depth);
            out.infeasible += usize::from(b.infeasible);
            if let Some(cx) = b.found {
                out.decision = Decision::Violated(cx);
                return finish(out, &queue, start);
            }
            if !b.closed {
                queue.push(b.domain);
            }
        }
        if !queue.is_empty() && queue.bytes().saturating_add(root_bytes) > budget.memory_bytes {
            let why = format!(
                "the subdomain queue and the root's bounds reached the memory cap of {} bytes",
                budget.memory_bytes
            );
            out.decision = Decision::Unknown(why);
            return finish(out, &queue, start);
        }
        if queue.is_empty() {
            if stuck {
                out.decision = Decision::Unknown("a subdomain could be split no further".into());
            }
            return finish(out, &queue, start);
        }
        if start.elapsed().as_secs_f64() > budget.seconds {
            out.decision = Decision::Timeout;
            return finish(out, &queue, start);
        }
        if out.bounded >= budget.subdomains {
            out.decision = Decision::Unknown(format!("{} subdomains bounded", out.bounded));
            return finish(out, &queue, start);
        }
        let parents = queue.pop_hardest(BATCH / 2);
        let mut children = Vec::with_capacity(2 * parents.len());
        for p in &parents {
            let c = p.children(&mut next_id);
            stuck |= c.is_empty();
            children.extend(c);
        }
        let mut chosen = (children.into_iter())
            .map(|d| {
                let refine = rule.refine(d.id);
                (d, refine)
            })
            .peekable();
        let mut groups: Vec<Vec<(Subdomain, bool)>> = Vec::new();
        while chosen.peek().is_some() {
            groups.push(chosen.by_ref().take(GROUP).collect());
        }
        let bounded: Vec<Vec<Bounded<C>>> = (groups.into_par_iter())
            .map(|group| {
                let at = (net, format);
                bound_group(at, objective, group, Some(child_search), &plan, confirm)
            })
            .collect();
        batch = bounded.into_iter().flatten().collect();
    }
}

/// The outcome with the queue's peak and the time.
fn finish<C>(mut out: CompleteOutcome<C>, queue: &Queue, start: Instant) -> CompleteOutcome<C> {
    out.peak_queue = queue.peak();
    out.hardest_open = queue.hardest_gap();
    out.seconds = start.elapsed().as_secs_f64();
    out
}

/// Whether the network has at most [`branch::SPLIT_LAYERS`] hidden layers (the split window's
/// depth). On deeper networks a split's effect is mostly what computing the
/// layers above it again achieves (B10), which a child's estimated bound does not see: there
/// the lookahead of [`relu_to_split`] was mixed on mnistfc 256x4 and 256x6, where on 256x2 it
/// halved the search's remaining gap (docs/performance.md "Session 22").
fn shallow(net: &BoundedNet<'_>) -> bool {
    net.net.hidden_layers() <= branch::SPLIT_LAYERS
}

/// Steps of a subdomain's slope search below the root: [`INPUT_CHILD_SLOPE_STEPS`] when the
/// search splits inputs, else [`SHALLOW_CHILD_SLOPE_STEPS`] or [`DEEP_CHILD_SLOPE_STEPS`] by the
/// network's depth.
fn child_slope_steps(shallow: bool, by_input: bool) -> usize {
    match (by_input, shallow) {
        (true, _) => INPUT_CHILD_SLOPE_STEPS,
        (false, true) => SHALLOW_CHILD_SLOPE_STEPS,
        (false, false) => DEEP_CHILD_SLOPE_STEPS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::complete::excluded;

    /// A disjunct's bound is its best usable row's lower bound plus the row's constant (rounded
    /// down); a row whose coefficients are not exact excludes nothing, however high its bound.
    #[test]
    fn a_disjunct_is_bounded_by_its_best_usable_row() {
        let o = Objective {
            c: Array2::zeros((3, 2)),
            offset: vec![1.0, 0.0, -0.5],
            usable: vec![true, false, true],
            disjunct: vec![0, 0, 1],
            disjuncts: 2,
        };
        assert_eq!(o.rows_of(&[0, 1]), vec![0, 1, 2]);
        assert_eq!(o.rows_of(&[1]), vec![2]);
        // the sum rounds down (at most one step below the exact -1 and -0.25 here)
        let b = o.disjunct_bounds(&[0, 1], &[0, 1, 2], &[-2.0, 5.0, 0.25]);
        assert_eq!(b, vec![add_down(-2.0, 1.0), add_down(0.25, -0.5)]);
        assert!(b[0] <= -1.0 && b[0] >= (-1.0f64).next_down());
        assert!(b[1] <= -0.25 && b[1] >= (-0.25f64).next_down());
        let b = o.disjunct_bounds(&[0, 1], &[0, 1, 2], &[-0.5, 5.0, 0.75]);
        assert!(b[0] <= 0.5 && b[0] >= 0.5f64.next_down() && excluded(b[0]));
        assert!(b[1] <= 0.25 && b[1] >= 0.25f64.next_down() && excluded(b[1]));
        assert!(excluded(0.5) && !excluded(0.0) && !excluded(f64::NAN));
        // the constant is added rounding down: never above the float64 sum
        let tiny = Objective {
            offset: vec![1e-300, 0.0, 0.0],
            ..o
        };
        let b = tiny.disjunct_bounds(&[0], &[0], &[1.0]);
        assert!(b[0] < 1.0 + 1e-300 && b[0] >= 1.0f64.next_down());
        // a disjunct without a usable row is not bounded
        assert_eq!(
            tiny.disjunct_bounds(&[0], &[1], &[9.0]),
            vec![f64::NEG_INFINITY]
        );
    }

    /// An input-splitting search takes its own steps on every depth; a ReLU-splitting one, its
    /// depth's.
    #[test]
    fn a_subdomains_slope_steps_follow_what_it_splits_and_the_depth() {
        assert_eq!(child_slope_steps(false, true), 5);
        assert_eq!(child_slope_steps(true, true), 5);
        assert_eq!(child_slope_steps(true, false), 5);
        assert_eq!(child_slope_steps(false, false), 10);
    }
}
