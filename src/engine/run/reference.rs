//! The float64 reference execution: which points it runs on, and what it measured there.
//!
//! The pre-deployment modes `hybrid`, `measured` and `float64-centre` read it at every point. At
//! fixed radii (the certified radius and a curve's radii), `best` reads it only where the
//! standard certificate does not decide the point (docs/soundness.md "Lazy float64 reference"),
//! so the pass runs on those points alone and every figure at those radii stays the one the full
//! pass gives; a curve on the automatic grid runs it at the further points its grid needs.

use super::certify::point_radii;
use crate::bounds::ball::Cover;
use crate::bounds::certify::Decided;
use crate::bounds::certify::{Centre, Certifier, HiCentre, Mode, ModelBounds};
use crate::policy::{CurveGrid, Policy, Radius, Target};

/// Which points the float64 reference execution runs on.
#[derive(Clone, Debug, PartialEq)]
pub enum ReferencePlan {
    /// None: no mode asked for reads it.
    None,
    /// Every point; `products`: with the componentwise products only `best` reads.
    Every {
        /// Measure the componentwise products `|| |W_l| |c_{l-1}| ||` and `|W_L| |c_{L-1}|`.
        products: bool,
    },
    /// The points `best` cannot decide from the standard certificate at one of these radii
    /// (the only mode asked for that reads the reference is `best`, at fixed radii).
    Undecided(Vec<Radius>),
}

impl ReferencePlan {
    /// Where the gates of `policy` on target `t` need the float64 reference execution.
    pub fn for_target(policy: &Policy, t: &Target) -> ReferencePlan {
        (policy.gates.iter())
            .filter(|g| g.target == *t)
            .map(|g| ReferencePlan::for_run(&g.modes, &g.radius, g.curve.as_ref()))
            .fold(ReferencePlan::None, ReferencePlan::union)
    }

    /// The plan for certificates in `modes` at `radius`, with a robustness curve over them on
    /// `curve`'s grid. A curve over `best` with given radii needs the reference only where the
    /// standard certificate leaves one of them undecided (its counts at the grid radii are then
    /// exact; its per-point radii are sound lower bounds, docs/soundness.md "Lazy float64
    /// reference"); the automatic grid is known only after the thresholds, so the pass plans the
    /// certified radius and the curve runs the reference at the points its grid then needs.
    pub fn for_run(modes: &[Mode], radius: &Radius, curve: Option<&CurveGrid>) -> ReferencePlan {
        let best = modes.iter().any(|m| m.certifies_as() == Mode::Best);
        if modes
            .iter()
            .any(|&m| m.needs_reference() && m.certifies_as() != Mode::Best)
        {
            return ReferencePlan::Every { products: best };
        }
        if !best {
            return ReferencePlan::None;
        }
        match curve {
            None => ReferencePlan::Undecided(vec![radius.clone()]),
            Some(CurveGrid::Given(grid)) => {
                let mut radii = vec![radius.clone()];
                radii.extend(grid.iter().filter(|r| *r != radius).cloned());
                ReferencePlan::Undecided(radii)
            }
            // the automatic grid is chosen after the thresholds; the curve then runs the
            // reference where its radii need it (best_curve)
            Some(CurveGrid::Auto) => ReferencePlan::Undecided(vec![radius.clone()]),
        }
    }

    /// The plan covering the points of both plans.
    pub fn union(self, other: ReferencePlan) -> ReferencePlan {
        use ReferencePlan::{Every, Undecided};
        match (self, other) {
            (ReferencePlan::None, p) | (p, ReferencePlan::None) => p,
            (Every { products: a }, Every { products: b }) => Every { products: a || b },
            // `Undecided` is `best`'s plan: the products are needed
            (Every { .. }, Undecided(_)) | (Undecided(_), Every { .. }) => Every { products: true },
            (Undecided(mut a), Undecided(b)) => {
                for r in b {
                    if !a.contains(&r) {
                        a.push(r);
                    }
                }
                Undecided(a)
            }
        }
    }

    /// Whether the reference runs at all.
    pub fn runs(&self) -> bool {
        *self != ReferencePlan::None
    }
}

/// Per-point measurements of the float64 reference execution, at the points it ran on.
#[derive(Clone, Debug)]
pub struct ReferenceData {
    /// Per point of the subject, its row in the arrays below (`None`: not run there).
    pub slot: Vec<Option<usize>>,
    /// Per point of the subject where it did not run, `best`'s verdict as decided then (when
    /// decided at one radius).
    pub decided: Vec<Option<Decided>>,
    /// Float64 logits, row-major `[rows, classes]`.
    pub logits: Vec<f64>,
    /// Upper bounds on `||z_hi_l||_2`, row-major `[rows, L-1]`.
    pub norms: Vec<f64>,
    /// Upper bounds on `||z_hat_{L-1} - z_hi_{L-1}||_2` per row.
    pub gaps: Vec<f64>,
    /// Upper bounds on `|| |W_l| |c_{l-1}| ||_2`, row-major `[rows, L]` (NaN for affine steps;
    /// [`crate::bounds::certify::componentwise`]).
    pub abs_norms: Vec<f64>,
    /// Upper bounds on `|W_L| |c_{L-1}|`, row-major `[rows, classes]`.
    pub abs_last: Vec<f64>,
    /// Model bounds with float64 constants.
    pub bounds: Option<ModelBounds>,
    /// Seconds spent on the reference pass.
    pub seconds: f64,
}

impl ReferenceData {
    /// Whether the componentwise products were measured (`best` reads them).
    pub fn has_products(&self) -> bool {
        self.abs_last.len() == self.logits.len()
    }

    /// Points the reference ran on.
    pub fn points(&self) -> usize {
        self.gaps.len()
    }

    /// What the reference measured at point `i` (`None` when it did not run there).
    pub fn at(&self, i: usize, classes: usize, depth: usize) -> Option<HiCentre<'_>> {
        let k = (*self.slot.get(i)?)?;
        let hidden = depth - 1;
        let (abs_norms, abs_last): (&[f64], &[f64]) = if self.has_products() {
            (
                &self.abs_norms[k * depth..(k + 1) * depth],
                &self.abs_last[k * classes..(k + 1) * classes],
            )
        } else {
            (&[], &[])
        };
        Some(HiCentre {
            logits: &self.logits[k * classes..(k + 1) * classes],
            gap: self.gaps[k],
            norms: &self.norms[k * hidden..(k + 1) * hidden],
            abs_norms,
            abs_last,
        })
    }
}

/// The radii of one fixed-radius run, per point of the subject.
pub(super) enum PointRadii {
    Uniform(f64),
    PerPoint(Vec<f64>),
}

/// Whether the reference pass runs at a point.
pub(super) enum AtPoint {
    /// It runs.
    Run,
    /// It does not; with `best`'s verdict when decided at the run's one radius.
    Skip(Option<Decided>),
}

/// Which points of a subject the reference pass runs on, decided per point from its
/// deployment logits and `||x||` as the forward passes produce them.
pub(super) enum Selection<'a> {
    /// Every point (`true`: with the componentwise products).
    Every(bool),
    /// No point (none asked for, or the model-level bounds failed: every mode refuses every
    /// point).
    Nothing,
    /// The points where `best` needs the reference at one of the radii (sets covered by
    /// [`Cover`]).
    Undecided(Certifier<'a>, Cover, Vec<PointRadii>),
}

impl<'a> Selection<'a> {
    /// The selection of `plan` over points `first..first + n` of a test set of `total` (a
    /// per-instance radii file that cannot be read selects every point: its gate reports
    /// the error).
    pub(super) fn new(
        plan: &ReferencePlan,
        (bounds, cover): (Option<&'a ModelBounds>, Cover),
        (first, n, total): (usize, usize, usize),
    ) -> Selection<'a> {
        let radii = match plan {
            ReferencePlan::None => return Selection::Nothing,
            ReferencePlan::Every { products } => return Selection::Every(*products),
            ReferencePlan::Undecided(radii) => radii,
        };
        let Some(fmt) = bounds else {
            return Selection::Nothing;
        };
        let mut per_run = Vec::with_capacity(radii.len());
        for r in radii {
            per_run.push(match r {
                Radius::Uniform { up, .. } => PointRadii::Uniform(*up),
                Radius::PerInstance(p) => match point_radii(p, first, n, total) {
                    Ok(v) => PointRadii::PerPoint(v),
                    Err(_) => return Selection::Every(true),
                },
            });
        }
        Selection::Undecided(Certifier { fmt, hi: None }, cover, per_run)
    }

    /// Whether the componentwise products are measured at the selected points.
    pub(super) fn products(&self) -> bool {
        !matches!(self, Selection::Every(false))
    }

    /// Whether the reference runs at point `i` of the subject, with deployment `logits` and
    /// `x_norm >= ||x||`.
    pub(super) fn at(&self, i: usize, logits: &[f64], x_norm: f64) -> AtPoint {
        match self {
            Selection::Every(_) => AtPoint::Run,
            Selection::Nothing => AtPoint::Skip(None),
            Selection::Undecided(certifier, cover, radii) => {
                let c = Centre {
                    logits,
                    x_norm,
                    hi: None,
                    decided: None,
                    local: None,
                    cover: *cover,
                };
                let mut decided = None;
                for r in radii {
                    let eps = match r {
                        PointRadii::Uniform(e) => *e,
                        PointRadii::PerPoint(v) => v.get(i).copied().unwrap_or(f64::INFINITY),
                    };
                    let Some(verdict) = certifier.best_without_reference(&c, eps) else {
                        return AtPoint::Run;
                    };
                    decided = (radii.len() == 1).then_some(Decided { eps, verdict });
                }
                AtPoint::Skip(decided)
            }
        }
    }
}
