//! The layer-by-layer pass that bounds a set's hidden pre-activations
//! ([`LocalNet::hidden_over`]), and a branch-and-bound subdomain's from what it knows
//! ([`LocalNet::hidden_of`]): each layer's centre enclosure widened by the Lipschitz reach, the
//! interval over the layer below, CROWN's substitution for the units still unstable, the given
//! bounds intersected and the splits clamped.

use std::sync::Arc;

use ndarray::{Array1, Array2};

use super::backward;
use super::hidden::{HiddenBounds, Known, Refined};
use super::interval::{layer_box, point, Bounds};
use super::local_net::{LocalNet, SlopeSearch, Undecided};
use super::region::Region;
use super::relax::{relax_unit, UnitRelaxation};
use super::slopes::UnitSlopes;
use super::split::{self, Splits};
use crate::arith::sound::{add_up, mul_up, sub_down};

/// Hidden layers a bounding pass takes from earlier bounds instead of computing them.
#[derive(Clone, Copy)]
struct Reused<'a> {
    /// How many (from the input).
    layers: usize,
    /// The bounds and rounding charges they are taken from (over the same region, with at
    /// most the splits of the pass below each of those layers).
    bounds: Option<(&'a [Bounds], &'a [Vec<f64>])>,
    /// Steps of the slope search for the layers computed.
    steps: usize,
    /// Per hidden layer, the enclosures of the pre-activations at the set's centre, where known
    /// (computed over the same set).
    at_centre: Option<&'a [Bounds]>,
    /// Per hidden layer, the slopes a search over a set holding the region found for its units'
    /// bounds (the root's), which the layers computed without a search use too (B11).
    unit_slopes: &'a [Option<UnitSlopes>],
}

impl LocalNet<'_> {
    /// A subdomain's hidden bounds over `region` with its `splits`, from what is `known`
    /// ([`Known`]; docs/soundness.md B2, B9, B10).
    pub(super) fn hidden_of(
        &self,
        known: Known<'_>,
        region: &Region,
        lip_slack: &[f64],
        splits: &Splits,
    ) -> Result<HiddenBounds, Undecided> {
        match known {
            Known::Refine {
                root,
                parent,
                refine,
            } => match splits.iter().map(|&(l, _, _)| l).min() {
                None => root.with_splits(splits),
                Some(l0) => {
                    let (reused, bounds) = match parent {
                        Some((p, newest)) => (newest + 1, (&p.pre[..], &p.errors[..])),
                        None => (l0 + 1, (&root.pre[..], &root.errors[..])),
                    };
                    let from = Reused {
                        layers: if refine { reused } else { bounds.0.len() },
                        bounds: Some(bounds),
                        steps: 0,
                        // a subdomain whose box was halved (no unstable unit left) has
                        // another centre
                        at_centre: (root.centre == region.centre).then_some(&root.at_centre[..]),
                        unit_slopes: &root.unit_slopes,
                    };
                    // the parent's bounds hold over the child and lie inside the root's
                    self.hidden_from(region, lip_slack, (splits, Some(bounds.0)), from)
                }
            },
            Known::Within(w) => self.hidden_over(region, lip_slack, splits, Some(w)),
            Known::Nothing => self.hidden_over(region, lip_slack, splits, None),
        }
    }

    /// [`LocalNet::hidden_bounds`] over `region`: around its centre within its covering radius,
    /// and for a box also the first layer's interval over the box itself; each layer's bounds
    /// intersected with `within`'s for the layer where given (bounds over a set holding the
    /// region, [`Known::Within`]) and clamped to the phases `splits` fix before its units are
    /// relaxed ([`split`]).
    pub(super) fn hidden_over(
        &self,
        region: &Region,
        lip_slack: &[f64],
        splits: &Splits,
        within: Option<&[Bounds]>,
    ) -> Result<HiddenBounds, Undecided> {
        let from = Reused {
            layers: 0,
            bounds: None,
            steps: self.intermediate_steps,
            at_centre: None,
            unit_slopes: &[],
        };
        self.hidden_from(region, lip_slack, (splits, within), from)
    }

    /// [`LocalNet::hidden_over`] with the first `from.layers` hidden layers taken from
    /// `from.bounds` (`splits` applied to them) and the
    /// slope search of the layers above run for `from.steps` steps.
    fn hidden_from(
        &self,
        region: &Region,
        lip_slack: &[f64],
        (splits, within): (&Splits, Option<&[Bounds]>),
        from: Reused<'_>,
    ) -> Result<HiddenBounds, Undecided> {
        let x = region.centre.view();
        let hidden = self.layers.len() - 1;
        let mut out = HiddenBounds {
            pre: Vec::with_capacity(hidden),
            relax: Vec::with_capacity(hidden),
            errors: Vec::with_capacity(hidden),
            centre: region.centre.clone(),
            at_centre: Vec::with_capacity(hidden),
            refined: Refined::default(),
            unit_slopes: Arc::default(),
        };
        let mut unit_slopes = Vec::with_capacity(hidden);
        // a subdomain of a halved box (another centre than the root's, whose enclosures it
        // cannot share) starts its computed layers from the interval over the layer below
        // instead: the centre's bound is one sound bound of an intersection (B10)
        let with_centre =
            from.bounds.is_none() || from.at_centre.is_some() || region.boxed.is_none();
        // enclosure of the centre's activations h_{l-1}(x0)
        let mut centre = point(x);
        for l in 0..hidden {
            let layer = &self.layers[l];
            let at_centre = match (with_centre, from.at_centre.and_then(|c| c.get(l))) {
                (false, _) => None,
                (true, Some(known)) => Some(known.clone()),
                (true, None) => Some(layer_box(layer, &centre)),
            };
            if let Some(c) = &at_centre {
                out.at_centre.push(c.clone());
                centre = c.relu();
            }
            if let Some((pre, errors)) = from.bounds.filter(|_| l < from.layers) {
                let mut bounds = pre.get(l).ok_or(Undecided::NotFinite)?.clone();
                let relax = clamped_relaxation(&mut bounds, splits, l)?;
                out.errors.push(errors.get(l).cloned().unwrap_or_default());
                out.pre.push(bounds);
                out.relax.push(relax);
                unit_slopes.push(None);
                continue;
            }
            let errors = self.unit_errors(l, &out.pre, region);
            let mut bounds =
                (at_centre.as_ref()).map(|c| self.centre_reach(l, c, (region, lip_slack), &errors));
            let below = match (l, &region.boxed, out.pre.last()) {
                // the first layer over the box itself (a flushed input within D_0 per coordinate)
                (0, Some(b), _) => Some(Bounds {
                    lo: b.lo.iter().map(|v| sub_down(*v, self.d0)).collect(),
                    hi: b.hi.iter().map(|v| add_up(*v, self.d0)).collect(),
                }),
                (_, _, Some(prev)) => Some(prev.relu()),
                _ => None,
            };
            if let Some(input) = below {
                let interval = layer_box(layer, &input).widen(&errors);
                bounds = Some(match bounds {
                    Some(b) => b.intersect(&interval),
                    None => interval,
                });
            }
            let mut bounds = bounds.ok_or(Undecided::NotFinite)?;
            if let Some(known) = within.and_then(|w| w.get(l)) {
                bounds = bounds.intersect(known);
            }
            out.errors.push(errors);
            let reuse = from.unit_slopes.get(l).and_then(Option::as_ref);
            let found = match l {
                0 => None,
                _ => self.tighten(l, &mut bounds, &out, (region, splits), (from.steps, reuse)),
            };
            unit_slopes.push(found);
            let relax = clamped_relaxation(&mut bounds, splits, l)?;
            if let (Some(_), Some(known)) = (from.bounds, within.and_then(|w| w.get(l))) {
                out.refined = out.refined.plus(Refined {
                    layers: 1,
                    unstable_before: unstable_unsplit(known, splits, l),
                    unstable_after: unstable_unsplit(&bounds, splits, l),
                });
            }
            out.pre.push(bounds);
            out.relax.push(relax);
        }
        if unit_slopes.iter().any(Option::is_some) {
            out.unit_slopes = Arc::new(unit_slopes);
        }
        Ok(out)
    }

    /// Hidden layer `l`'s pre-activations over the region from their enclosure at its centre
    /// (`at_centre`): widened by the Lipschitz reach `eps * L_l * ||W_l row||` (plus the
    /// deployed execution's slack above the first layer), and for the deployed first layer by
    /// its rounding `errors` and a flushed input within `D_0`.
    fn centre_reach(
        &self,
        l: usize,
        at_centre: &Bounds,
        (region, lip_slack): (&Region, &[f64]),
        errors: &[f64],
    ) -> Bounds {
        let layer = &self.layers[l];
        let widen = match (&layer.rounding, l) {
            (None, _) => 0.0,
            (Some(_), 0) => 0.0,
            (Some(_), _) => lip_slack.get(l).copied().unwrap_or(f64::INFINITY),
        };
        let spread = mul_up(region.eps, self.lip_prefix[l]);
        let reach: Vec<f64> = (layer.row_norms.iter())
            .map(|n| add_up(mul_up(spread, *n), widen))
            .collect();
        let bounds = at_centre.widen(&reach);
        if l == 0 && layer.rounding.is_some() {
            // the deployed first layer: its rounding, and a flushed input within D_0
            let flushed: Vec<f64> = (errors.iter().zip(&layer.row_norms))
                .map(|(e, n)| add_up(*e, mul_up(self.d0, *n)))
                .collect();
            return bounds.widen(&flushed);
        }
        bounds
    }

    /// The deployed execution's rounding bound `eps_l` for layer `l`, whose inputs are the region
    /// (`l = 0`) or the ReLU of `pre[l - 1]`; empty for the real network.
    fn unit_errors(&self, l: usize, pre: &[Bounds], region: &Region) -> Vec<f64> {
        let Some(model) = &self.layers[l].rounding else {
            return Vec::new();
        };
        match l.checked_sub(1).and_then(|p| pre.get(p)) {
            None => model.region_errors(region),
            Some(below) => {
                let mag: Array1<f64> = below.hi.iter().map(|h| h.max(0.0)).collect();
                model.unit_errors(mag.view())
            }
        }
    }

    /// Bounds for the units of hidden layer `l` that `bounds` leaves unstable: one backward
    /// substitution with rows `e_j` and `-e_j` per such unit, with CROWN's slopes, or, without
    /// a search, the slopes `reuse` holds for these units where it holds them all (B11); then,
    /// with `steps` of the search ([`LocalNet::with_intermediate_search`]), one with searched
    /// slopes (and the multipliers of `splits` below `l`), each bound the better of the two
    /// (both sound); then, with [`LocalNet::with_unit_branching`] over a set bounded with a
    /// search and no split (a ReLU-splitting search's root, or a half of a box whose root bounds
    /// were not finite), a branch and bound per unit still unstable (B12).
    /// Returns the searched slopes where every unit's were searched.
    fn tighten(
        &self,
        l: usize,
        bounds: &mut Bounds,
        below: &HiddenBounds,
        (region, splits): (&Region, &Splits),
        (steps, reuse): (usize, Option<&UnitSlopes>),
    ) -> Option<UnitSlopes> {
        let unstable: Vec<usize> = (0..bounds.lo.len())
            .filter(|&j| bounds.lo[j] < 0.0 && bounds.hi[j] > 0.0)
            .collect();
        if unstable.is_empty() {
            return None;
        }
        let mut c = Array2::zeros((2 * unstable.len(), bounds.lo.len()));
        for (t, &j) in unstable.iter().enumerate() {
            c[[2 * t, j]] = 1.0;
            c[[2 * t + 1, j]] = -1.0;
        }
        let parts = (&below.pre[..], &below.relax[..], &below.errors[..]);
        // without a search, the slopes the root's search found for these units where it did
        // (B11), else CROWN's
        let reused = reuse
            .filter(|_| steps == 0)
            .and_then(|r| r.rows_for(&unstable));
        let lines = (reused.as_deref(), false, None);
        let mut lower = backward::lower_bounds(self, l, c.clone(), parts, lines, region, None);
        let mut found = None;
        if steps > 0 {
            let search = SlopeSearch {
                iterations: steps,
                target: f64::INFINITY,
            };
            let mut searched = lower.clone();
            let slopes =
                self.search_slopes((search, None), &c, &mut searched, (below, region, splits));
            found = slopes.and_then(|m| UnitSlopes::new(unstable.clone(), m.slopes));
            for (v, s) in lower.iter_mut().zip(searched) {
                *v = v.max(s);
            }
        }
        for (t, &j) in unstable.iter().enumerate() {
            bounds.lo[j] = bounds.lo[j].max(lower[2 * t]);
            bounds.hi[j] = bounds.hi[j].min(-lower[2 * t + 1]);
        }
        if let Some(branching) = self
            .unit_branching
            .filter(|_| steps > 0 && splits.is_empty())
        {
            self.branch_unit_bounds(l, bounds, (below, region), (steps, branching));
        }
        found
    }
}

/// Clamps hidden layer `l`'s `bounds` to the phases `splits` fix there and relaxes its units
/// (docs/soundness.md B2): [`Undecided::Infeasible`] where a split's half-line misses the bounds,
/// [`Undecided::NotFinite`] where a bound is not finite.
fn clamped_relaxation(
    bounds: &mut Bounds,
    splits: &Splits,
    l: usize,
) -> Result<Vec<UnitRelaxation>, Undecided> {
    split::constrain(bounds, splits, l).map_err(Undecided::Infeasible)?;
    (bounds.lo.iter().zip(&bounds.hi))
        .map(|(lo, hi)| relax_unit(*lo, *hi))
        .collect::<Option<Vec<_>>>()
        .ok_or(Undecided::NotFinite)
}

/// The units of hidden layer `l` that `bounds` leaves unstable (`lo < 0 < hi`) and `splits`
/// does not fix.
fn unstable_unsplit(bounds: &Bounds, splits: &Splits, l: usize) -> usize {
    (bounds.lo.iter().zip(&bounds.hi).enumerate())
        .filter(|(j, (lo, hi))| {
            **lo < 0.0 && **hi > 0.0 && !splits.iter().any(|s| (s.0, s.1) == (l, *j))
        })
        .count()
}
