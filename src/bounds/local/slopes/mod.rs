//! Optimised lower slopes for the final margins (alpha-CROWN, Xu et al. 2021): every lower line
//! `a z <= max(z, 0)` with `a` in `[0, 1]` is valid, so the slopes of each margin's unstable units
//! may be chosen to maximise that margin's bound. The search runs in plain float64 (projected
//! gradient ascent with Adam) on the real network's relaxation; only its result, slopes in
//! `[0, 1]`, enters the rigorous substitution ([`super::backward::lower_bounds`]), so the search's
//! own rounding cannot make a bound unsound (docs/soundness.md "Local bounds", L5).
//!
//! For fixed slopes and a fixed sign pattern the bound is
//! `B = cst + Lambda_1 (W_1 x0 + b_1) - eps ||W_1^T Lambda_1^T||`, a minimum over the ball of a
//! linear function of `x`; its derivative in the slope `a_kj` of hidden unit `j` of layer `k` is
//! `mu_kj v_kj`, where `mu_k` is the row's coefficient over `h_k` and `v_k` the value of `z_k`
//! in the relaxed network (lines in place of ReLUs) at the minimiser
//! `x* = x0 - eps W_1^T Lambda_1^T / ||W_1^T Lambda_1^T||`: one forward pass per step.
//!
//! In a subdomain of branch and bound, the split constraints' multipliers `beta >= 0`
//! (beta-CROWN, Wang et al. 2021) are searched with the slopes: the row's coefficient on a split
//! unit's pre-activation moves by `-s beta` (`s = 1` active, `-1` inactive), so the bound's
//! derivative in `beta_kj` is `-s v_kj`. Only the multipliers found enter the rigorous
//! substitution, which checks their sign ([`super::backward`]).

use std::cmp::Ordering;

use ndarray::{Array1, Array2, ArrayView1};

use super::local_net::LocalNet;
use super::relax::UnitRelaxation;
use super::split::Splits;
pub use multipliers::Multipliers;
pub(in crate::bounds::local) use relaxed::Reach;
use relaxed::{Block, Lines};
pub use stored::StoredMultipliers;
pub use unit_slopes::UnitSlopes;

/// Adam's step size on the slopes.
const STEP: f64 = 0.1;
/// Adam's decay rates of the first and second moments.
const DECAY: (f64, f64) = (0.9, 0.999);

/// One search of [`search_many`]: a block of rows, where it starts and when it stops.
pub(super) struct Problem<'a> {
    /// The hidden layers' relaxations (the rows are over the outputs of the layer above the
    /// last).
    pub relax: &'a [Vec<UnitRelaxation>],
    /// The rows.
    pub c: &'a Array2<f64>,
    /// The centre.
    pub x0: ArrayView1<'a, f64>,
    /// The set around it.
    pub reach: Reach<'a>,
    /// The rows' sound CROWN bounds.
    pub start: &'a [f64],
    /// The value the rows must exceed.
    pub target: f64,
    /// Steps at most.
    pub iterations: usize,
    /// The split units.
    pub splits: &'a Splits,
    /// Where its shapes match, the point to start from instead of CROWN's slopes and zero
    /// multipliers.
    pub from: Option<&'a Multipliers>,
}

/// Per problem, per hidden layer, slopes (and multipliers of its `splits`) for every row of its
/// `c` (rows x units; only entries of unstable units where the row's coefficient is nonnegative
/// are read), found by up to `iterations` steps of projected gradient ascent from CROWN's
/// adaptive slopes: the best slopes seen per row. `start` are the rows' sound CROWN bounds and
/// `target` the value they must exceed; `from`, where its shapes match, the point the search
/// starts from instead of CROWN's slopes and zero multipliers (its values are projected onto
/// `[0, 1]` and `[0, inf)`). A search stops early once every row is predicted above the target,
/// and gives up (`None`) once a row's progress, extrapolated generously, cannot reach it (never
/// for an infinite target: then it takes every step); the prediction of a sound bound is the
/// search's own bound less its excess over the sound one at CROWN's slopes (the deployment's
/// rounding).
///
/// The searches run in lockstep: at each step those still running are one batch of the relaxed
/// passes ([`relaxed`]), at every layer one product for all of them. A search's result depends
/// on the problems searched with it (the products' order of summation), never on the thread
/// count.
pub(super) fn search_many(net: &LocalNet, problems: &[Problem<'_>]) -> Vec<Option<Multipliers>> {
    let mut states: Vec<Option<State>> = problems.iter().map(|p| State::new(net, p)).collect();
    let mut found: Vec<Option<Multipliers>> = vec![None; problems.len()];
    let steps = problems.iter().map(|p| p.iterations).max().unwrap_or(0);
    for step in 1..=steps {
        let running: Vec<usize> = (0..problems.len())
            .filter(|&i| states[i].is_some() && step <= problems[i].iterations)
            .collect();
        if running.is_empty() {
            break;
        }
        let blocks: Vec<Block> = (running.iter())
            .filter_map(|&i| states[i].as_ref().map(|s| s.block(&problems[i])))
            .collect();
        let passes = relaxed::backward(net, &blocks);
        drop(blocks);
        let mut climbing = Vec::with_capacity(running.len());
        for (&i, pass) in running.iter().zip(passes) {
            let Some(state) = states[i].as_mut() else {
                continue;
            };
            match state.record(&pass, &problems[i], step) {
                Next::Climb => climbing.push((i, pass)),
                Next::Stop(result) => {
                    found[i] = result;
                    states[i] = None;
                }
            }
        }
        let blocks: Vec<Block> = (climbing.iter())
            .filter_map(|(i, _)| states[*i].as_ref().map(|s| s.block(&problems[*i])))
            .collect();
        let passes: Vec<&relaxed::Pass> = climbing.iter().map(|(_, p)| p).collect();
        let grads = relaxed::gradients(net, &blocks, &passes);
        drop(blocks);
        for ((i, _), (g, beta_g)) in climbing.iter().zip(grads) {
            if let Some(state) = states[*i].as_mut() {
                state.ascend((&g, &beta_g), problems[*i].splits, step);
            }
        }
    }
    for (f, state) in found.iter_mut().zip(states) {
        if let Some(state) = state {
            *f = Some(state.best);
        }
    }
    found
}

/// What a search does after a step's pass.
enum Next {
    /// Takes another step.
    Climb,
    /// Stops with this result.
    Stop(Option<Multipliers>),
}

/// One search's point, its Adam moments and the best slopes seen.
struct State {
    lines: Vec<Lines>,
    centre: Array1<f64>,
    slopes: Vec<Array2<f64>>,
    betas: Vec<Array2<f64>>,
    moments: Vec<(Array2<f64>, Array2<f64>)>,
    beta_moments: Vec<(Array2<f64>, Array2<f64>)>,
    best: Multipliers,
    best_bound: Vec<f64>,
    excess: Vec<f64>,
}

impl State {
    /// The start of problem `p` (`None`: a start bound is not finite, nothing to search from).
    fn new(net: &LocalNet, p: &Problem<'_>) -> Option<State> {
        let rows = p.c.nrows();
        if p.start.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut slopes: Vec<Array2<f64>> = (p.relax.iter())
            .map(|units| {
                let lower: Array1<f64> = units.iter().map(crown_slope).collect();
                let mut a = Array2::zeros((rows, units.len()));
                a.rows_mut().into_iter().for_each(|mut r| r.assign(&lower));
                a
            })
            .collect();
        let mut betas: Vec<Array2<f64>> = slopes.iter().map(|a| Array2::zeros(a.dim())).collect();
        if let Some(w) = p.from {
            let same = |a: &[Array2<f64>], b: &[Array2<f64>]| {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.dim() == y.dim())
            };
            if same(&w.slopes, &slopes) && same(&w.betas, &betas) {
                slopes = (w.slopes.iter())
                    .map(|a| a.mapv(|v| v.clamp(0.0, 1.0)))
                    .collect();
                betas = (w.betas.iter()).map(|a| a.mapv(|v| v.max(0.0))).collect();
            }
        }
        let zeros = |v: &[Array2<f64>]| -> Vec<(Array2<f64>, Array2<f64>)> {
            (v.iter())
                .map(|a| (Array2::zeros(a.dim()), Array2::zeros(a.dim())))
                .collect()
        };
        Some(State {
            lines: p.relax.iter().map(|u| Lines::of(u)).collect(),
            centre: net.layers[0].w.dot(&p.x0),
            moments: zeros(&slopes),
            beta_moments: zeros(&betas),
            best: Multipliers {
                slopes: slopes.clone(),
                betas: betas.clone(),
            },
            slopes,
            betas,
            best_bound: vec![f64::NEG_INFINITY; rows],
            excess: vec![0.0; rows],
        })
    }

    /// The passes' view of the current point.
    fn block<'s>(&'s self, p: &'s Problem<'_>) -> Block<'s> {
        Block {
            lines: &self.lines,
            c: p.c,
            centre: &self.centre,
            reach: p.reach,
            slopes: &self.slopes,
            betas: &self.betas,
            splits: p.splits,
        }
    }

    /// Keeps each row's best slopes after step `step`'s `pass`, and says whether to go on.
    fn record(&mut self, pass: &relaxed::Pass, p: &Problem<'_>, step: usize) -> Next {
        for r in 0..p.c.nrows() {
            if step == 1 {
                self.excess[r] = excess_over_sound(pass.bound[r], p.start[r]);
            }
            if pass.bound[r].partial_cmp(&self.best_bound[r]) != Some(Ordering::Greater) {
                continue;
            }
            self.best_bound[r] = pass.bound[r];
            for (b, a) in self.best.slopes.iter_mut().zip(&self.slopes) {
                b.row_mut(r).assign(&a.row(r));
            }
            for (b, a) in self.best.betas.iter_mut().zip(&self.betas) {
                b.row_mut(r).assign(&a.row(r));
            }
        }
        let predicted: Vec<f64> = (self.best_bound.iter().zip(&self.excess))
            .map(|(b, e)| predicted_sound(*b, *e))
            .collect();
        if (predicted.iter().zip(&self.excess)).all(|(q, e)| safely_above(*q, *e, p.target)) {
            return Next::Stop(Some(self.best.clone()));
        }
        let hopeless = (predicted.iter().zip(p.start))
            .any(|(q, s)| cannot_reach((*q, *s), p.target, (step, p.iterations)));
        if step >= 5 && hopeless && p.target.is_finite() {
            return Next::Stop(None);
        }
        if step == p.iterations {
            return Next::Stop(Some(self.best.clone()));
        }
        Next::Climb
    }

    /// One Adam step along the derivatives `g` (slopes) and `beta_g` (multipliers).
    fn ascend(
        &mut self,
        (g, beta_g): (&[Array2<f64>], &[Array2<f64>]),
        splits: &Splits,
        step: usize,
    ) {
        for ((a, g), (m, v)) in self.slopes.iter_mut().zip(g).zip(&mut self.moments) {
            adam_ascent(a, g, (m, v), step, 1.0);
        }
        if !splits.is_empty() {
            for ((b, g), (m, v)) in (self.betas.iter_mut().zip(beta_g)).zip(&mut self.beta_moments)
            {
                adam_ascent(b, g, (m, v), step, f64::INFINITY);
            }
        }
    }
}

/// The search's excess over the sound bound at CROWN's slopes: its own bound there (float64,
/// unrounded, without the deployment's rounding) less the sound one, at least 0. Later bounds of
/// the search less this excess predict the sound bound their slopes give ([`predicted_sound`]).
fn excess_over_sound(own: f64, sound: f64) -> f64 {
    (own - sound).max(0.0)
}

/// The predicted sound bound of the search's bound `own` with excess `excess`: `own - excess`.
/// A prediction only: the sound bound is computed afterwards by the rigorous substitution.
fn predicted_sound(own: f64, excess: f64) -> f64 {
    own - excess
}

/// Whether a row predicted at `p` is safely above `target`: by a tenth of its excess, the room
/// left for the prediction's error (the search stops when every row is).
fn safely_above(p: f64, excess: f64, target: f64) -> bool {
    p > target + 0.1 * excess
}

/// Whether a row predicted at `p` after `step` of `iterations` steps, from its sound start `s`,
/// cannot reach `target` even if it kept improving at twice its average rate so far:
/// `p + max(p - s, 0) 2 (iterations - step) / step < target` (a NaN counts as not reaching). A
/// choice of where to spend time only: giving up keeps CROWN's sound bound.
fn cannot_reach((p, s): (f64, f64), target: f64, (step, iterations): (usize, usize)) -> bool {
    let reach = 2.0 * (iterations - step) as f64 / step as f64;
    let reached = p + (p - s).max(0.0) * reach;
    matches!(reached.partial_cmp(&target), None | Some(Ordering::Less))
}

/// CROWN's adaptive lower slope of a unit (the one the plain substitution uses).
fn crown_slope(unit: &UnitRelaxation) -> f64 {
    match *unit {
        UnitRelaxation::Unstable { lower, .. } => lower,
        _ => 0.0,
    }
}

/// One Adam step of ascent on `a` along `g`, projected onto `[0, top]`.
fn adam_ascent(
    a: &mut Array2<f64>,
    g: &Array2<f64>,
    (m, v): (&mut Array2<f64>, &mut Array2<f64>),
    step: usize,
    top: f64,
) {
    let (b1, b2) = DECAY;
    let c1 = 1.0 - b1.powi(step as i32);
    let c2 = 1.0 - b2.powi(step as i32);
    ndarray::Zip::from(a)
        .and(g)
        .and(m)
        .and(v)
        .for_each(|a, &g, m, v| {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            let update = STEP * (*m / c1) / ((*v / c2).sqrt() + 1e-12);
            *a = (*a + update).clamp(0.0, top);
        });
}

mod multipliers;
mod relaxed;
mod stored;
#[cfg(test)]
mod tests;
mod unit_slopes;
