//! The bounds a split would give: for candidate units of a subdomain, lower bounds on one row in
//! the two children that fix the unit active and inactive, from the subdomain's own hidden
//! bounds (branch and bound's filtered smart branching, De Palma et al. 2021, reads them to
//! choose the split; docs/soundness.md B11).

use ndarray::Array2;

use super::backward;
use super::hidden::HiddenBounds;
use super::local_net::LocalNet;
use super::region::{InputSet, Region};
use super::relax::relax_unit;
use super::slopes::Multipliers;
use super::split::{Phase, Splits};

impl LocalNet<'_> {
    /// For each candidate `(hidden layer, unit)`, lower bounds on the one row `c` (over the
    /// outputs) in the subdomain's children that fix the unit `[active, inactive]`: the
    /// subdomain's `hidden` bounds (its `splits` applied) with the unit's bounds clamped to the
    /// phase's half-line and relaxed again (B2; every other layer reused, B10), and the
    /// substitution run with the slopes and split multipliers of `lines` (the subdomain's
    /// search's, for this row) where given, else CROWN's. Each value is a sound lower bound of
    /// the row over its child: the substitution is the rigorous one. `+inf` for a child the
    /// clamping shows infeasible; NaN where no finite bound holds. An empty result where the
    /// set, the row or a candidate does not fit the network.
    pub fn split_child_bounds(
        &self,
        set: InputSet<'_>,
        c: &Array2<f64>,
        (hidden, splits): (&HiddenBounds, &Splits),
        lines: Option<&Multipliers>,
        candidates: &[(usize, usize)],
    ) -> Vec<[f64; 2]> {
        let top = self.layers.len() - 1;
        let fits = c.nrows() == 1
            && c.ncols() == self.classes()
            && hidden.pre.len() == top
            && lines.is_none_or(|m| m.slopes.len() == top && m.betas.len() == top);
        let Some(region) = Region::new(set, self.input_dim()).filter(|_| fits) else {
            return Vec::new();
        };
        let inside = |&(l, j): &(usize, usize)| hidden.pre.get(l).is_some_and(|b| j < b.lo.len());
        if !candidates.iter().all(inside) {
            return Vec::new();
        }
        let (mut pre, mut relax) = (hidden.pre.clone(), hidden.relax.clone());
        let child = |pre: &[_], relax: &[_]| {
            let parts = (pre, relax, &hidden.errors[..]);
            let lines = match lines {
                Some(m) => (Some(&m.slopes[..]), true, Some((&m.betas[..], splits))),
                None => (None, true, None),
            };
            backward::lower_bounds(self, top, c.clone(), parts, lines, &region, None)[0]
        };
        (candidates.iter())
            .map(|&(l, j)| {
                let (lo, hi, unit) = (pre[l].lo[j], pre[l].hi[j], relax[l][j]);
                let bounds = [Phase::Active, Phase::Inactive].map(|phase| {
                    let Some((l2, u2)) = clamped(lo, hi, phase) else {
                        return f64::INFINITY;
                    };
                    let Some(r) = relax_unit(l2, u2) else {
                        return f64::NAN;
                    };
                    (pre[l].lo[j], pre[l].hi[j], relax[l][j]) = (l2, u2, r);
                    child(&pre, &relax)
                });
                (pre[l].lo[j], pre[l].hi[j], relax[l][j]) = (lo, hi, unit);
                bounds
            })
            .collect()
    }
}

/// A unit's bounds `[lo, hi]` clamped to the half-line `phase` fixes (`z >= 0` active, `z <= 0`
/// inactive, as [`super::split::constrain`]); `None` when they lie strictly on the other side.
fn clamped(lo: f64, hi: f64, phase: Phase) -> Option<(f64, f64)> {
    match phase {
        Phase::Active => (hi >= 0.0).then_some((lo.max(0.0), hi)),
        Phase::Inactive => (lo <= 0.0).then_some((lo, hi.min(0.0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::local::hidden::Known;
    use crate::bounds::local::local_net::{SlopeSearch, SplitOutcome};
    use crate::bounds::local::seeded_net::seeded_net;
    use crate::onnx::model::DenseNet;

    #[test]
    fn a_phase_clamps_the_bounds_to_its_half_line() {
        assert_eq!(clamped(-2.0, 3.0, Phase::Active), Some((0.0, 3.0)));
        assert_eq!(clamped(-2.0, 3.0, Phase::Inactive), Some((-2.0, 0.0)));
        assert_eq!(clamped(-2.0, -1.0, Phase::Active), None);
        assert_eq!(clamped(1.0, 2.0, Phase::Inactive), None);
        // touching the half-line at zero is feasible (z = 0 is in both phases)
        assert_eq!(clamped(-2.0, 0.0, Phase::Active), Some((0.0, 0.0)));
        assert_eq!(clamped(0.0, 2.0, Phase::Inactive), Some((0.0, 0.0)));
    }

    /// The row's value `c . y(x)` and every hidden pre-activation at `x`, in float64 (exact
    /// within 1e-9 on these small nets).
    fn forward(dense: &DenseNet, c: &Array2<f64>, x: &[f64]) -> (f64, Vec<Vec<f64>>) {
        let (mut h, mut pre) = (x.to_vec(), Vec::new());
        for (l, layer) in dense.layers.iter().enumerate() {
            let z: Vec<f64> = (layer.w.rows().into_iter().zip(&layer.b))
                .map(|(row, b)| row.iter().zip(&h).map(|(w, v)| w * v).sum::<f64>() + b)
                .collect();
            if l + 1 == dense.layers.len() {
                return (c.row(0).iter().zip(&z).map(|(a, v)| a * v).sum(), pre);
            }
            h = z.iter().map(|v| v.max(0.0)).collect();
            pre.push(z);
        }
        (f64::NAN, pre)
    }

    /// Without lines, each child's bound is, to the bit, the bound of the subdomain that fixes
    /// the unit computed from the parent's bounds with every layer reused (what a child bounded
    /// without its own search or refinement gets, `Known::Refine` with `refine = false`), and
    /// `+inf` exactly where that subdomain is infeasible; with the parent's searched slopes and
    /// multipliers, every bound holds at each point of a grid over the box whose unit is in the
    /// phase (so does the plain one), on nets with one and with two hidden layers.
    #[test]
    fn child_bounds_are_the_childrens_bounds_and_hold_over_them() {
        for widths in [vec![2, 3, 2], vec![2, 4, 3, 2]] {
            let dense = seeded_net(5, &widths);
            let local = LocalNet::new(&dense, None, None).unwrap();
            let (lo, hi) = (vec![-1.0, -1.0], vec![1.0, 1.0]);
            let set = InputSet::Box { lo: &lo, hi: &hi };
            let c = Array2::from_shape_vec((1, 2), vec![1.0, -1.0]).unwrap();
            let search = SlopeSearch {
                iterations: 10,
                target: f64::INFINITY,
            };
            let first = Splits::none();
            let outcome = |splits: &Splits, search, known| {
                local.split_lower_bounds(set, (&c, &[]), splits, (search, None), known)
            };
            let SplitOutcome::Bounded(parent) = outcome(&first, Some(search), Known::Nothing)
            else {
                panic!("the box's bounds are finite")
            };
            let candidates: Vec<(usize, usize)> = (0..widths.len() - 2)
                .flat_map(|l| (0..widths[l + 1]).map(move |j| (l, j)))
                .collect();
            let plain = (&parent.hidden, &first);
            let children = local.split_child_bounds(set, &c, plain, None, &candidates);
            let lines = parent.optimised.as_ref();
            let searched = local.split_child_bounds(set, &c, plain, lines, &candidates);
            assert!(lines.is_some() && searched.len() == candidates.len());
            let grid: Vec<[f64; 2]> = (0..=20)
                .flat_map(|a| (0..=20).map(move |b| [a as f64 / 10.0 - 1.0, b as f64 / 10.0 - 1.0]))
                .collect();
            for (t, &(l, j)) in candidates.iter().enumerate() {
                for (p, phase) in [Phase::Active, Phase::Inactive].into_iter().enumerate() {
                    let known = Known::Refine {
                        root: &parent.hidden,
                        parent: None,
                        refine: false,
                    };
                    let expected = match outcome(&first.with(l, j, phase), None, known) {
                        SplitOutcome::Bounded(b) => b.lower[0],
                        SplitOutcome::Infeasible(_) => f64::INFINITY,
                        SplitOutcome::NotFinite => f64::NAN,
                    };
                    assert_eq!(children[t][p].to_bits(), expected.to_bits(), "{l} {j} {p}");
                    for x in &grid {
                        let (value, pre) = forward(&dense, &c, x);
                        let in_phase = match phase {
                            Phase::Active => pre[l][j] >= 0.0,
                            Phase::Inactive => pre[l][j] <= 0.0,
                        };
                        if in_phase {
                            assert!(children[t][p] <= value + 1e-9, "{l} {j} {p} {x:?}");
                            assert!(searched[t][p] <= value + 1e-9, "{l} {j} {p} {x:?}");
                        }
                    }
                }
            }
        }
    }

    /// A candidate, a row or lines that do not fit the network give no bounds.
    #[test]
    fn what_does_not_fit_gives_nothing() {
        let dense = seeded_net(5, &[2, 3, 2]);
        let local = LocalNet::new(&dense, None, None).unwrap();
        let (lo, hi) = (vec![-1.0, -1.0], vec![1.0, 1.0]);
        let set = InputSet::Box { lo: &lo, hi: &hi };
        let c = Array2::from_shape_vec((1, 2), vec![1.0, -1.0]).unwrap();
        let none = Splits::none();
        let SplitOutcome::Bounded(b) =
            local.split_lower_bounds(set, (&c, &[]), &none, (None, None), Known::Nothing)
        else {
            panic!("the box's bounds are finite")
        };
        let parts = (&b.hidden, &none);
        assert_eq!(
            local
                .split_child_bounds(set, &c, parts, None, &[(0, 0)])
                .len(),
            1
        );
        assert!(local
            .split_child_bounds(set, &c, parts, None, &[(0, 3)])
            .is_empty());
        assert!(local
            .split_child_bounds(set, &c, parts, None, &[(1, 0)])
            .is_empty());
        let two = Array2::zeros((2, 2));
        assert!(local
            .split_child_bounds(set, &two, parts, None, &[(0, 0)])
            .is_empty());
        let wide = InputSet::Box {
            lo: &[0.0; 3],
            hi: &[1.0; 3],
        };
        assert!(local
            .split_child_bounds(wide, &c, parts, None, &[(0, 0)])
            .is_empty());
    }
}
