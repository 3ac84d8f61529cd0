//! A subdomain's hidden-layer bounds: per hidden layer, sound bounds on the pre-activations, the
//! units' relaxations and the deployed execution's rounding charges; and what a subdomain's
//! bounds may start from ([`Known`]).

use std::sync::Arc;

use ndarray::Array1;

use super::interval::Bounds;
use super::local_net::Undecided;
use super::relax::{relax_unit, UnitRelaxation};
use super::slopes::UnitSlopes;
use super::split::{self, Splits};
use crate::arith::sound::l2_norm_up;

/// What a subdomain's hidden bounds start from (branch and bound's reuse of earlier bounds).
#[derive(Clone, Copy, Debug)]
pub enum Known<'a> {
    /// Nothing: computed over the subdomain's set.
    Nothing,
    /// Bounds computed without splits over the subdomain's set (`root`, the root's of a
    /// ReLU-splitting search): reused, with the subdomain's splits applied, up to the layer of
    /// its shallowest split; the layers above are computed again over the set with the splits
    /// fixing their units' phases (CROWN's slopes) and intersected with the root's
    /// (docs/soundness.md B10). With its `parent`'s bounds and the layer of the split that made
    /// it, the parent's are reused up to that layer instead (they hold over the child, whose
    /// executions are some of the parent's: what it would compute there where the parent computed
    /// its own, its parent's clamped where it kept them), and the layers above are computed and
    /// intersected with the parent's (which lie inside the root's).
    Refine {
        /// The root's bounds.
        root: &'a HiddenBounds,
        /// The parent's bounds and the layer of the subdomain's newest split.
        parent: Option<(&'a KeptBounds, usize)>,
        /// Whether the layers above the split are computed again; if not, every layer is
        /// reused (the parent's, else the root's) with the splits applied, which is sound the
        /// same way and cheaper where computing again stabilises few units.
        refine: bool,
    },
    /// Per hidden layer, pre-activation bounds over a set holding the subdomain's (its parent's):
    /// the bounds are computed over the subdomain's set and intersected with them, layer by
    /// layer before the next is computed. Bounds over a larger set hold over a smaller one, and
    /// the intersection of two sound bounds is sound (docs/soundness.md B9).
    Within(&'a [Bounds]),
}

/// A subdomain's hidden bounds kept for its children: per hidden layer, the pre-activation
/// bounds and the deployed execution's rounding charges (the relaxations follow from the bounds).
#[derive(Clone, Debug)]
pub struct KeptBounds {
    /// Per hidden layer, bounds on its pre-activations.
    pub pre: Vec<Bounds>,
    /// Per hidden layer, the rounding charges (empty for the real network).
    pub(super) errors: Vec<Vec<f64>>,
}

impl KeptBounds {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let pre: usize = self.pre.iter().map(|l| l.lo.len() + l.hi.len()).sum();
        let errors: usize = self.errors.iter().map(Vec::len).sum();
        8 * (pre + errors)
    }
}

/// Pre-activation bounds of every hidden layer over the ball, with their relaxations.
#[derive(Clone, Debug)]
pub struct HiddenBounds {
    /// Per hidden layer, bounds on its pre-activations.
    pub pre: Vec<Bounds>,
    /// Per hidden layer, each unit's relaxation.
    pub(super) relax: Vec<Vec<UnitRelaxation>>,
    /// Per hidden layer, the deployed execution's componentwise rounding bound (empty for the
    /// real network).
    pub(super) errors: Vec<Vec<f64>>,
    /// The centre of the set they were computed over.
    pub(super) centre: Array1<f64>,
    /// Per hidden layer, an enclosure of the pre-activations at `centre` (shared by the
    /// subdomains of a ReLU-splitting search whose set has the same centre; empty for a
    /// subdomain of a halved box, which leaves the centre's bound out).
    pub(super) at_centre: Vec<Bounds>,
    /// What computing layers again above a subdomain's split did ([`Known::Refine`]).
    pub refined: Refined,
    /// Per hidden layer, the slopes the search for its units' bounds found, where it searched
    /// them all (the root's, which its subdomains' bounds are computed again with, B11;
    /// shared by the copies).
    pub(super) unit_slopes: Arc<Vec<Option<UnitSlopes>>>,
}

/// What computing a subdomain's layers again above its split did: over the layers computed,
/// the units left unstable by the bounds they started from (the parent's or the root's, with
/// the splits applied) and by the computed bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refined {
    /// Hidden layers computed again.
    pub layers: usize,
    /// Units unstable in the bounds they started from (split units not counted).
    pub unstable_before: usize,
    /// Units unstable after.
    pub unstable_after: usize,
}

impl Refined {
    /// The sum of two tallies.
    pub fn plus(self, other: Refined) -> Refined {
        Refined {
            layers: self.layers + other.layers,
            unstable_before: self.unstable_before + other.unstable_before,
            unstable_after: self.unstable_after + other.unstable_after,
        }
    }
}

impl HiddenBounds {
    /// Bytes held: the bounds, relaxations, rounding charges, centre and its enclosures, and the
    /// units' slopes (what a ReLU-splitting search keeps of its root for every subdomain, counted
    /// against the search's memory cap with its queue).
    pub fn bytes(&self) -> usize {
        let pairs = |b: &[Bounds]| -> usize { b.iter().map(|l| l.lo.len() + l.hi.len()).sum() };
        let floats = pairs(&self.pre)
            + pairs(&self.at_centre)
            + self.errors.iter().map(Vec::len).sum::<usize>()
            + self.centre.len();
        let units: usize = self.relax.iter().map(Vec::len).sum();
        let slopes: usize = (self.unit_slopes.iter().flatten())
            .map(UnitSlopes::bytes)
            .sum();
        8 * floats + units * std::mem::size_of::<UnitRelaxation>() + slopes
    }

    /// What its children keep of it.
    pub fn kept(&self) -> KeptBounds {
        KeptBounds {
            pre: self.pre.clone(),
            errors: self.errors.clone(),
        }
    }

    /// Per hidden layer, each unit's relaxation.
    pub fn relaxations(&self) -> &[Vec<UnitRelaxation>] {
        &self.relax
    }

    /// Per hidden layer, an upper bound on `||a_l||`, `a_l = max(hi_l, 0)`: the norm of every
    /// deployed activation the bounds allow (what the overflow checks read).
    pub fn active_radii(&self) -> Vec<f64> {
        (self.pre.iter())
            .map(|b| l2_norm_up(b.hi.iter().map(|v| v.max(0.0))))
            .collect()
    }

    /// These bounds (computed without splits over a set holding the subdomain's) with each
    /// split unit's bounds clamped to its half-line and relaxed again ([`split`]): sound over the
    /// subdomain, since bounds over a larger set hold over a smaller one and the clamping is B2's.
    /// The rounding charges are kept (they were computed from wider bounds).
    pub(super) fn with_splits(&self, splits: &Splits) -> Result<HiddenBounds, Undecided> {
        let mut out = self.clone();
        out.refined = Refined::default();
        for (l, pre) in out.pre.iter_mut().enumerate() {
            split::constrain(pre, splits, l).map_err(Undecided::Infeasible)?;
        }
        for &(l, j, _) in splits.iter() {
            let (Some(pre), Some(units)) = (out.pre.get(l), out.relax.get_mut(l)) else {
                continue;
            };
            if let (Some(lo), Some(hi), Some(unit)) =
                (pre.lo.get(j), pre.hi.get(j), units.get_mut(j))
            {
                *unit = relax_unit(*lo, *hi).ok_or(Undecided::NotFinite)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::local::region::Region;
    use crate::bounds::local::seeded_net::{pre_activations, seeded_net};
    use crate::bounds::local::{InputSet, LocalNet, Phase, SplitOutcome};
    use crate::onnx::model::DenseNet;

    /// 3 inputs, ReLU layers of 5 and 4 units, 2 outputs (fixed weights in [-1, 1]).
    fn net() -> DenseNet {
        seeded_net(11, &[3, 5, 4, 2])
    }

    fn over(local: &LocalNet, half: f64, within: Option<&[Bounds]>) -> HiddenBounds {
        let (lo, hi) = (vec![-half; 3], vec![half; 3]);
        let region = Region::new(InputSet::Box { lo: &lo, hi: &hi }, 3).unwrap();
        let Ok(h) = local.hidden_over(&region, &[], &Splits::none(), within) else {
            panic!("the box's bounds are finite")
        };
        h
    }

    fn inside(a: &Bounds, b: &Bounds) -> bool {
        (a.lo.iter().zip(&b.lo)).all(|(x, y)| x >= y)
            && (a.hi.iter().zip(&b.hi)).all(|(x, y)| x <= y)
    }

    /// A parent's bounds (over the box of half-width 2) bound the child's (half-width 1) from
    /// outside, so intersecting with them changes nothing that was tighter, and every layer of
    /// the inherited bounds lies inside the parent's.
    #[test]
    fn a_child_inherits_its_parents_bounds_layer_by_layer() {
        let dense = net();
        let local = LocalNet::new(&dense, None, None).unwrap();
        let parent = over(&local, 2.0, None);
        let child = over(&local, 1.0, None);
        let inherited = over(&local, 1.0, Some(&parent.pre));
        for (i, p) in inherited.pre.iter().zip(&parent.pre) {
            assert!(inside(i, p));
        }
        // the first layer's own bounds do not depend on the layers below: exactly the
        // intersection
        assert_eq!(inherited.pre[0], child.pre[0].intersect(&parent.pre[0]));
        assert!(parent.pre.iter().zip(&child.pre).any(|(p, c)| p != c));
    }

    /// Sound over the child's box: the pre-activations of every corner and of a grid of points
    /// of each half of the root box (computed in float64, within 1e-9 of the exact values on
    /// this small net) lie inside the bounds each half inherits from the root, layer by layer.
    #[test]
    fn inherited_bounds_hold_every_point_of_the_child() {
        let dense = net();
        let local = LocalNet::new(&dense, None, None).unwrap();
        let root = over(&local, 1.0, None);
        for (lo0, hi0) in [(-1.0, 0.0), (0.0, 1.0)] {
            let (lo, hi) = (vec![lo0, -1.0, -1.0], vec![hi0, 1.0, 1.0]);
            let region = Region::new(InputSet::Box { lo: &lo, hi: &hi }, 3).unwrap();
            let Ok(child) = local.hidden_over(&region, &[], &Splits::none(), Some(&root.pre))
            else {
                panic!("the half's bounds are finite")
            };
            let steps = 6;
            for k in 0..(steps + 1usize).pow(3) {
                let t = [k % 7, (k / 7) % 7, k / 49].map(|i| i as f64 / steps as f64);
                let mut h: Vec<f64> = (0..3).map(|i| lo[i] + t[i] * (hi[i] - lo[i])).collect();
                for (l, layer) in dense.layers.iter().enumerate().take(child.pre.len()) {
                    let z: Vec<f64> = (layer.w.rows().into_iter().zip(&layer.b))
                        .map(|(row, b)| row.iter().zip(&h).map(|(w, v)| w * v).sum::<f64>() + b)
                        .collect();
                    for (j, v) in z.iter().enumerate() {
                        let b = &child.pre[l];
                        assert!(
                            b.lo[j] - 1e-9 <= *v && *v <= b.hi[j] + 1e-9,
                            "{l} {j} {v} {b:?}"
                        );
                    }
                    h = z.iter().map(|v| v.max(0.0)).collect();
                }
            }
        }
    }

    /// Bounds given for a layer are intersected before the layer's units are relaxed and before
    /// the next layer is computed: a unit the given bounds show active is relaxed as active, and
    /// the next layer's bounds are those of the narrowed inputs (so a unit's given interval,
    /// however narrow, is what the result holds).
    #[test]
    fn the_given_bounds_narrow_the_layer_and_what_follows() {
        let dense = net();
        let local = LocalNet::new(&dense, None, None).unwrap();
        let plain = over(&local, 1.0, None);
        let j = (0..5)
            .find(|&j| plain.pre[0].lo[j] < 0.0 && plain.pre[0].hi[j] > 0.0)
            .expect("the first layer has an unstable unit over the box");
        let mut given = plain.pre.clone();
        given[0].lo[j] = plain.pre[0].hi[j] / 2.0;
        given[1].hi = given[1].lo.iter().map(|l| l + 1e-3).collect();
        let out = over(&local, 1.0, Some(&given));
        assert_eq!(out.pre[0].lo[j], given[0].lo[j]);
        assert_eq!(out.relax[0][j], UnitRelaxation::Active);
        assert!(inside(&out.pre[1], &given[1]));
        assert!(matches!(plain.relax[0][j], UnitRelaxation::Unstable { .. }));
    }

    /// A subdomain's refined bounds (the root's up to its shallowest split, the layers above
    /// computed again with the split fixing its unit) lie inside the root's with the split
    /// applied, are strictly tighter somewhere, and hold at every point of a grid over the box
    /// whose unit is in the split's phase.
    #[test]
    fn refined_bounds_hold_over_the_subdomain_inside_the_roots() {
        let dense = net();
        let local = LocalNet::new(&dense, None, None).unwrap();
        let root = over(&local, 1.0, None);
        let j = (0..5)
            .find(|&j| root.pre[0].lo[j] < 0.0 && root.pre[0].hi[j] > 0.0)
            .expect("the first layer has an unstable unit over the box");
        let (lo, hi) = (vec![-1.0; 3], vec![1.0; 3]);
        let c = ndarray::Array2::eye(2);
        let mut tighter = false;
        for phase in [Phase::Active, Phase::Inactive] {
            let splits = Splits::none().with(0, j, phase);
            let set = InputSet::Box { lo: &lo, hi: &hi };
            let known = Known::Refine {
                root: &root,
                parent: None,
                refine: true,
            };
            let SplitOutcome::Bounded(b) =
                local.split_lower_bounds(set, (&c, &[]), &splits, (None, None), known)
            else {
                panic!("both halves hold points of the box")
            };
            let reused = root.with_splits(&splits).ok().unwrap();
            assert_eq!(b.hidden.pre[0], reused.pre[0]);
            // the tally of layer 1, computed again: its unstable units before and after
            let count = |b: &Bounds| {
                (0..b.lo.len())
                    .filter(|&u| b.lo[u] < 0.0 && b.hi[u] > 0.0)
                    .count()
            };
            let tally = Refined {
                layers: 1,
                unstable_before: count(&reused.pre[1]),
                unstable_after: count(&b.hidden.pre[1]),
            };
            assert_eq!(b.hidden.refined, tally);
            // not computed again: every layer is the root's with the split applied
            let kept = Known::Refine {
                root: &root,
                parent: None,
                refine: false,
            };
            let SplitOutcome::Bounded(same) =
                local.split_lower_bounds(set, (&c, &[]), &splits, (None, None), kept)
            else {
                panic!("both halves hold points of the box")
            };
            assert_eq!(same.hidden.pre, reused.pre);
            assert_eq!(same.hidden.refined, Refined::default());
            for (r, u) in b.hidden.pre.iter().zip(&reused.pre) {
                assert!(inside(r, u), "{r:?} {u:?}");
            }
            tighter |= b.hidden.pre != reused.pre;
            let steps = 10;
            for k in 0..(steps + 1usize).pow(3) {
                let t = [k % 11, (k / 11) % 11, k / 121].map(|i| i as f64 / steps as f64);
                let x: Vec<f64> = (0..3).map(|i| -1.0 + 2.0 * t[i]).collect();
                let z = pre_activations(&dense, &x);
                if (phase == Phase::Active) != (z[0][j] >= 0.0) {
                    continue;
                }
                for (l, (zl, b)) in z.iter().zip(&b.hidden.pre).enumerate() {
                    for (u, v) in zl.iter().enumerate() {
                        assert!(b.lo[u] - 1e-9 <= *v && *v <= b.hi[u] + 1e-9, "{l} {u} {v}");
                    }
                }
            }
        }
        assert!(tighter, "the split tightens a layer above it");
    }

    /// The bytes a root's bounds hold, counted by hand: two layers of 3 and 2 units over a
    /// 4-input centre, and slopes for units 0 and 2 of the second layer (4 rows over the 3 units
    /// below).
    #[test]
    fn the_bytes_held_count_every_part_once() {
        let b = |n: usize| Bounds {
            lo: vec![-1.0; n],
            hi: vec![1.0; n],
        };
        let slopes = UnitSlopes::new(vec![0, 2], vec![ndarray::Array2::zeros((4, 3))]);
        assert!(slopes.is_some());
        let hidden = HiddenBounds {
            pre: vec![b(3), b(2)],
            relax: vec![
                vec![UnitRelaxation::Active; 3],
                vec![UnitRelaxation::Inactive; 2],
            ],
            errors: vec![vec![0.0; 3], vec![0.0; 2]],
            centre: Array1::zeros(4),
            at_centre: vec![b(3), b(2)],
            refined: Refined::default(),
            unit_slopes: Arc::new(vec![None, slopes]),
        };
        // bounds 10 + enclosures 10 + charges 5 + centre 4 floats; slopes 2 units + 12 entries
        let expected = 8 * 29 + 5 * std::mem::size_of::<UnitRelaxation>() + 8 * 14;
        assert_eq!(hidden.bytes(), expected);
    }

    /// A subdomain's layers computed again above its split with the slopes the root's search
    /// found for their units (B11) instead of CROWN's (the root's `unit_slopes` dropped): the
    /// layers up to the split's the same, the bounds above tighter in all for some split, and
    /// every layer holding at every point of a grid over the box in the split's phase.
    #[test]
    fn a_subdomain_computed_again_with_the_roots_slopes_is_sound_and_tighter() {
        let dense = seeded_net(5, &[3, 6, 6, 5, 2]);
        let local = LocalNet::new(&dense, None, None)
            .unwrap()
            .with_intermediate_search(10);
        let root = over(&local, 1.0, None);
        assert!(root.unit_slopes.iter().skip(1).all(Option::is_some));
        let mut crown_only = root.clone();
        crown_only.unit_slopes = Arc::default();
        let (lo, hi) = (vec![-1.0; 3], vec![1.0; 3]);
        let c = ndarray::Array2::eye(2);
        let bound = |splits: &Splits, root: &HiddenBounds| -> HiddenBounds {
            let set = InputSet::Box { lo: &lo, hi: &hi };
            let known = Known::Refine {
                root,
                parent: None,
                refine: true,
            };
            match local.split_lower_bounds(set, (&c, &[]), splits, (None, None), known) {
                SplitOutcome::Bounded(b) => b.hidden,
                _ => panic!("the subdomain holds points of the box"),
            }
        };
        let mut tighter = false;
        let unstable = (0..6).filter(|&j| root.pre[0].lo[j] < 0.0 && root.pre[0].hi[j] > 0.0);
        for j in unstable {
            for phase in [Phase::Active, Phase::Inactive] {
                let splits = Splits::none().with(0, j, phase);
                let (reused, plain) = (bound(&splits, &root), bound(&splits, &crown_only));
                assert_eq!(reused.pre[0], plain.pre[0]);
                let width = |h: &HiddenBounds| -> f64 {
                    (h.pre.iter().skip(1))
                        .map(|b| b.lo.iter().zip(&b.hi).map(|(l, h)| h - l).sum::<f64>())
                        .sum()
                };
                tighter |= width(&reused) < width(&plain);
                for g in 0..11usize.pow(3) {
                    let t = [g % 11, (g / 11) % 11, g / 121].map(|i| i as f64 / 10.0);
                    let x: Vec<f64> = (0..3).map(|i| -1.0 + 2.0 * t[i]).collect();
                    let z = pre_activations(&dense, &x);
                    if (phase == Phase::Active) != (z[0][j] >= 0.0) {
                        continue;
                    }
                    for (zl, b) in z.iter().zip(&reused.pre) {
                        for (u, v) in zl.iter().enumerate() {
                            assert!(b.lo[u] - 1e-9 <= *v && *v <= b.hi[u] + 1e-9);
                        }
                    }
                }
            }
        }
        assert!(
            tighter,
            "the root's slopes tighten a layer above some split"
        );
    }

    /// A child reusing its parent's bounds up to its newest split's layer has there the bounds
    /// it would compute from the root's (the same splits lie below each of those layers); above,
    /// intersected with its parent's instead of the root's, its bounds lie inside those and
    /// hold at every point of a grid over the box in the phases of its splits.
    #[test]
    fn a_child_refined_from_its_parent_is_sound_and_inside_one_from_the_root() {
        let dense = seeded_net(5, &[3, 6, 6, 5, 2]);
        let local = LocalNet::new(&dense, None, None).unwrap();
        let root = over(&local, 1.0, None);
        let unstable = |b: &Bounds| (0..b.lo.len()).find(|&j| b.lo[j] < 0.0 && b.hi[j] > 0.0);
        let (lo, hi) = (vec![-1.0; 3], vec![1.0; 3]);
        let c = ndarray::Array2::eye(2);
        let bound = |splits: &Splits, known: Known| -> HiddenBounds {
            let set = InputSet::Box { lo: &lo, hi: &hi };
            match local.split_lower_bounds(set, (&c, &[]), splits, (None, None), known) {
                SplitOutcome::Bounded(b) => b.hidden,
                _ => panic!("the subdomain holds points of the box"),
            }
        };
        let j = unstable(&root.pre[0]).expect("an unstable unit in layer 0");
        let mut compared = 0;
        for phase in [Phase::Active, Phase::Inactive] {
            let first = Splits::none().with(0, j, phase);
            let parent = bound(
                &first,
                Known::Refine {
                    root: &root,
                    parent: None,
                    refine: true,
                },
            );
            for l in 1..3 {
                let Some(k) = unstable(&parent.pre[l]) else {
                    continue;
                };
                for second in [Phase::Active, Phase::Inactive] {
                    let splits = first.with(l, k, second);
                    let whole = bound(
                        &splits,
                        Known::Refine {
                            root: &root,
                            parent: None,
                            refine: true,
                        },
                    );
                    let kept = parent.kept();
                    let reused = Known::Refine {
                        root: &root,
                        parent: Some((&kept, l)),
                        refine: true,
                    };
                    let child = bound(&splits, reused);
                    // not computed again: the parent's bounds with the splits applied, which
                    // hold the computed ones
                    let lazy = Known::Refine {
                        root: &root,
                        parent: Some((&kept, l)),
                        refine: false,
                    };
                    let lazy = bound(&splits, lazy);
                    let mut clamped = parent.pre.clone();
                    for (at, b) in clamped.iter_mut().enumerate() {
                        split::constrain(b, &splits, at).unwrap();
                    }
                    assert_eq!(lazy.pre, clamped);
                    for (a, b) in child.pre.iter().zip(&lazy.pre) {
                        assert!(inside(a, b), "split at {l}");
                    }
                    for (at, (a, b)) in child.pre.iter().zip(&whole.pre).enumerate() {
                        match at <= l {
                            true => assert_eq!(a, b, "layer {at}, split at {l}"),
                            false => assert!(inside(a, b), "layer {at}, split at {l}"),
                        }
                    }
                    let steps = 10;
                    for g in 0..(steps + 1usize).pow(3) {
                        let t = [g % 11, (g / 11) % 11, g / 121].map(|i| i as f64 / 10.0);
                        let x: Vec<f64> = (0..3).map(|i| -1.0 + 2.0 * t[i]).collect();
                        let z = pre_activations(&dense, &x);
                        let holds = |v: f64, p: Phase| (p == Phase::Active) == (v >= 0.0);
                        if !holds(z[0][j], phase) || !holds(z[l][k], second) {
                            continue;
                        }
                        for (zl, b) in z.iter().zip(&child.pre) {
                            for (u, v) in zl.iter().enumerate() {
                                assert!(b.lo[u] - 1e-9 <= *v && *v <= b.hi[u] + 1e-9);
                            }
                        }
                    }
                    compared += 1;
                }
            }
        }
        assert!(compared >= 4, "{compared}");
    }
}
