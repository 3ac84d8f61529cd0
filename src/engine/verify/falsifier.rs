//! The falsifier of a VNN-LIB property: projected sign-gradient descents on the largest
//! constraint value of a disjunct, each candidate counted only when lipfp's execution places it
//! in the unsafe region (checked in rationals). Many descents run in lockstep, so each step's
//! gradient is one matrix product for all of them.

use ndarray::Array2;
use rug::Rational;

use super::property::Counterexample;
use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::engine::attack::SplitMix;
use crate::engine::exec::Executor;
use crate::engine::gradient::GradNet;
use crate::engine::run::Subject;
use crate::policy::vnnlib::{InputBox, OutputConstraint, Property};

/// Sign-gradient steps per start of the falsifier.
pub const STEPS: usize = 60;
/// Where the deployed execution is IEEE float32 or float64 throughout, a candidate goes to lipfp's
/// execution only when every constraint `a_k . y + c_k` of its disjunct, at the float64
/// network's outputs `y`, is at most this times `(1 + max |y_j|)(1 + ||a_k||_1)`: a far larger
/// allowance than such an execution's difference from the float64 network (`u` at most `2^-24`
/// per operation). Narrower arithmetic (float16, bfloat16, TF32 operands, tensor cores) is not
/// filtered. The filter only saves executions; it never decides anything.
const CONFIRM_SLACK: f64 = 1e-3;

/// The falsifier's fixed parts.
pub struct Falsifier<'a> {
    subject: &'a Subject,
    property: &'a Property,
    /// The input box searched.
    input: &'a InputBox,
    grad: GradNet,
    exec: Executor,
    /// The smallest and largest format values inside the real box, per input.
    inside: Vec<(f64, f64)>,
    /// Per disjunct, its constraints in float64.
    disjuncts: Vec<DisjunctRows>,
    /// Whether candidates far from their disjunct at the float64 outputs are skipped
    /// ([`CONFIRM_SLACK`]).
    filter: bool,
}

/// A disjunct's constraints as float64 rows over the outputs, with their constants (what the
/// descents steer by; only the rational check decides).
struct DisjunctRows {
    coef: Vec<Vec<f64>>,
    consts: Vec<f64>,
}

impl DisjunctRows {
    /// The rows of `constraints` over `classes` outputs.
    fn new(constraints: &[OutputConstraint], classes: usize) -> DisjunctRows {
        let coef: Vec<Vec<f64>> = (constraints.iter())
            .map(|k| {
                let mut a = vec![0.0; classes];
                for (j, v) in &k.coef {
                    if let Some(slot) = a.get_mut(*j) {
                        *slot = v.to_f64();
                    }
                }
                a
            })
            .collect();
        let consts = constraints.iter().map(|k| k.constant.to_f64()).collect();
        DisjunctRows { coef, consts }
    }

    /// The index and value of the largest constraint value at the outputs `y`.
    fn lead(&self, y: &[f64]) -> (usize, f64) {
        let value =
            |k: usize| self.coef[k].iter().zip(y).map(|(a, v)| a * v).sum::<f64>() + self.consts[k];
        (0..self.coef.len())
            .map(|k| (k, value(k)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::NEG_INFINITY))
    }

    /// Whether the float64 outputs `y` come within [`CONFIRM_SLACK`] of the region: every
    /// constraint's value at most `CONFIRM_SLACK (1 + max |y_j|)(1 + ||a_k||_1)`.
    fn near(&self, y: &[f64]) -> bool {
        let scale = y.iter().fold(1.0f64, |m, v| m.max(1.0 + v.abs()));
        (self.coef.iter().zip(&self.consts)).all(|(a, c)| {
            let value = a.iter().zip(y).map(|(a, v)| a * v).sum::<f64>() + c;
            let size = 1.0 + a.iter().map(|v| v.abs()).sum::<f64>();
            value <= CONFIRM_SLACK * scale * size
        })
    }
}

/// One descent: its disjunct and its point.
struct Descent {
    disjunct: usize,
    x: Vec<f64>,
}

impl<'a> Falsifier<'a> {
    /// The falsifier of `property` over its input box `input`.
    pub fn new(subject: &'a Subject, property: &'a Property, input: &'a InputBox) -> Self {
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
            disjuncts: (property.disjuncts.iter())
                .map(|d| DisjunctRows::new(d, subject.net.classes()))
                .collect(),
            filter: wide_ieee(&subject.execution),
        }
    }

    /// The descents from `starts` (disjunct, seed; seed 0 is the box's centre), run in lockstep
    /// for [`STEPS`] steps or until `over` says the budget is spent: the first candidate lipfp's
    /// execution places in its disjunct's region, the earliest step first, then the first in
    /// `starts`' order (so a disjunct after the first may be reported).
    pub fn run(&self, starts: &[(usize, u64)], over: &dyn Fn() -> bool) -> Option<Counterexample> {
        if self.inside.iter().any(|(a, _)| a.is_nan()) || starts.is_empty() {
            return None;
        }
        let mut descents: Vec<Descent> = starts.iter().map(|&(d, s)| self.descent(d, s)).collect();
        let dim = self.inside.len();
        for step in 0..STEPS {
            if over() {
                return None;
            }
            let candidates: Vec<Vec<f64>> = descents.iter().map(|t| self.snap(&t.x)).collect();
            let flat: Vec<f64> = candidates.iter().flatten().copied().collect();
            let rows = Array2::from_shape_vec((descents.len(), dim), flat).ok()?;
            // the largest constraint value leads: push it down
            let (logits, g) = self.grad.objective_gradient(&rows, |r, y| {
                let rows = &self.disjuncts[descents[r].disjunct];
                let (lead, _) = rows.lead(y);
                rows.coef.get(lead).cloned().unwrap_or_default()
            });
            for (r, (t, candidate)) in descents.iter().zip(&candidates).enumerate() {
                let y = logits.row(r).to_vec();
                if self.filter && !self.disjuncts[t.disjunct].near(&y) {
                    continue;
                }
                if let Some(cx) = self.confirm_any(candidate, &[t.disjunct]) {
                    return Some(cx);
                }
            }
            let frac = 0.5 * (1.0 - step as f64 / STEPS as f64) + 0.02;
            for (r, t) in descents.iter_mut().enumerate() {
                for (i, xi) in t.x.iter_mut().enumerate() {
                    let (a, b) = self.inside[i];
                    *xi = (*xi - frac * (b - a) * g[[r, i]].signum()).clamp(a, b);
                }
            }
        }
        None
    }

    /// A descent on disjunct `d` from `seed`'s start.
    fn descent(&self, d: usize, seed: u64) -> Descent {
        let mut rng = SplitMix::new(d, seed as usize);
        let x: Vec<f64> = (self.inside.iter())
            .map(|(a, b)| {
                let t = if seed == 0 { 0.5 } else { rng.uniform() };
                a + (b - a) * t
            })
            .collect();
        Descent { disjunct: d, x }
    }

    /// [`Falsifier::confirm_any`] at `x` snapped to the format, tried only when the float64
    /// network's outputs there come near one of the disjuncts `ds` (branch and bound's leaf
    /// candidates: the filter saves executions and decides nothing).
    pub fn confirm_near(&self, x: &[f64], ds: &[usize]) -> Option<Counterexample> {
        let x = self.snap(x);
        let near = |y: Vec<f64>| {
            ds.iter()
                .any(|&d| self.disjuncts.get(d).is_some_and(|r| r.near(&y)))
        };
        let skip = self.filter && self.grad.logits(&x).is_some_and(|y| !near(y));
        (!skip).then(|| self.confirm_any(&x, ds)).flatten()
    }

    /// `x` rounded to the format and kept inside the box's format values.
    pub fn snap(&self, x: &[f64]) -> Vec<f64> {
        let f = self.subject.net.format;
        (x.iter().zip(&self.inside))
            .map(|(v, (a, b))| f.round(*v).clamp(*a, *b))
            .collect()
    }

    /// The counterexample at `x` for the first of the disjuncts `ds` whose region lipfp's
    /// execution puts the outputs in, when `x` is in the real box (both checked in rationals).
    pub fn confirm_any(&self, x: &[f64], ds: &[usize]) -> Option<Counterexample> {
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
/// Whether an execution is IEEE float32 or float64 in storage and every accumulation, with no
/// operand conversion, tensor cores, split-K or extra output rounding (where [`CONFIRM_SLACK`]
/// holds).
fn wide_ieee(execution: &ExecutionModel) -> bool {
    let wide = |f: Format| matches!(f, Format::Float32 | Format::Float64);
    execution.is_ieee()
        && wide(execution.storage)
        && execution.accumulations().into_iter().all(wide)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn constraint(coef: &[(usize, i64)], constant: i64) -> OutputConstraint {
        OutputConstraint {
            coef: coef.iter().map(|(j, a)| (*j, Rational::from(*a))).collect(),
            constant: Rational::from(constant),
            line: 1,
        }
    }

    /// `Y_1 - Y_0 <= 0` and `Y_2 - 3 <= 0`: at `y = (1, 3, 4)` the values are 2 and 1 (the first
    /// leads), at `(1, 0, 5)` they are -1 and 2 (the second).
    #[test]
    fn the_lead_is_the_largest_constraint_value() {
        let rows = DisjunctRows::new(
            &[constraint(&[(1, 1), (0, -1)], 0), constraint(&[(2, 1)], -3)],
            3,
        );
        assert_eq!(rows.lead(&[1.0, 3.0, 4.0]), (0, 2.0));
        assert_eq!(rows.lead(&[1.0, 0.0, 5.0]), (1, 2.0));
        // a coefficient on an output the network lacks is dropped
        let short = DisjunctRows::new(&[constraint(&[(7, 1)], -1)], 3);
        assert_eq!(short.lead(&[9.0, 9.0, 9.0]), (0, -1.0));
    }

    /// Near: every constraint at most `1e-3 (1 + max |y_j|)(1 + ||a_k||_1)`. At `y = (0, 999)`
    /// with `Y_0 - Y_1 + c` the allowance is `1e-3 * 1000 * 3 = 3`: `c = 1002` gives 3 (near),
    /// `c = 1003` gives 4 (not); a second constraint far off makes the disjunct far.
    #[test]
    fn a_candidate_is_near_within_the_relative_slack() {
        let near = |c: i64| DisjunctRows::new(&[constraint(&[(0, 1), (1, -1)], c)], 2);
        assert!(near(1002).near(&[0.0, 999.0]));
        assert!(!near(1003).near(&[0.0, 999.0]));
        assert!(near(0).near(&[0.0, 0.0]) && !near(1).near(&[0.0, 0.0]));
        let both = DisjunctRows::new(&[constraint(&[(0, 1)], 0), constraint(&[(1, 1)], -500)], 2);
        assert!(both.near(&[0.0, 500.0]) && !both.near(&[0.0, 600.0]));
    }

    /// The filter holds for IEEE float32 and float64 executions only.
    #[test]
    fn only_wide_ieee_executions_are_filtered() {
        let mut e = ExecutionModel::float64_reference();
        assert!(wide_ieee(&e));
        e.storage = Format::Float32;
        e.accumulate = Some(Format::Float32);
        assert!(wide_ieee(&e));
        e.accumulate = Some(Format::Float16);
        assert!(!wide_ieee(&e));
        e.accumulate = None;
        e.storage = Format::Bfloat16;
        assert!(!wide_ieee(&e));
    }
}
