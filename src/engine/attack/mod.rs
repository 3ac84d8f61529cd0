//! The falsifier (issue 13, item 2): for the points a sound mode does not certify, a search for
//! a real adversarial example in the set of radius `eps` (the l2 ball, or the l_inf ball; either
//! clipped to the input range when one is declared) under the deployed execution.
//!
//! The search is projected gradient descent on the margin `z_c - max_{j != c} z_j` (gradients
//! of the converted network in `f64`, [`GradNet`]): [`RESTARTS`] starts (the centre, then
//! seeded random points of the set) of [`STEPS`] steps of length `2.5 eps / STEPS` (normalised
//! gradient steps for l2, sign steps for l_inf), each projected back onto the set. The search only proposes: a candidate counts as *falsified*
//! only when, rounded onto the deployment format towards the centre, (a) the deployed forward
//! pass ([`Executor`], the execution that computed the centre's logits) ranks another class
//! first ([`predicted_class`]) and (b) it lies in the set, its distance to the centre at most the
//! radius as an exact decimal, checked in rational arithmetic ([`in_set_exact`]). Certified points are
//! never attacked; with labels, neither are misclassified points (they are already outside the
//! robust accuracy). Every point's random numbers are seeded by its index in the test set, and
//! points are searched in fixed blocks: the result does not depend on the thread count.

mod ball;
pub mod outcome;
pub mod witnesses;

use std::time::Instant;

use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;
use rug::Rational;

pub use crate::engine::gradient::{runner_up, GradNet};
pub use ball::{in_ball_exact, in_set_exact, round_towards_centre, SplitMix};
pub use outcome::{AttackOutcome, Witness};

use crate::arith::format::Format;
use crate::arith::sound::rational_to_f64_down;
use crate::bounds::ball::{BallSpec, Norm};
use crate::bounds::certify::{predicted_class, Mode};
use crate::engine::exec::{Executor, Hidden};
use crate::engine::run::{CertifyOutcome, Subject};
use crate::error::LipfpError;
use crate::policy::{check_attack_request, parse_decimal_exact, Radius};
use crate::progress::Progress;

/// Gradient steps per start.
pub const STEPS: usize = 40;
/// Starts per point: the centre, then random points of the ball.
pub const RESTARTS: usize = 3;
/// The step length is `STEP_FACTOR * eps / STEPS`.
const STEP_FACTOR: f64 = 2.5;
/// Points searched together (one matrix product per layer and step).
const BLOCK: usize = 16;

/// [`check_attack_request`] for `lipfp certify --attack` (errors name the flag), and the witnesses'
/// destinations checked before any work.
pub fn check_cli(
    radius: &Radius,
    mode: Mode,
    witnesses: Option<&std::path::Path>,
) -> Result<(), LipfpError> {
    check_attack_request(radius, mode).map_err(|m| LipfpError::Usage(format!("--attack: {m}")))?;
    if let Some(p) = witnesses {
        crate::files::check_target(p, "witnesses file")?;
        crate::files::check_target(&witnesses::indices_path(p), "witness indices file")?;
    }
    Ok(())
}

/// The points to attack: not certified (`verdicts`), with finite logits, and — with labels —
/// correctly classified.
pub fn targets(subject: &Subject, verdicts: &[bool]) -> Vec<usize> {
    (0..subject.n())
        .filter(|&i| !verdicts[i])
        .filter(|&i| match (subject.predictions[i], &subject.labels) {
            (None, _) => false,
            (Some(p), Some(y)) => p == y[i],
            (Some(_), None) => true,
        })
        .collect()
}

/// The converted inputs of the subject's points `indices` (ascending), re-read from its file.
fn centre_rows(subject: &Subject, indices: &[usize]) -> Result<Vec<f64>, LipfpError> {
    let mut out = Vec::with_capacity(indices.len() * subject.inputs.dim);
    subject.visit_rows(indices, |_, rows| {
        out.extend_from_slice(rows);
        Ok(())
    })?;
    Ok(out)
}

/// What makes a candidate a counterexample: the deployed execution, the format, the set.
pub struct SetCheck {
    exec: Executor,
    format: Format,
    /// The radius, exactly.
    eps: Rational,
    /// The set a radius stands for (norm and input range).
    ball: BallSpec,
}

impl SetCheck {
    /// The check for `subject`'s points at the uniform `radius` (refused for other radii, as
    /// [`check_attack_request`] says, under `mode`).
    pub fn new(subject: &Subject, radius: &Radius, mode: Mode) -> Result<SetCheck, LipfpError> {
        check_attack_request(radius, mode).map_err(LipfpError::Usage)?;
        let Radius::Uniform { text, .. } = radius else {
            unreachable!("checked above");
        };
        let eps = parse_decimal_exact(text)
            .ok_or_else(|| LipfpError::Usage(format!("`{text}` is not a decimal number")))?;
        Ok(SetCheck {
            exec: Executor::new(&subject.net, &subject.execution),
            format: subject.net.format,
            eps,
            ball: subject.ball,
        })
    }

    /// `v` rounded onto the format towards `x0`, when it is in the set around `x0` and the
    /// deployed execution ranks a class other than `c` first there (index 0: the caller's).
    pub fn confirm(&self, v: &[f64], x0: &[f64], c: usize) -> Option<Witness> {
        let input = round_towards_centre(self.format, v, x0)?;
        if !in_set_exact(&input, x0, &self.eps, self.ball) {
            return None;
        }
        let view = ArrayView2::from_shape((1, input.len()), &input).ok()?;
        let logits: Vec<f64> = self
            .exec
            .forward_block(view, Hidden::None)
            .0
            .into_iter()
            .collect();
        match predicted_class(&logits) {
            Some(k) if k != c => Some(Witness {
                index: 0,
                input,
                class: k,
            }),
            _ => None,
        }
    }
}

/// Everything a block of points is searched with.
struct Search<'a> {
    net: GradNet,
    check: SetCheck,
    /// The set a radius stands for (norm and input range).
    ball: BallSpec,
    /// Largest norm a step may leave the search at (just under the radius).
    reach: f64,
    /// Step length.
    alpha: f64,
    subject: &'a Subject,
}

impl Search<'_> {
    /// The start of restart `r` at point `index`: the centre, then a seeded random point of
    /// the set.
    fn start(&self, x0: &[f64], index: usize, r: usize) -> Vec<f64> {
        if r == 0 {
            return x0.to_vec();
        }
        let mut rng = SplitMix::new(index, r);
        let mut x: Vec<f64> = match self.ball.norm {
            Norm::L2 => {
                let dir: Vec<f64> = x0.iter().map(|_| rng.normal()).collect();
                let norm = dir.iter().map(|d| d * d).sum::<f64>().sqrt();
                let scale = if norm > 0.0 {
                    self.reach * rng.uniform() / norm
                } else {
                    0.0
                };
                x0.iter().zip(&dir).map(|(x, d)| x + scale * d).collect()
            }
            Norm::Linf => (x0.iter())
                .map(|x| x + self.reach * (2.0 * rng.uniform() - 1.0))
                .collect(),
        };
        self.clip(&mut x);
        x
    }

    /// One normalised descent step of `x` along `-g` (along its sign for l_inf), projected onto
    /// the set around `x0`.
    fn step(&self, x: &mut [f64], g: &[f64], x0: &[f64]) {
        match self.ball.norm {
            Norm::L2 => {
                let gn = g.iter().map(|v| v * v).sum::<f64>().sqrt();
                if gn > 0.0 && gn.is_finite() {
                    for (v, gi) in x.iter_mut().zip(g) {
                        *v -= self.alpha * gi / gn;
                    }
                }
                let dn = (x.iter().zip(x0))
                    .map(|(v, c)| (v - c) * (v - c))
                    .sum::<f64>()
                    .sqrt();
                if dn > self.reach {
                    let s = self.reach / dn;
                    for (v, c) in x.iter_mut().zip(x0) {
                        *v = c + (*v - c) * s;
                    }
                }
            }
            Norm::Linf => {
                for ((v, gi), c) in x.iter_mut().zip(g).zip(x0) {
                    if gi.is_finite() && *gi != 0.0 {
                        *v -= self.alpha * gi.signum();
                    }
                    *v = v.clamp(c - self.reach, c + self.reach);
                }
            }
        }
        self.clip(x);
    }

    /// `x` clipped to the input range, when declared (the centre lies in it, so clipping only
    /// brings a coordinate closer to it: the point stays in the ball).
    fn clip(&self, x: &mut [f64]) {
        if let Some(r) = self.ball.range {
            for v in x.iter_mut() {
                *v = v.clamp(r.lo, r.hi);
            }
        }
    }

    /// Search the points `idx` (subject indices) with centres `x0` (`[len, dim]`).
    fn block(&self, idx: &[usize], x0: &[f64]) -> Vec<Witness> {
        let dim = self.subject.inputs.dim;
        let centre = |k: usize| &x0[k * dim..(k + 1) * dim];
        let class = |k: usize| self.subject.predictions[idx[k]].unwrap_or(0);
        let mut found: Vec<Option<Witness>> = vec![None; idx.len()];
        for r in 0..RESTARTS {
            let mut live: Vec<usize> = (0..idx.len()).filter(|&k| found[k].is_none()).collect();
            let mut x = Array2::<f64>::zeros((live.len(), dim));
            for (row, &k) in live.iter().enumerate() {
                let s = self.start(centre(k), self.subject.first + idx[k], r);
                x.row_mut(row).assign(&ndarray::ArrayView1::from(&s));
            }
            for s in 0..=STEPS {
                if live.is_empty() {
                    break;
                }
                let classes: Vec<usize> = live.iter().map(|&k| class(k)).collect();
                let (logits, g) = self.net.margin_gradient(&x, &classes);
                let mut keep = Vec::with_capacity(live.len());
                for (row, &k) in live.iter().enumerate() {
                    let l = logits.row(row).to_vec();
                    let c = class(k);
                    if l[c] - l[runner_up(&l, c)] <= 0.0 {
                        let v = x.row(row).to_vec();
                        if let Some(w) = self.check.confirm(&v, centre(k), c) {
                            found[k] = Some(Witness { index: idx[k], ..w });
                            continue;
                        }
                    }
                    keep.push(row);
                }
                if s == STEPS {
                    break;
                }
                x = x.select(Axis(0), &keep);
                let g = g.select(Axis(0), &keep);
                live = keep.iter().map(|&row| live[row]).collect();
                for (row, &k) in live.iter().enumerate() {
                    let mut v = x.row(row).to_vec();
                    self.step(&mut v, &g.row(row).to_vec(), centre(k));
                    x.row_mut(row).assign(&ndarray::ArrayView1::from(&v));
                }
            }
        }
        found.into_iter().flatten().collect()
    }
}

/// Attack the points of `subject` that `mode` did not certify in `outcome`, at `radius`.
pub fn attack(
    subject: &Subject,
    radius: &Radius,
    mode: Mode,
    outcome: &CertifyOutcome,
    progress: &Progress,
) -> Result<AttackOutcome, LipfpError> {
    let verdicts = &outcome
        .mode(mode)
        .ok_or_else(|| LipfpError::Usage(format!("internal: mode {mode} was not computed")))?
        .verdicts;
    attack_uncertified(subject, radius, (mode, verdicts), progress)
}

/// Attack the points of `subject` that `mode` did not certify (`verdicts`), at `radius`.
pub fn attack_uncertified(
    subject: &Subject,
    radius: &Radius,
    (mode, verdicts): (Mode, &[bool]),
    progress: &Progress,
) -> Result<AttackOutcome, LipfpError> {
    let start = Instant::now();
    let check = SetCheck::new(subject, radius, mode)?;
    let attacked = targets(subject, verdicts);
    let rows = centre_rows(subject, &attacked)?;
    confirm_centres(subject, &check.exec, &attacked, &rows)?;
    let eps_down = rational_to_f64_down(&check.eps);
    let search = Search {
        net: GradNet::new(&subject.net),
        reach: eps_down * (1.0 - 1e-9),
        alpha: STEP_FACTOR * eps_down / STEPS as f64,
        ball: subject.ball,
        check,
        subject,
    };
    let dim = subject.inputs.dim;
    let task = progress.task("falsifier", attacked.len() as u64);
    let witnesses: Vec<Witness> = attacked
        .par_chunks(BLOCK)
        .zip(rows.par_chunks(BLOCK * dim))
        .flat_map_iter(|(idx, x0)| {
            let w = search.block(idx, x0);
            task.add(idx.len() as u64);
            w
        })
        .collect();
    task.finish();
    Ok(AttackOutcome {
        mode,
        attacked,
        witnesses,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The re-read centres must be the points certified: the deployed logits at each equal the
/// run's (else the inputs file changed during the run).
fn confirm_centres(
    subject: &Subject,
    exec: &Executor,
    indices: &[usize],
    rows: &[f64],
) -> Result<(), LipfpError> {
    let classes = subject.net.classes();
    let logits = exec.logits(rows, subject.inputs.dim);
    for (k, &i) in indices.iter().enumerate() {
        let now = &logits[k * classes..(k + 1) * classes];
        let then = &subject.logits[i * classes..(i + 1) * classes];
        if now
            .iter()
            .zip(then)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            return Err(LipfpError::data(
                &subject.inputs.path,
                format!(
                    "input {} changed while lipfp was running (its logits differ from the certified run's)",
                    subject.first + i
                ),
            ));
        }
    }
    Ok(())
}

/// Run the falsifier for a gate, announcing the stage. The outcome is the engine's; reporters
/// take their figures from it.
pub fn falsify(
    subject: &Subject,
    radius: &Radius,
    mode: Mode,
    outcome: &CertifyOutcome,
    progress: &Progress,
) -> Result<AttackOutcome, LipfpError> {
    progress.stage("falsifier: searching the uncertified points for adversarial examples");
    attack(subject, radius, mode, outcome, progress)
}
