//! A ReLU-splitting search's root bounds each unstable hidden unit more tightly by a branch and
//! bound of its own over the phases of the units below it (docs/soundness.md B12): the row
//! `+-e_j` of layer `l` is bounded over subdomains that fix units of the layers below, and the
//! smallest of the leaves' bounds holds over the whole set. This is what alpha-beta-CROWN asks a
//! MIP solver for (its intermediate-bound refinement), with the same sound subdomain bounds the
//! search itself uses instead. A unit a tighter root stabilises is stable in every subdomain of
//! the search, and an unstable one's relaxation is tighter there too.

use std::time::Instant;

use ndarray::Array2;
use rayon::prelude::*;

use super::backward::{self, Trace};
use super::hidden::HiddenBounds;
use super::interval::Bounds;
use super::local_net::{LocalNet, SlopeSearch, Undecided};
use super::region::Region;
use super::split::{Phase, Splits};
use super::split_score::relu_candidates;

/// How a search's root branches on its unstable units ([`LocalNet::with_unit_branching`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnitBranching {
    /// Subdomains bounded per unit and side at most.
    pub leaves: usize,
    /// Past it no more subdomains are bounded (the bounds found so far hold); `None`: the
    /// leaves alone limit the work, which then depends on nothing but the inputs.
    pub deadline: Option<Instant>,
}

/// A subdomain of one unit's search: its splits and a sound lower bound of the row over it.
struct Leaf {
    lower: f64,
    splits: Splits,
}

impl LocalNet<'_> {
    /// Tightens the bounds of hidden layer `l`'s unstable units: for each, the lower bound by
    /// [`LocalNet::row_lower_by_branching`] on `e_j`, then, unless that made the unit active, the
    /// upper bound on `-e_j`. Units run in parallel, each search alone, so the bounds do not
    /// depend on the thread count. `below` holds the layers under `l` (the root's, no split).
    pub(super) fn branch_unit_bounds(
        &self,
        l: usize,
        bounds: &mut Bounds,
        (below, region): (&HiddenBounds, &Region),
        (steps, branching): (usize, UnitBranching),
    ) {
        let unstable: Vec<usize> = (0..bounds.lo.len())
            .filter(|&j| bounds.lo[j] < 0.0 && bounds.hi[j] > 0.0)
            .collect();
        let width = bounds.lo.len();
        let found: Vec<(usize, f64, f64)> = (unstable.par_iter())
            .map(|&j| {
                let search = |sign: f64, start: f64| {
                    let mut c = Array2::zeros((1, width));
                    c[[0, j]] = sign;
                    let at = (below, region);
                    self.row_lower_by_branching(l, &c, start, at, (steps, branching))
                };
                let lo = search(1.0, bounds.lo[j]);
                let hi = match lo >= 0.0 {
                    true => bounds.hi[j],
                    false => -search(-1.0, -bounds.hi[j]),
                };
                (j, lo, hi)
            })
            .collect();
        for (j, lo, hi) in found {
            bounds.lo[j] = bounds.lo[j].max(lo);
            bounds.hi[j] = bounds.hi[j].min(hi);
        }
    }

    /// A lower bound of the row `c` of hidden layer `l`'s pre-activations over the region, at
    /// least `start` (a sound bound over it): best first, the leaf with the smallest bound is
    /// split on the first unit of its ranked candidates it does not fix (BaBSR's score read
    /// from CROWN's coefficients for the row at the root, [`relu_candidates`]), until every
    /// leaf's bound is at least 0, no candidate is left, `branching.leaves` subdomains were
    /// bounded or its deadline passed. Children cover their parent (B1), a child shown
    /// infeasible holds no execution, and a child's bound is at least its parent's (its
    /// executions are some of the parent's): the smallest leaf bound holds over the region.
    fn row_lower_by_branching(
        &self,
        l: usize,
        c: &Array2<f64>,
        start: f64,
        (below, region): (&HiddenBounds, &Region),
        (steps, branching): (usize, UnitBranching),
    ) -> f64 {
        let late = branching.deadline.is_some_and(|d| Instant::now() >= d);
        if start >= 0.0 || start.is_nan() || branching.leaves == 0 || late {
            return start;
        }
        let mut trace = Trace::new(l);
        let parts = (&below.pre[..], &below.relax[..], &below.errors[..]);
        let lines = (None, false, None);
        backward::lower_bounds(self, l, c.clone(), parts, lines, region, Some(&mut trace));
        let ranked = relu_candidates(&below.relax, &trace.hidden, 0, usize::MAX);
        let mut leaves = vec![Leaf {
            lower: start,
            splits: Splits::none(),
        }];
        let mut bounded = 0;
        while bounded < branching.leaves && branching.deadline.is_none_or(|d| Instant::now() < d) {
            let Some(at) = weakest(&leaves) else { break };
            let leaf = leaves.swap_remove(at);
            let free =
                |&&(k, i): &&(usize, usize)| !leaf.splits.iter().any(|s| (s.0, s.1) == (k, i));
            let Some(&(k, i)) = ranked.iter().find(free) else {
                leaves.push(leaf);
                break;
            };
            for phase in [Phase::Active, Phase::Inactive] {
                let splits = leaf.splits.with(k, i, phase);
                bounded += 1;
                match self.leaf_lower(l, c, &splits, (below, region), steps) {
                    Err(Undecided::Infeasible(_)) => {}
                    found => leaves.push(Leaf {
                        lower: found.map_or(leaf.lower, |v| v.max(leaf.lower)),
                        splits,
                    }),
                }
            }
        }
        let lowest = leaves.iter().map(|f| f.lower).fold(f64::INFINITY, f64::min);
        // every leaf shown infeasible: the set holds no execution, which a root's set (its
        // centre is one) never is; keep what was known
        if lowest.is_finite() {
            lowest.max(start)
        } else {
            start
        }
    }

    /// A sound lower bound of the row `c` of layer `l` over the executions that satisfy
    /// `splits`: the root's bounds of the layers below with the splits clamped (B2, B10), then
    /// the rigorous substitution with CROWN's slopes and, for `steps`, the search for slopes and
    /// the splits' multipliers (B4), the better of the two (`-inf` where neither is a number);
    /// [`Undecided::Infeasible`] where the clamped bounds show no execution satisfies them.
    fn leaf_lower(
        &self,
        l: usize,
        c: &Array2<f64>,
        splits: &Splits,
        (below, region): (&HiddenBounds, &Region),
        steps: usize,
    ) -> Result<f64, Undecided> {
        let hidden = below.with_splits(splits)?;
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let lines = (None, false, None);
        let mut lower = backward::lower_bounds(self, l, c.clone(), parts, lines, region, None);
        if steps > 0 {
            let search = SlopeSearch {
                iterations: steps,
                target: f64::INFINITY,
            };
            self.search_slopes((search, None), c, &mut lower, (&hidden, region, splits));
        }
        Ok(match lower.first() {
            Some(v) if !v.is_nan() => *v,
            _ => f64::NEG_INFINITY,
        })
    }
}

/// The leaf with the smallest bound that is below 0 (the first of equals); `None` when every
/// leaf's bound is at least 0.
fn weakest(leaves: &[Leaf]) -> Option<usize> {
    (leaves.iter().enumerate())
        .filter(|(_, f)| f.lower < 0.0)
        .min_by(|a, b| a.1.lower.total_cmp(&b.1.lower))
        .map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::local::region::Region;
    use crate::bounds::local::seeded_net::{pre_activations, seeded_net};
    use crate::bounds::local::InputSet;
    use crate::onnx::model::DenseNet;

    /// The hidden bounds over `[-1, 1]^n` with 10 steps of the units' slope search, and with
    /// `branching` where given.
    fn root(dense: &DenseNet, branching: Option<UnitBranching>) -> HiddenBounds {
        root_with(dense, branching, 10)
    }

    /// [`root`] with `steps` of the slope search.
    fn root_with(dense: &DenseNet, branching: Option<UnitBranching>, steps: usize) -> HiddenBounds {
        let n = dense.layers[0].w.ncols();
        let mut local = (LocalNet::new(dense, None, None).unwrap()).with_intermediate_search(steps);
        if let Some(b) = branching {
            local = local.with_unit_branching(b);
        }
        let (lo, hi) = (vec![-1.0; n], vec![1.0; n]);
        let region = Region::new(InputSet::Box { lo: &lo, hi: &hi }, n).unwrap();
        let Ok(h) = local.hidden_over(&region, &[], &Splits::none(), None) else {
            panic!("the box's bounds are finite")
        };
        h
    }

    fn leaves(leaves: usize) -> Option<UnitBranching> {
        Some(UnitBranching {
            leaves,
            deadline: None,
        })
    }

    fn width(h: &HiddenBounds) -> f64 {
        (h.pre.iter().skip(1))
            .map(|b| b.lo.iter().zip(&b.hi).map(|(l, h)| h - l).sum::<f64>())
            .sum()
    }

    /// Branching leaves the first layer (no unit below it) as it was, tightens the layers
    /// above, and every bound holds at every point of a grid over the box.
    #[test]
    fn branched_bounds_hold_on_a_grid_and_are_tighter() {
        let dense = seeded_net(7, &[3, 10, 9, 8, 2]);
        let (plain, branched) = (root(&dense, None), root(&dense, leaves(100)));
        assert_eq!(plain.pre[0], branched.pre[0]);
        assert!(
            width(&branched) < width(&plain),
            "branching tightens a layer"
        );
        for g in 0..11usize.pow(3) {
            let t = [g % 11, (g / 11) % 11, g / 121].map(|i| i as f64 / 10.0);
            let x: Vec<f64> = (0..3).map(|i| -1.0 + 2.0 * t[i]).collect();
            for (z, b) in pre_activations(&dense, &x).iter().zip(&branched.pre) {
                for (u, v) in z.iter().enumerate() {
                    assert!(b.lo[u] - 1e-9 <= *v && *v <= b.hi[u] + 1e-9, "{u}: {v}");
                }
            }
        }
    }

    /// With one input, leaves enough to split every unit below and 50 steps of the search for
    /// each leaf's slopes and multipliers, the second layer's units
    /// unstable at the plain root get branched bounds that hold over a fine grid of the unit's
    /// range and come within its Lipschitz allowance (`L h`, `L = |W_2 row| |W_1|` and `h` the
    /// grid's step) of the range clipped to the side of 0 the search stops at (a side is
    /// searched until its bound reaches 0, the upper one only while the unit may be inactive).
    #[test]
    fn branched_bounds_reach_the_range_a_fine_grid_finds() {
        let dense = seeded_net(3, &[1, 7, 6, 2]);
        // with 10 steps a leaf's multipliers stay short of the best (unit 3's upper bound 0.115
        // against 0.091); with 50 every leaf of fixed phases is bounded exactly
        let plain = root_with(&dense, None, 50);
        let branched = root_with(&dense, leaves(1 << 10), 50);
        let steps = 20_000;
        let h = 2.0 / steps as f64;
        let (w1, w2) = (&dense.layers[0].w, &dense.layers[1].w);
        let mut range = vec![(f64::INFINITY, f64::NEG_INFINITY); w2.nrows()];
        for g in 0..=steps {
            let z = pre_activations(&dense, &[-1.0 + g as f64 * h]);
            for (r, v) in range.iter_mut().zip(&z[1]) {
                *r = (r.0.min(*v), r.1.max(*v));
            }
        }
        let (p, b) = (&plain.pre[1], &branched.pre[1]);
        let mut searched = 0;
        for (j, (min, max)) in range.iter().enumerate() {
            assert!(b.lo[j] <= min + 1e-9 && b.hi[j] >= max - 1e-9, "{j}: sound");
            if !(p.lo[j] < 0.0 && p.hi[j] > 0.0) {
                continue;
            }
            searched += 1;
            let lip: f64 = (w2.row(j).iter().zip(w1.column(0)))
                .map(|(a, c)| (a * c).abs())
                .sum();
            let allowance = lip * h + 1e-6;
            assert!(
                b.lo[j] >= min.min(0.0) - allowance,
                "{j}: {} against {min}",
                b.lo[j]
            );
            if b.lo[j] < 0.0 {
                assert!(
                    b.hi[j] <= max.max(0.0) + allowance,
                    "{j}: {} against {max}",
                    b.hi[j]
                );
            }
        }
        assert!(searched >= 2, "{searched} units searched");
    }

    /// No leaves, or a deadline already past, leave the root's bounds as they were.
    #[test]
    fn no_leaves_or_a_past_deadline_change_nothing() {
        let dense = seeded_net(7, &[3, 10, 9, 8, 2]);
        let plain = root(&dense, None);
        assert_eq!(root(&dense, leaves(0)).pre, plain.pre);
        let past = Some(UnitBranching {
            leaves: 100,
            deadline: Some(Instant::now()),
        });
        assert_eq!(root(&dense, past).pre, plain.pre);
    }
}
