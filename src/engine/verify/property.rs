//! One VNN-LIB property decided ([`verify`]): the bounds, the falsifier and branch and bound as
//! the folder's documentation describes.

use std::time::Instant;

use ndarray::Array2;
use rug::Rational;

use crate::arith::format::Format;
use crate::arith::sound::{rational_to_f64_down, rational_to_f64_up};
use crate::bounds::ball::conversion_end;
use crate::engine::attack::SplitMix;
use crate::engine::complete::{self, Budget, Decision, Objective, SearchSet};
use crate::engine::exec::Executor;
use crate::engine::gradient::GradNet;
use crate::engine::run::{box_lower_bounds, Subject};
use crate::policy::vnnlib::{InputBox, OutputConstraint, Property};

/// Sign-gradient steps per start of the falsifier.
const STEPS: usize = 60;
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
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            complete: true,
            subdomains: usize::MAX,
            memory_bytes: 2 << 30,
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
    for (b, excluded) in property.boxes.iter().zip(&per_box) {
        let search = Falsifier::new(subject, property, b);
        for (d, _) in excluded.iter().enumerate().filter(|(_, e)| !**e) {
            let starts = if subject.net.input_dim() <= complete::INPUT_SPLIT_MAX_DIM {
                STARTS
            } else {
                SURE_STARTS
            };
            for s in 0..starts {
                if over() {
                    return outcome(Verdict::Timeout, &searches);
                }
                if s >= SURE_STARTS && start.elapsed().as_secs_f64() > FALSIFIER_SHARE * budget_s {
                    break;
                }
                if let Some(cx) = search.run(d, s as u64) {
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
    let confirm = |x: &[f64]| falsifier.confirm_any(&falsifier.snap(x), open);
    let budget = Budget {
        seconds: budget_s,
        subdomains: options.subdomains,
        memory_bytes: options.memory_bytes,
    };
    let set = SearchSet::Box(&bx.0, &bx.1);
    let o = complete::decide(subject, set, &objective, budget, &confirm);
    let mut summary = SearchSummary {
        bounded: o.bounded,
        infeasible: o.infeasible,
        peak_queue: o.peak_queue,
        depth: o.depth,
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

/// The falsifier's fixed parts.
struct Falsifier<'a> {
    subject: &'a Subject,
    property: &'a Property,
    /// The input box searched.
    input: &'a InputBox,
    grad: GradNet,
    exec: Executor,
    /// The smallest and largest format values inside the real box, per input.
    inside: Vec<(f64, f64)>,
}

impl<'a> Falsifier<'a> {
    fn new(subject: &'a Subject, property: &'a Property, input: &'a InputBox) -> Self {
        let f = subject.net.format;
        let inside = (input.lower.iter().zip(&input.upper))
            .map(|(l, u)| {
                let lo = format_value_at(l, f, true);
                let hi = format_value_at(u, f, false);
                match (lo, hi) {
                    (Some(a), Some(b)) if a <= b => (a, b),
                    _ => (f64::NAN, f64::NAN),
                }
            })
            .collect();
        Falsifier {
            subject,
            property,
            input,
            grad: GradNet::new(&subject.net),
            exec: Executor::new(&subject.net, &subject.execution),
            inside,
        }
    }

    /// One start (`seed` 0: the centre) of the descent on disjunct `d`; the first candidate that
    /// lipfp's execution places in the unsafe region.
    fn run(&self, d: usize, seed: u64) -> Option<Counterexample> {
        if self.inside.iter().any(|(a, _)| a.is_nan()) {
            return None;
        }
        let constraints = &self.property.disjuncts[d];
        let dim = self.inside.len();
        let mut rng = SplitMix::new(d, seed as usize);
        let mut x: Vec<f64> = (self.inside.iter())
            .map(|(a, b)| {
                let t = if seed == 0 { 0.5 } else { rng.uniform() };
                a + (b - a) * t
            })
            .collect();
        let coef: Vec<Vec<f64>> = (constraints.iter())
            .map(|k| {
                let mut a = vec![0.0; self.subject.net.classes()];
                for (j, v) in &k.coef {
                    if let Some(slot) = a.get_mut(*j) {
                        *slot = v.to_f64();
                    }
                }
                a
            })
            .collect();
        let consts: Vec<f64> = constraints.iter().map(|k| k.constant.to_f64()).collect();
        for step in 0..STEPS {
            let candidate = self.snap(&x);
            if let Some(cx) = self.confirm(&candidate, d) {
                return Some(cx);
            }
            let rows = Array2::from_shape_vec((1, dim), candidate).ok()?;
            // the largest constraint value leads: push it down
            let (_, g) = self.grad.objective_gradient(&rows, |_, y| {
                let value =
                    |k: usize| coef[k].iter().zip(y).map(|(a, v)| a * v).sum::<f64>() + consts[k];
                let lead = (0..coef.len())
                    .max_by(|&a, &b| value(a).total_cmp(&value(b)))
                    .unwrap_or(0);
                coef.get(lead).cloned().unwrap_or_default()
            });
            let frac = 0.5 * (1.0 - step as f64 / STEPS as f64) + 0.02;
            for (i, xi) in x.iter_mut().enumerate() {
                let (a, b) = self.inside[i];
                *xi = (*xi - frac * (b - a) * g[[0, i]].signum()).clamp(a, b);
            }
        }
        None
    }

    /// `x` rounded to the format and kept inside the box's format values.
    fn snap(&self, x: &[f64]) -> Vec<f64> {
        let f = self.subject.net.format;
        (x.iter().zip(&self.inside))
            .map(|(v, (a, b))| f.round(*v).clamp(*a, *b))
            .collect()
    }

    /// The counterexample at `x` when it is in the real box and lipfp's execution puts its
    /// outputs in disjunct `d` (both checked in rationals).
    fn confirm(&self, x: &[f64], d: usize) -> Option<Counterexample> {
        self.confirm_any(x, &[d])
    }

    /// The counterexample at `x` for the first of the disjuncts `ds` whose region lipfp's
    /// execution puts the outputs in, when `x` is in the real box (both checked in rationals).
    fn confirm_any(&self, x: &[f64], ds: &[usize]) -> Option<Counterexample> {
        if self.inside.iter().any(|(a, _)| a.is_nan()) {
            return None;
        }
        let (p, b) = (self.property, self.input);
        let inside = (x.iter().zip(b.lower.iter().zip(&b.upper)))
            .all(|(v, (l, u))| Rational::from_f64(*v).is_some_and(|q| *l <= q && q <= *u));
        if !inside {
            return None;
        }
        let y = self.exec.logits(x, x.len());
        let exact: Option<Vec<Rational>> = y.iter().map(|v| Rational::from_f64(*v)).collect();
        let exact = exact?;
        let holds = |d: usize| {
            p.disjuncts[d].iter().all(|k| {
                let value: Rational = (k.coef.iter())
                    .map(|(j, a)| {
                        exact
                            .get(*j)
                            .map_or(Rational::new(), |v| Rational::from(a * v))
                    })
                    .sum::<Rational>()
                    + &k.constant;
                value <= 0
            })
        };
        let d = ds.iter().copied().find(|&d| holds(d))?;
        Some(Counterexample {
            input: x.to_vec(),
            outputs: y,
            disjunct: d,
        })
    }
}

/// The smallest value of `format` at or above `q` (`up`) or the largest at or below it, when the
/// format is one whose neighbours lipfp steps through (float32, float64).
fn format_value_at(q: &Rational, format: Format, up: bool) -> Option<f64> {
    let mut v = format.round(q.to_f64());
    for _ in 0..4 {
        let e = Rational::from_f64(v)?;
        match (up, e.cmp(q)) {
            (_, std::cmp::Ordering::Equal) => return Some(v),
            (true, std::cmp::Ordering::Greater) | (false, std::cmp::Ordering::Less) => {
                return Some(v)
            }
            (true, _) => v = format_next(v, format, true)?,
            (false, _) => v = format_next(v, format, false)?,
        }
    }
    None
}

/// The neighbour of a value of `format` (float32 and float64 only).
fn format_next(v: f64, format: Format, up: bool) -> Option<f64> {
    match (format, up) {
        (Format::Float32, true) => Some(f64::from((v as f32).next_up())),
        (Format::Float32, false) => Some(f64::from((v as f32).next_down())),
        (Format::Float64, true) => Some(v.next_up()),
        (Format::Float64, false) => Some(v.next_down()),
        _ => None,
    }
}
