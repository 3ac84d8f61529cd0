//! One VNN-LIB property decided ([`verify`]): the bounds, the falsifier and branch and bound as
//! the folder's documentation describes.

use std::time::Instant;

use ndarray::Array2;
use rug::Rational;

use super::falsifier::Falsifier;
use crate::arith::format::Format;
use crate::arith::sound::{rational_to_f64_down, rational_to_f64_up};
use crate::bounds::ball::conversion_end;
use crate::engine::complete::{
    self, Budget, Decision, Objective, Recompute, RootBranching, SearchSet,
};
use crate::engine::run::{box_lower_bounds, Subject};
use crate::policy::vnnlib::{InputBox, OutputConstraint, Property};

/// Starts per disjunct for inputs of at most [`complete::INPUT_SPLIT_MAX_DIM`] coordinates
/// (cheap, and where random starts find what a descent from the centre misses): the centre,
/// then random points of the box.
const STARTS: usize = 50;
/// Starts per disjunct that run whatever the time and the input's size; the others only within
/// [`FALSIFIER_SHARE`] of the budget.
const SURE_STARTS: usize = 6;
/// The share of the budget the falsifier's further starts may use.
const FALSIFIER_SHARE: f64 = 0.05;

/// What a property came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The unsafe region is empty (`unsat`).
    Holds,
    /// A counterexample (`sat`).
    Violated(Counterexample),
    /// Neither shown.
    Unknown,
    /// The budget ran out first.
    Timeout,
}

impl Verdict {
    /// VNN-COMP's word for it.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Holds => "unsat",
            Verdict::Violated(_) => "sat",
            Verdict::Unknown => "unknown",
            Verdict::Timeout => "timeout",
        }
    }
}

/// An input of the deployment format inside the property's box and the outputs lipfp's
/// execution computes at it, which satisfy every constraint of disjunct `disjunct`.
#[derive(Clone, Debug, PartialEq)]
pub struct Counterexample {
    /// The input, `X_0 ..`.
    pub input: Vec<f64>,
    /// The outputs, `Y_0 ..`.
    pub outputs: Vec<f64>,
    /// The disjunct it satisfies.
    pub disjunct: usize,
}

/// The outcome of [`verify`].
#[derive(Clone, Debug)]
pub struct VerifyOutcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Disjuncts the bounds excluded, of `disjuncts`.
    pub excluded: usize,
    /// What branch and bound did, per input box it searched.
    pub searches: Vec<SearchSummary>,
    /// Disjuncts of the unsafe region.
    pub disjuncts: usize,
    /// Why the bounds decided nothing, when they could not be computed.
    pub bounds_note: Option<String>,
}

impl VerifyOutcome {
    /// The lowest of the hardest open bounds its searches left (how far branch and bound was
    /// from closing every box); `None` where none left an open subdomain.
    pub fn hardest_open(&self) -> Option<f64> {
        (self.searches.iter())
            .filter_map(|s| s.hardest_open)
            .reduce(f64::min)
    }
}

/// What branch and bound did over one input box.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSummary {
    /// Subdomains bounded.
    pub bounded: usize,
    /// Of those, shown infeasible.
    pub infeasible: usize,
    /// The most queued at once.
    pub peak_queue: usize,
    /// The deepest.
    pub depth: usize,
    /// The gap of the hardest subdomain left open, where one was.
    pub hardest_open: Option<f64>,
    /// Seconds.
    pub seconds: f64,
    /// Why it decided nothing, where it did not.
    pub unknown: Option<String>,
}

/// How [`verify`] decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerifyOptions {
    /// Branch and bound on what the bounds and the falsifier leave open.
    pub complete: bool,
    /// Subdomains bounded at most per input box.
    pub subdomains: usize,
    /// Bytes branch and bound's queue may hold.
    pub memory_bytes: usize,
    /// Whether its ReLU-splitting subdomains compute their layers again above their split.
    pub recompute: Recompute,
    /// When its ReLU-splitting searches' roots branch on their units.
    pub root_branching: RootBranching,
    /// Whether the falsifier runs before branch and bound (without it, counterexamples come
    /// only from the search's own candidates).
    pub falsifier: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            complete: true,
            subdomains: usize::MAX,
            memory_bytes: 2 << 30,
            recompute: Recompute::Adaptive,
            root_branching: RootBranching::Staged,
            falsifier: true,
        }
    }
}

/// An input box of a property as the bounds read it: the real box widened to hold the
/// deployment-format rounding of each of its points (`RN(x) >= RN(lo) >= lo - u |lo| - a_mul`;
/// no widening where `lo` is itself a value of the format).
pub fn bounded_box(p: &InputBox, format: Format) -> (Vec<f64>, Vec<f64>) {
    let end = |q: &Rational, down: bool| {
        conversion_end(
            format,
            (rational_to_f64_down(q), rational_to_f64_up(q)),
            down,
        )
    };
    let lo = p.lower.iter().map(|q| end(q, true)).collect();
    let hi = p.upper.iter().map(|q| end(q, false)).collect();
    (lo, hi)
}

/// Decide `property` for `subject` (its network, deployment format and execution) within
/// `budget_s` seconds: it holds when every disjunct is excluded over every input box.
pub fn verify(
    subject: &Subject,
    property: &Property,
    budget_s: f64,
    options: VerifyOptions,
) -> VerifyOutcome {
    let start = Instant::now();
    let disjuncts = property.disjuncts.len();
    let mut bounds_note = None;
    let per_box: Vec<Vec<bool>> = (property.boxes.iter())
        .map(|b| {
            let bx = bounded_box(b, subject.net.format);
            excluded_disjuncts(subject, property, (&bx.0, &bx.1)).unwrap_or_else(|why| {
                bounds_note = Some(why);
                vec![false; disjuncts]
            })
        })
        .collect();
    let count = (0..disjuncts)
        .filter(|&d| per_box.iter().all(|e| e[d]))
        .count();
    let mut searches = Vec::new();
    let outcome = |verdict, searches: &Vec<SearchSummary>| VerifyOutcome {
        verdict,
        excluded: count,
        searches: searches.clone(),
        disjuncts,
        bounds_note: bounds_note.clone(),
    };
    if count == disjuncts {
        return outcome(Verdict::Holds, &searches);
    }
    let over = || start.elapsed().as_secs_f64() > budget_s;
    let low_dim = subject.net.input_dim() <= complete::INPUT_SPLIT_MAX_DIM;
    let attacked = if options.falsifier { &per_box[..] } else { &[] };
    for (b, excluded) in property.boxes.iter().zip(attacked) {
        let search = Falsifier::new(subject, property, b);
        let open: Vec<usize> = (0..disjuncts).filter(|&d| !excluded[d]).collect();
        if over() {
            return outcome(Verdict::Timeout, &searches);
        }
        // the sure starts of every open disjunct, in lockstep
        let sure: Vec<(usize, u64)> = (open.iter())
            .flat_map(|&d| (0..SURE_STARTS as u64).map(move |s| (d, s)))
            .collect();
        if let Some(cx) = search.run(&sure, &over) {
            return outcome(Verdict::Violated(cx), &searches);
        }
        let further = if low_dim { STARTS } else { SURE_STARTS };
        for &d in &open {
            for s in SURE_STARTS..further {
                if over() {
                    return outcome(Verdict::Timeout, &searches);
                }
                if start.elapsed().as_secs_f64() > FALSIFIER_SHARE * budget_s {
                    break;
                }
                if let Some(cx) = search.run(&[(d, s as u64)], &over) {
                    return outcome(Verdict::Violated(cx), &searches);
                }
            }
        }
    }
    if !options.complete {
        return outcome(Verdict::Unknown, &searches);
    }
    let mut verdict = Verdict::Holds;
    for (b, excluded) in property.boxes.iter().zip(&per_box) {
        let open: Vec<usize> = (0..disjuncts).filter(|&d| !excluded[d]).collect();
        if open.is_empty() {
            continue;
        }
        let left = (budget_s - start.elapsed().as_secs_f64()).max(0.0);
        let (v, summary) = search_box(subject, property, b, &open, (left, options));
        searches.push(summary);
        match v {
            Verdict::Holds => {}
            Verdict::Violated(_) => return outcome(v, &searches),
            Verdict::Timeout => verdict = Verdict::Timeout,
            Verdict::Unknown if verdict == Verdict::Holds => verdict = Verdict::Unknown,
            Verdict::Unknown => {}
        }
    }
    outcome(verdict, &searches)
}

/// Branch and bound over input box `b` on the disjuncts `open`, within `budget_s` seconds.
fn search_box(
    subject: &Subject,
    property: &Property,
    b: &InputBox,
    open: &[usize],
    (budget_s, options): (f64, VerifyOptions),
) -> (Verdict, SearchSummary) {
    let bx = bounded_box(b, subject.net.format);
    let falsifier = Falsifier::new(subject, property, b);
    let objective = objective(subject, property, open);
    let confirm = |x: &[f64]| falsifier.confirm_near(x, open);
    let budget = Budget {
        seconds: budget_s,
        subdomains: options.subdomains,
        memory_bytes: options.memory_bytes,
        recompute: options.recompute,
        root_branching: options.root_branching,
    };
    let set = SearchSet::Box(&bx.0, &bx.1);
    let o = complete::decide(subject, set, &objective, budget, &confirm);
    let mut summary = SearchSummary {
        bounded: o.bounded,
        infeasible: o.infeasible,
        peak_queue: o.peak_queue,
        depth: o.depth,
        hardest_open: o.hardest_open,
        seconds: o.seconds,
        unknown: None,
    };
    let verdict = match o.decision {
        Decision::Holds => Verdict::Holds,
        Decision::Violated(cx) => Verdict::Violated(cx),
        Decision::Timeout => Verdict::Timeout,
        Decision::Unknown(why) => {
            summary.unknown = Some(why);
            Verdict::Unknown
        }
    };
    (verdict, summary)
}

/// The disjuncts `open` of the property's unsafe region as branch and bound's rows (numbered
/// `0..open.len()` in `open`'s order): a row whose coefficients are not float64 values is kept
/// but excludes nothing.
fn objective(subject: &Subject, p: &Property, open: &[usize]) -> Objective {
    let classes = subject.net.classes();
    let rows: Vec<(usize, &OutputConstraint)> = (open.iter().enumerate())
        .flat_map(|(k, &d)| p.disjuncts[d].iter().map(move |c| (k, c)))
        .collect();
    let mut c = Array2::zeros((rows.len(), classes));
    let mut usable = vec![true; rows.len()];
    for (r, (_, k)) in rows.iter().enumerate() {
        for (j, a) in &k.coef {
            let v = rational_to_f64_down(a);
            usable[r] &= *j < classes && Rational::from_f64(v).is_some_and(|q| q == *a);
            if *j < classes {
                c[[r, *j]] = v;
            }
        }
    }
    Objective {
        c,
        offset: rows
            .iter()
            .map(|(_, k)| rational_to_f64_down(&k.constant))
            .collect(),
        usable,
        disjunct: rows.iter().map(|(k, _)| *k).collect(),
        disjuncts: open.len(),
    }
}

/// Per disjunct, whether a constraint's lower bound over the box is above zero.
fn excluded_disjuncts(
    subject: &Subject,
    p: &Property,
    bx: (&[f64], &[f64]),
) -> Result<Vec<bool>, String> {
    let all: Vec<usize> = (0..p.disjuncts.len()).collect();
    let o = objective(subject, p, &all);
    let lower = box_lower_bounds(subject, bx, &o.c)?;
    let rows: Vec<usize> = (0..o.disjunct.len()).collect();
    let bounds = o.disjunct_bounds(&all, &rows, &lower);
    Ok(bounds.into_iter().map(complete::excluded).collect())
}
