//! Mode `complete` at a gate's points: where `best` (with local bounds at every point) leaves a
//! point uncertified, the falsifier searches it first, then branch and bound decides it over the
//! point's set ([`super::stages::decide`]), each point within its own budget and all of them
//! within a total one. A point is verified when every subdomain closes, falsified when a counterexample is
//! confirmed by lipfp's execution of the model (the falsifier's rule, [`SetCheck`]), and
//! undecided otherwise (docs/soundness.md "Complete verification", B8).

use std::collections::BTreeSet;
use std::time::Instant;

use ndarray::Array2;

use super::refinement::Recompute;
use super::search::{Budget, CompleteOutcome, Decision, Objective, SearchSet};
use super::stages::{decide, RootBranching};
use crate::bounds::ball::{clipped_box, conversion_hull, Norm};
use crate::bounds::certify::{Mode, Refusal, Verdict};
use crate::engine::attack::{attack_uncertified, AttackOutcome, SetCheck, Witness};
use crate::engine::run::{self, CertifyOutcome, Subject};
use crate::error::LipfpError;
use crate::policy::{CompleteBudget, Radius};
use crate::progress::Progress;

/// What the falsifier and branch and bound decided at a gate's points.
#[derive(Clone, Debug)]
pub struct PointDecisions {
    /// The falsifier's outcome, with branch and bound's counterexamples among its witnesses.
    pub attack: AttackOutcome,
    /// Points branch and bound searched.
    pub searched: usize,
    /// Of those, verified.
    pub verified: usize,
    /// Of those, falsified by one of its candidates.
    pub falsified: usize,
    /// Points left undecided (the total budget's remainder included).
    pub undecided: usize,
    /// Points the total budget left unsearched.
    pub not_reached: usize,
    /// Subdomains bounded over all searches.
    pub subdomains: usize,
    /// Seconds of branch and bound (the falsifier's are the attack's).
    pub seconds: f64,
}

/// Decides the points of `subject` that mode `complete` did not certify in `outcome` (at the
/// uniform `radius`) and settles its verdicts there: verified, `falsified` or `undecided`.
pub fn decide_points(
    subject: &Subject,
    radius: &Radius,
    outcome: &mut CertifyOutcome,
    budget: CompleteBudget,
    progress: &Progress,
) -> Result<PointDecisions, LipfpError> {
    let missing = || LipfpError::Usage("internal: mode complete was not computed".into());
    let verdicts = outcome
        .mode(Mode::Complete)
        .ok_or_else(missing)?
        .verdicts
        .clone();
    progress.stage("complete: the falsifier, then branch and bound at the points left");
    let mut attack = attack_uncertified(subject, radius, (Mode::Complete, &verdicts), progress)?;
    let refuted: BTreeSet<usize> = attack.witnesses.iter().map(|w| w.index).collect();
    let open: Vec<usize> = (attack.attacked.iter())
        .filter(|i| !refuted.contains(i))
        .copied()
        .collect();
    let start = Instant::now();
    let (settled, mut decisions) = search_points(subject, radius, &open, budget, progress)?;
    let mut verdicts: Vec<(usize, Verdict)> = (refuted.iter())
        .map(|&i| (i, Err(Refusal::Falsified)))
        .collect();
    for (i, d) in settled {
        verdicts.push((
            i,
            match d {
                Decision::Holds => Ok(()),
                Decision::Violated(w) => {
                    attack.witnesses.push(w);
                    Err(Refusal::Falsified)
                }
                Decision::Unknown(_) | Decision::Timeout => Err(Refusal::Undecided),
            },
        ));
    }
    attack.witnesses.sort_by_key(|w| w.index);
    decisions.seconds = start.elapsed().as_secs_f64();
    let mode = (outcome.modes.iter_mut())
        .find(|m| m.mode == Mode::Complete)
        .ok_or_else(missing)?;
    mode.settle(subject, &verdicts, attack.seconds + decisions.seconds);
    outcome.certify_s += attack.seconds + decisions.seconds;
    Ok(PointDecisions {
        attack,
        ..decisions
    })
}

/// How many times a run's per-point seconds a re-check may take per point.
const RECHECK_SLACK: f64 = 10.0;

/// Whether each of the points `indices` is certified by mode `complete` under `budget`'s
/// subdomains and memory: `best`'s certificate with local bounds ([`run::certify_points`]), then
/// branch and bound where it leaves a point, within `RECHECK_SLACK` times the per-point
/// seconds. Within time, a search's decision depends only on its subdomain budget (never on the
/// thread count or the clock), so a point a run verified is verified again; one not confirmed in
/// time counts as not certified (a policy or file cannot make the re-check run without end). The
/// falsifier is not run (it only refutes). Used to re-check certificate files
/// (`lipfp report --verify`).
pub fn recheck_points(
    subject: &Subject,
    radius: &Radius,
    indices: &[usize],
    budget: CompleteBudget,
) -> Result<Vec<bool>, LipfpError> {
    let mut ok = run::certify_points(subject, radius, Mode::Complete, indices, true)?;
    let mut open: Vec<usize> = (indices.iter().zip(&ok))
        .filter(|(&i, ok)| !**ok && subject.predictions.get(i).is_some_and(Option::is_some))
        .map(|(&i, _)| i)
        .collect();
    open.sort_unstable();
    open.dedup();
    let slack = CompleteBudget {
        seconds: budget.seconds * RECHECK_SLACK,
        total_s: None,
        ..budget
    };
    let (settled, _) = search_points(subject, radius, &open, slack, &Progress::silent())?;
    for (i, d) in settled {
        if matches!(d, Decision::Holds) {
            for (k, _) in indices.iter().enumerate().filter(|(_, &j)| j == i) {
                ok[k] = true;
            }
        }
    }
    Ok(ok)
}

/// Per point searched, its index and branch and bound's decision.
type Settled = Vec<(usize, Decision<Witness>)>;

/// Branch and bound at the points `open` (ascending), each at its predicted class: the
/// decisions, and the figures so far (the attack left empty).
fn search_points(
    subject: &Subject,
    radius: &Radius,
    open: &[usize],
    budget: CompleteBudget,
    progress: &Progress,
) -> Result<(Settled, PointDecisions), LipfpError> {
    let start = Instant::now();
    let check = SetCheck::new(subject, radius, Mode::Complete)?;
    let Radius::Uniform { up: eps, .. } = *radius else {
        unreachable!("SetCheck::new refuses other radii");
    };
    // a prediction of the zero-floor class is never certified (the certificates' rule)
    let head = (subject.bounds.as_ref()).map(|b| (b.head_margin, b.floor_class));
    let mut out = Vec::with_capacity(open.len());
    let mut figures = PointDecisions {
        attack: AttackOutcome {
            mode: Mode::Complete,
            attacked: Vec::new(),
            witnesses: Vec::new(),
            seconds: 0.0,
        },
        searched: 0,
        verified: 0,
        falsified: 0,
        undecided: 0,
        not_reached: 0,
        subdomains: 0,
        seconds: 0.0,
    };
    let task = progress.task("branch and bound", open.len() as u64);
    let dim = subject.inputs.dim;
    subject.visit_rows(open, |chosen, rows| {
        for (k, &i) in chosen.iter().enumerate() {
            let left =
                (budget.total_s).map_or(f64::INFINITY, |t| t - start.elapsed().as_secs_f64());
            let target = match (subject.predictions[i], &head) {
                (Some(class), Ok((g, floor))) if *floor != Some(class) => Some((class, *g)),
                _ => None,
            };
            let (Some(target), true) = (target, left > 0.0) else {
                figures.not_reached += usize::from(left <= 0.0);
                figures.undecided += 1;
                out.push((i, Decision::Unknown("not searched".into())));
                continue;
            };
            let limits = Budget {
                seconds: budget.seconds.min(left),
                subdomains: budget.subdomains,
                memory_bytes: budget.memory_bytes,
                recompute: Recompute::Adaptive,
                root_branching: RootBranching::Staged,
            };
            let x0 = &rows[k * dim..(k + 1) * dim];
            let o = search_point(subject, (i, x0, eps), target, limits, &check);
            figures.searched += 1;
            figures.subdomains += o.bounded;
            match &o.decision {
                Decision::Holds => figures.verified += 1,
                Decision::Violated(_) => figures.falsified += 1,
                _ => figures.undecided += 1,
            }
            out.push((i, o.decision));
            task.add(1);
        }
        Ok(())
    })?;
    task.finish();
    Ok((out, figures))
}

/// Branch and bound at point `i` (input `x0`, radius `eps`) predicted `class`, over its set
/// (B8): the l_inf box widened to hold every rounding of its points, or the l2 ball.
fn search_point(
    subject: &Subject,
    (i, x0, eps): (usize, &[f64], f64),
    (class, g): (usize, f64),
    limits: Budget,
    check: &SetCheck,
) -> CompleteOutcome<Witness> {
    let objective = margin_objective(subject.net.classes(), class, g);
    let confirm = |v: &[f64]| (check.confirm(v, x0, class)).map(|w| Witness { index: i, ..w });
    let within = clipped_box(x0, eps, subject.ball.range);
    match subject.ball.norm {
        Norm::Linf => {
            let (lo, hi) = conversion_hull(subject.net.format, &within.0, &within.1);
            let set = SearchSet::Box(&lo, &hi);
            decide(subject, set, &objective, limits, &confirm)
        }
        Norm::L2 => {
            let set = SearchSet::Ball {
                x0,
                eps,
                within: (&within.0, &within.1),
            };
            decide(subject, set, &objective, limits, &confirm)
        }
    }
}

/// The unsafe region of a point predicted `class` as branch and bound's rows: one disjunct per
/// other class `j`, the margin `y_class - y_j` at most the head's margin `g` (the local
/// certificate's rule, L4: excluded when a lower bound of `y_class - y_j - g` is above zero; the
/// constant `-g` is exact).
pub fn margin_objective(classes: usize, class: usize, g: f64) -> Objective {
    let others: Vec<usize> = (0..classes).filter(|&j| j != class).collect();
    let mut c = Array2::zeros((others.len(), classes));
    for (r, &j) in others.iter().enumerate() {
        c[[r, class]] = 1.0;
        c[[r, j]] = -1.0;
    }
    Objective {
        c,
        offset: vec![-g; others.len()],
        usable: vec![true; others.len()],
        disjunct: (0..others.len()).collect(),
        disjuncts: others.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each other class is a disjunct of one row `e_class - e_j` with the constant `-g`.
    #[test]
    fn the_margin_objective_has_a_row_per_other_class() {
        let o = margin_objective(3, 1, 0.25);
        assert_eq!(o.c, ndarray::arr2(&[[-1.0, 1.0, 0.0], [0.0, 1.0, -1.0]]));
        assert_eq!(o.offset, vec![-0.25, -0.25]);
        assert_eq!(o.disjunct, vec![0, 1]);
        assert_eq!((o.disjuncts, &o.usable), (2, &vec![true, true]));
        // excluded only when the margin's bound exceeds g: 0.3 - 0.25 > 0, 0.25 - 0.25 is not
        let b = o.disjunct_bounds(&[0, 1], &[0, 1], &[0.3, 0.25]);
        assert!(
            crate::engine::complete::excluded(b[0]) && !crate::engine::complete::excluded(b[1])
        );
        // a single class has nothing to lose to
        let one = margin_objective(1, 0, 0.0);
        assert_eq!((one.c.nrows(), one.disjuncts), (0, 0));
    }
}
