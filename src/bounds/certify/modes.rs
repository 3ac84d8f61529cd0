//! Per-instance certificates of every mode.
//!
//! Each sound certificate has the shape of Theorem "Floating-point robustness certificate":
//! for every competing class `j`,
//! `c_j - L_{ij} eps - b_j > 0`, where `c_j` is a sound **lower bound on the real centre margin**
//! `m_{ij}(x)` and `b_j` a sound **upper bound on the ball deviation** `|m_hat_{ij}(x') - m_{ij}(x')|`
//! for all `x'` in the ball (overflow excluded by the same chain). Then for every `x'`:
//! `m_hat(x') >= m(x') - b_j >= m(x) - L eps - b_j >= c_j - L eps - b_j > g`, with `g` the
//! classifier head's margin ([`crate::bounds::certify::head`]; 0 for logits), so the head's output ranks
//! the same class first.
//! The two bounds are independent, so any valid centre variant combines with any valid ball
//! variant (the paper's closing remark of sec. 7; `docs/soundness.md`):
//!
//! | centre variant `c_j` | source |
//! |---|---|
//! | standard: `m_hat(x) - E_ctr` | Lemma "Final-layer pairwise deviation" at `x`, deterministic radii, `eps = 0` |
//! | hybrid: `m_hat(x) - E_ctr^hybrid` | Lemma "Hybrid deviation bound" |
//! | measured: `m_hat(x) - E_ctr^meas` | Theorem "Measured-Radii certificate" |
//! | float64: `m_hi(x) - E_ctr^hi` | the same Lemma applied to the float64 execution with float64 constants |
//!
//! | ball variant `b_j` | source |
//! |---|---|
//! | standard: `E_ball` | deterministic radii from `||x|| + eps` |
//! | measured: `E_ball^meas` | Lemma "Measured radii" |

use crate::arith::sound::{add_up, mul_up, sub_down};

use super::centre::{Centre, HiCentre, PointResult};
use super::componentwise;
use super::local_certificate::LocalSource;
use super::mode::Mode;
use super::model_bounds::{margin_lower, predicted_class, ModelBounds, PairBounds, Verdict};
use super::quantities::final_pair_bounds;
use super::refusal::Refusal;

/// The model-level bounds a certificate reads: the deployment format's and, for the
/// pre-deployment modes, float64's.
#[derive(Clone, Copy, Debug)]
pub struct Certifier<'a> {
    /// Bounds in the deployment format.
    pub fmt: &'a ModelBounds,
    /// Bounds with float64 constants (for the float64 reference execution).
    pub hi: Option<&'a ModelBounds>,
}

/// `E = alpha^{ij} D + beta^{ij}(r)` (Lemma "Final-layer pairwise deviation").
fn pair_error(p: &PairBounds, d: f64, r: f64) -> f64 {
    final_pair_bounds(p.alpha, d, p.kappa_abs, r, p.beta_const)
}

/// A centre-deviation source: lower bound `c_j = margin_j - E(d, r)` (componentwise, with
/// `cw = v`: `E = componentwise::pair_error(.., d, r)`, `r` then bounding `||z_hat - c||`).
#[derive(Clone, Copy)]
struct CentreBound<'a> {
    /// The componentwise products `v = |W_L| |c_{L-1}|`, for a componentwise source.
    cw: Option<&'a [f64]>,
    /// Logits whose margin is bounded (deployed or float64).
    logits: &'a [f64],
    /// Pair table of the execution those logits came from.
    bounds: &'a ModelBounds,
    d: f64,
    r: f64,
}

impl CentreBound<'_> {
    fn lower(&self, i: usize, j: usize) -> f64 {
        let p = self.bounds.pair(i, j);
        let e = match self.cw {
            Some(v) => last_layer_cw_error(self.bounds, p, v, (i, j), self.d, self.r),
            None => pair_error(p, self.d, self.r),
        };
        sub_down(margin_lower(self.logits, i, j), e)
    }
}

/// A ball-deviation source: `b_j = E(d, r)` in the deployment format (componentwise with
/// `cw`, as for [`CentreBound`]).
#[derive(Clone, Copy)]
pub(super) struct BallBound<'a> {
    pub(super) cw: Option<&'a [f64]>,
    pub(super) d: f64,
    pub(super) r: f64,
}

impl BallBound<'_> {
    pub(super) fn error(&self, fmt: &ModelBounds, i: usize, j: usize) -> f64 {
        let p = fmt.pair(i, j);
        match self.cw {
            Some(v) => last_layer_cw_error(fmt, p, v, (i, j), self.d, self.r),
            None => pair_error(p, self.d, self.r),
        }
    }
}

/// [`componentwise::pair_error`] with the output layer's `rel_w` (infinite when unknown).
fn last_layer_cw_error(
    fmt: &ModelBounds,
    p: &PairBounds,
    v: &[f64],
    ij: (usize, usize),
    d: f64,
    rho: f64,
) -> f64 {
    let rel_w = fmt
        .layers
        .last()
        .and_then(|l| l.rounding)
        .map(|r| r.rel_w)
        .unwrap_or(f64::INFINITY);
    componentwise::pair_error(p, rel_w, v, ij, d, rho)
}

/// The float64 reference execution at a point, for the pre-deployment modes: its model-level
/// bounds, its measurements at the centre, and its deviation profile `(r_l, D^hi_l(x, 0))`.
type Reference<'a> = (
    &'a ModelBounds,
    HiCentre<'a>,
    Result<(Vec<f64>, Vec<f64>), Refusal>,
);

/// The centre and ball bounds a certificate combines (each one's bound or why it could not be
/// computed).
type GatheredSources<'s, 'a> = (
    &'s [Result<CentreBound<'a>, Refusal>],
    &'s [Result<BallBound<'a>, Refusal>],
);

/// The centre and ball bounds gathered for one point, per source (each one's bound or why it
/// could not be computed), in the order the sources were consulted.
struct Sources<'a> {
    centres: Vec<Result<CentreBound<'a>, Refusal>>,
    balls: Vec<Result<BallBound<'a>, Refusal>>,
}

impl Certifier<'_> {
    /// Certify one point in `mode` with radius upper bound `eps`.
    pub fn certify(&self, mode: Mode, c: &Centre<'_>, eps: f64) -> PointResult {
        let mode = mode.certifies_as();
        let Some(i) = predicted_class(c.logits) else {
            return PointResult::refused(Refusal::NonFiniteLogits);
        };
        if Some(i) == self.fmt.floor_class {
            return PointResult::refused(Refusal::Margin);
        }
        // the Lipschitz certificates check the l2 ball covering the set; local bounds and the
        // forward passes' decisions are keyed by the set's own radius
        let r = c.cover.l2_radius(eps);
        if mode == Mode::Real {
            return self.real(c, i, r);
        }
        let fmt = self.fmt;
        if fmt.vacuous.is_some() {
            return PointResult::refused(Refusal::Model);
        }
        if mode == Mode::Local {
            return self.local(c, i, eps);
        }
        if mode == Mode::Best && c.hi.is_none() {
            return self.best_skipped(c, i, eps);
        }
        let deterministic = matches!(mode, Mode::Standard | Mode::Hybrid | Mode::Best);

        // deterministic chains (sec. 4-5): ball from ||x|| + eps, centre from ||x||
        let std_ball = deterministic.then(|| fmt.hidden_chain(add_up(c.x_norm, r)));
        let std_ctr = deterministic.then(|| fmt.hidden_chain(c.x_norm));

        // float64 reference: deviation profile D^hi_l(x, 0) with float64 constants
        let reference = if mode.needs_reference() {
            match (self.hi, c.hi) {
                // `best` reads the componentwise products, measured only where it is asked for
                (Some(_), Some(h)) if mode == Mode::Best && h.abs_last.is_empty() => {
                    return PointResult::refused(Refusal::NoReference)
                }
                (Some(hb), Some(h)) => Some((hb, h, hb.deviation_profile(c.x_norm))),
                (None, _) => return PointResult::refused(Refusal::Model),
                (Some(_), None) => return PointResult::refused(Refusal::NoReference),
            }
        } else {
            None
        };

        let mut sources = Sources {
            centres: Vec::with_capacity(4),
            balls: Vec::with_capacity(2),
        };
        self.deterministic_sources(mode, c, std_ctr, std_ball, &mut sources);
        if let Some(reference) = reference {
            if let Err(why) = self.reference_sources(mode, c, r, std_ctr, reference, &mut sources) {
                return PointResult::refused(why);
            }
        }
        let local = (mode == Mode::Best)
            .then(|| self.local_source(c, eps))
            .flatten();
        self.combine(c, i, r, (&sources.centres, &sources.balls), local)
    }

    /// `best`'s verdict at centre `c` (whose `hi` and `decided` are not read) and radius `eps`
    /// when it needs no float64 reference: where the standard certificate decides the point
    /// (`Certifier::standard_decision`), or every mode refuses it before any bound
    /// (non-finite logits, a vacuous model). `None`: the reference is needed.
    pub fn best_without_reference(&self, c: &Centre<'_>, eps: f64) -> Option<Verdict> {
        let Some(i) = predicted_class(c.logits) else {
            return Some(Err(Refusal::NonFiniteLogits));
        };
        if Some(i) == self.fmt.floor_class {
            return Some(Err(Refusal::Margin));
        }
        if self.fmt.vacuous.is_some() {
            return Some(Err(Refusal::Model));
        }
        self.standard_decision(c, i, c.cover.l2_radius(eps))
    }

    /// `best` at a point (predicted class `i`) where the float64 reference did not run: the
    /// verdict the forward passes decided at this radius, else the standard certificate's
    /// decision, without a slack or degradation; refused (`no_reference`) where the point
    /// needs the reference's sources: never certified without them.
    fn best_skipped(&self, c: &Centre<'_>, i: usize, eps: f64) -> PointResult {
        let verdict = match c.decided {
            Some(d) if d.eps.to_bits() == eps.to_bits() => Some(d.verdict),
            _ => self.standard_decision(c, i, c.cover.l2_radius(eps)),
        };
        // with local bounds at this radius, `best` certifies where `local` does (it takes the
        // local source beside the others, docs/soundness.md "Local bounds")
        let verdict = match verdict {
            Some(Err(_)) if self.local(c, i, eps).verdict.is_ok() => Some(Ok(())),
            v => v,
        };
        match verdict {
            Some(verdict) => PointResult {
                verdict,
                slack: None,
                degradation: None,
            },
            None => PointResult::refused(Refusal::NoReference),
        }
    }

    /// `best`'s verdict at a point the standard certificate decides (docs/soundness.md "Lazy
    /// float64 reference"): certified when the standard certificate certifies (`best` takes
    /// every standard source, so it certifies too), refused for the margin when [`refuted`]
    /// shows that no sound centre bound can certify predicted class `i` at `eps` (the l2 radius of
    /// the cover). `None` when the point needs the reference's sources, or when a standard chain
    /// overflowed.
    fn standard_decision(&self, c: &Centre<'_>, i: usize, eps: f64) -> Option<Verdict> {
        let std_ball = self.fmt.hidden_chain(add_up(c.x_norm, eps));
        let std_ctr = self.fmt.hidden_chain(c.x_norm);
        let (Ok((r_ctr, d_ctr)), Ok((r_ball, d_ball))) = (std_ctr, std_ball) else {
            return None;
        };
        let centre = CentreBound {
            cw: None,
            logits: c.logits,
            bounds: self.fmt,
            d: d_ctr,
            r: r_ctr,
        };
        let ball = BallBound {
            cw: None,
            d: d_ball,
            r: r_ball,
        };
        if self
            .combine(c, i, eps, (&[Ok(centre)], &[Ok(ball)]), None)
            .verdict
            .is_ok()
        {
            Some(Ok(()))
        } else if refuted(self.fmt, c.logits, i, eps, (d_ctr, r_ctr)) {
            Some(Err(Refusal::Margin))
        } else {
            None
        }
    }

    /// The deterministic sources (sec. 4-5): the standard centre `m_hat(x) - E_ctr` (Lemma
    /// "Final-layer pairwise deviation" at `x`, deterministic radii, `eps = 0`) and the
    /// standard ball `E_ball` (deterministic radii from `||x|| + eps`), from the chains
    /// `std_ctr` and `std_ball` (`(r, D)` of the last hidden layer, or the overflow).
    fn deterministic_sources<'c>(
        &'c self,
        mode: Mode,
        c: &Centre<'c>,
        std_ctr: Option<Result<(f64, f64), Refusal>>,
        std_ball: Option<Result<(f64, f64), Refusal>>,
        out: &mut Sources<'c>,
    ) {
        let fmt = self.fmt;
        if matches!(mode, Mode::Standard | Mode::Best) {
            if let Some(ctr) = std_ctr {
                out.centres.push(ctr.map(|(r, d)| CentreBound {
                    cw: None,
                    logits: c.logits,
                    bounds: fmt,
                    d,
                    r,
                }));
            }
        }
        if matches!(mode, Mode::Standard | Mode::Hybrid | Mode::Best) {
            if let Some(ball) = std_ball {
                out.balls
                    .push(ball.map(|(r, d)| BallBound { cw: None, d, r }));
            }
        }
    }

    /// The sources built on the float64 reference execution (pre-deployment modes): the
    /// hybrid centre `m_hat(x) - E_ctr^hybrid` (Lemma "Hybrid deviation bound"), the measured
    /// ball `E_ball^meas` (Lemma "Measured radii"), the measured centre `m_hat(x) - E_ctr^meas`
    /// (Theorem "Measured-Radii certificate") and the float64 centre `m_hi(x) - E_ctr^hi`.
    /// `Err` refuses the point: the reference's profile overflowed (outside `best`, which
    /// keeps its other sources) or could not be computed.
    fn reference_sources<'c>(
        &'c self,
        mode: Mode,
        c: &Centre<'c>,
        eps: f64,
        std_ctr: Option<Result<(f64, f64), Refusal>>,
        (hb, h, profile): Reference<'c>,
        out: &mut Sources<'c>,
    ) -> Result<(), Refusal> {
        let (det_radii, dhi) = match profile {
            Err(Refusal::Overflow(l)) => {
                if mode != Mode::Best {
                    return Err(Refusal::ReferenceOverflow(l));
                }
                out.centres.push(Err(Refusal::ReferenceOverflow(l)));
                return Ok(());
            }
            Err(e) => return Err(e),
            Ok(p) => p,
        };
        let fmt = self.fmt;
        let depth = fmt.layers.len();
        let d_hybrid = add_up(h.gap, dhi[depth - 1]);
        // hybrid centre: deterministic centre radius; overflow at x from the centre chain
        if matches!(mode, Mode::Hybrid | Mode::Best) {
            if let Some(ctr) = std_ctr {
                out.centres.push(ctr.map(|(r, _)| CentreBound {
                    cw: None,
                    logits: c.logits,
                    bounds: fmt,
                    d: d_hybrid,
                    r,
                }));
            }
        }
        let measured = |e: f64| measured_radii(fmt, c.x_norm, h.norms, &dhi, e);
        // whether the measured radii exclude overflow over the ball and at the centre
        let (mut ball_ok, mut centre_ok) = (false, false);
        if matches!(mode, Mode::Measured | Mode::Float64Centre | Mode::Best) {
            let r_ball = measured(eps);
            let ball = fmt.chain_with_radii(&r_ball);
            ball_ok = ball.is_ok();
            out.balls.push(ball.map(|d| BallBound {
                cw: None,
                d,
                r: r_ball[depth - 1],
            }));
        }
        if matches!(mode, Mode::Measured | Mode::Best) {
            let r_ctr = measured(0.0);
            let centre = fmt.chain_with_radii(&r_ctr);
            centre_ok = centre.is_ok();
            out.centres.push(centre.map(|_| CentreBound {
                cw: None,
                logits: c.logits,
                bounds: fmt,
                d: d_hybrid,
                r: r_ctr[depth - 1],
            }));
        }
        if matches!(mode, Mode::Float64Centre | Mode::Best) {
            if predicted_class(h.logits).is_some() {
                out.centres.push(Ok(CentreBound {
                    cw: None,
                    logits: h.logits,
                    bounds: hb,
                    d: dhi[depth - 1],
                    r: det_radii[depth - 1],
                }));
            } else {
                out.centres.push(Err(Refusal::NonFiniteLogits));
            }
        }
        if mode == Mode::Best {
            componentwise_sources(fmt, c, &h, (&dhi, eps), (ball_ok, centre_ok), out);
        }
        Ok(())
    }

    /// Per competing class: best centre bound, smallest ball bound; certified when every slack
    /// is positive.
    fn combine(
        &self,
        c: &Centre<'_>,
        i: usize,
        eps: f64,
        (centres, balls): GatheredSources<'_, '_>,
        local: Option<LocalSource<'_>>,
    ) -> PointResult {
        let ok_centres: Vec<&CentreBound<'_>> =
            centres.iter().filter_map(|x| x.as_ref().ok()).collect();
        let ok_balls: Vec<&BallBound<'_>> = balls.iter().filter_map(|x| x.as_ref().ok()).collect();
        if ok_balls.is_empty() {
            return PointResult::refused(first_err_ball(balls));
        }
        if ok_centres.is_empty() {
            return PointResult::refused(first_err_centre(centres));
        }
        let fmt = self.fmt;
        let mut slack = f64::INFINITY;
        let (mut deg, mut leps) = (0.0, 0.0);
        for j in (0..fmt.classes).filter(|&j| j != i) {
            let p = fmt.pair(i, j);
            let lower = ok_centres
                .iter()
                .map(|cb| cb.lower(i, j))
                .fold(f64::NEG_INFINITY, f64::max);
            let ball = ok_balls
                .iter()
                .map(|b| b.error(fmt, i, j))
                .fold(f64::INFINITY, f64::min);
            let l_eps = mul_up(p.lip, eps);
            // a lower bound on the deployed margin over the ball: the real one's minus the ball
            // deviation, or the local bound on the deployed margin itself
            let mut deployed = sub_down(sub_down(lower, l_eps), ball);
            if let Some(l) = &local {
                deployed = deployed.max(l.lower.get(j).copied().unwrap_or(f64::NEG_INFINITY));
            }
            let s = sub_down(deployed, fmt.head_margin);
            slack = nan_safe_min(slack, s);
            deg += (c.logits[i] - c.logits[j]) - lower + ball;
            leps += l_eps;
        }
        PointResult {
            verdict: verdict_of(slack),
            slack: Some(slack),
            degradation: Some((deg, leps)),
        }
    }

    /// Classical real-arithmetic check `m_hat_{ij}(x) > L_{ij} eps` for every `j != i`.
    /// **Unsound** for floating-point execution (paper sec. 2.3): the ceiling and the baseline.
    fn real(&self, c: &Centre<'_>, i: usize, eps: f64) -> PointResult {
        let fmt = self.fmt;
        let mut slack = f64::INFINITY;
        let mut leps = 0.0;
        for j in (0..fmt.classes).filter(|&j| j != i) {
            let l_eps = mul_up(fmt.pair(i, j).lip, eps);
            let s = sub_down(margin_lower(c.logits, i, j), l_eps);
            slack = nan_safe_min(slack, s);
            leps += l_eps;
        }
        PointResult {
            verdict: verdict_of(slack),
            slack: Some(slack),
            degradation: Some((0.0, leps)),
        }
    }
}

/// Certified exactly when the slack is positive (strictly: the theorems need a strict margin; a
/// NaN slack refuses).
pub(super) fn verdict_of(slack: f64) -> Verdict {
    if slack > 0.0 {
        Ok(())
    } else {
        Err(Refusal::Margin)
    }
}

/// The smaller slack, NaN when either is (`f64::min` would drop a NaN): a class pair whose
/// slack is NaN leaves the point uncertified.
pub(super) fn nan_safe_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Whether no sound certificate can hold for predicted class `i` at radius `eps` (beyond the
/// paper; docs/soundness.md "Lazy float64 reference"): for some `j`,
/// `m_hat_ij(x) + E_ctr_j - L_ij eps - g <= 0` rounded up, with `E_ctr_j` the standard centre
/// bound from the centre chain's `(D, r)` = `(d, r)`. Every sound centre source is a lower
/// bound on the real margin `m_ij(x) <= m_hat_ij(x) + E_ctr_j` and every ball bound is
/// nonnegative, so every certificate's slack for `j` is at most this.
pub fn refuted(fmt: &ModelBounds, logits: &[f64], i: usize, eps: f64, (d, r): (f64, f64)) -> bool {
    (0..fmt.classes).filter(|&j| j != i).any(|j| {
        let p = fmt.pair(i, j);
        let real_margin_up = add_up(add_up(logits[i], -logits[j]), pair_error(p, d, r));
        let upper = add_up(
            add_up(real_margin_up, -mul_up(p.lip, eps)),
            -fmt.head_margin,
        );
        upper <= 0.0
    })
}

/// Measured radii `r^meas_l(x, e) = ||z_hi_l|| + prod_{k<=l} ||W_k|| e + D^hi_l`, one per
/// layer (Lemma "Measured radii"): `||z_hi_0||` is `||x||` (`x_norm`), the others the float64
/// hidden-layer norms `hi_norms`; `dhi` is the float64 deviation profile `D^hi_l(x, 0)`.
fn measured_radii(
    fmt: &ModelBounds,
    x_norm: f64,
    hi_norms: &[f64],
    dhi: &[f64],
    e: f64,
) -> Vec<f64> {
    (0..fmt.layers.len())
        .map(|l| {
            let norm = if l == 0 { x_norm } else { hi_norms[l - 1] };
            add_up(add_up(norm, mul_up(fmt.lip_prefix[l], e)), dhi[l])
        })
        .collect()
}

/// The componentwise sources of `best` (docs/soundness.md "Componentwise bounds"): the ball
/// from [`componentwise::chain`] and the centre `m_hat(x) - E` with `d = gap + D^hi_{L-1}` and
/// `||z_hat_{L-1}(x) - c_{L-1}|| <= gap`, each only where the measured radii exclude overflow
/// over the ball (`ball_ok`) or at the centre (`centre_ok`).
fn componentwise_sources<'c>(
    fmt: &'c ModelBounds,
    c: &Centre<'c>,
    h: &HiCentre<'c>,
    (dhi, eps): (&[f64], f64),
    (ball_ok, centre_ok): (bool, bool),
    out: &mut Sources<'c>,
) {
    if ball_ok {
        let (d, rho) = componentwise::chain(fmt, c.x_norm, h, dhi, eps);
        out.balls.push(Ok(BallBound {
            cw: Some(h.abs_last),
            d,
            r: rho,
        }));
    }
    if centre_ok {
        let depth = fmt.layers.len();
        out.centres.push(Ok(CentreBound {
            cw: Some(h.abs_last),
            logits: c.logits,
            bounds: fmt,
            d: add_up(h.gap, dhi[depth - 1]),
            r: h.gap,
        }));
    }
}

fn first_err_ball(v: &[Result<BallBound<'_>, Refusal>]) -> Refusal {
    v.iter()
        .find_map(|x| x.as_ref().err().copied())
        .unwrap_or(Refusal::Model)
}

fn first_err_centre(v: &[Result<CentreBound<'_>, Refusal>]) -> Refusal {
    v.iter()
        .find_map(|x| x.as_ref().err().copied())
        .unwrap_or(Refusal::Model)
}

#[cfg(test)]
mod tests;
