//! Estimated effect of a ReLU split on one row's bound, for branch and bound's choice of the unit
//! to split (filtered smart branching, De Palma et al. 2021): the bound's backward substitution
//! is redone from the split unit's layer down to the input with the unit's relaxation replaced by
//! each child's phase, every other unit's relaxation and every layer above kept as they were.
//! A choice of where to split only: the estimates are plain float64 and the multipliers of
//! earlier splits are left out of both sides of each difference, so nothing here enters a bound.

use ndarray::{Array1, Array2, ArrayView1};

use super::backward::Trace;
use super::hidden::HiddenBounds;
use super::local_net::LocalNet;
use super::region::InputSet;
use super::relax::UnitRelaxation;
use super::rows::rows_times;
use super::slopes::Multipliers;

/// What a subdomain's bounds left for estimating its children's: its hidden layers' relaxations,
/// the coefficients its substitution carried, and the lower slopes it searched (per row).
pub type Estimated<'a> = (&'a HiddenBounds, &'a Trace, Option<&'a Multipliers>);

impl LocalNet<'_> {
    /// For row `row` of `at`'s bounds over `set` and each candidate `(hidden layer, unit)`, the
    /// estimated gain of its bound in the child with the unit active and in the child with it
    /// inactive: the substitution from the unit's layer down, with the unit's output `h_j` taken
    /// as `z_j` or `0` instead of its lines, less the same substitution as it was, plus the upper
    /// line's offset the child no longer pays. `-inf` where the coefficients are not at hand.
    pub fn split_gains(
        &self,
        set: InputSet<'_>,
        (hidden, trace, searched): Estimated<'_>,
        row: usize,
        candidates: &[(usize, usize)],
    ) -> Vec<[f64; 2]> {
        let relax = hidden.relaxations();
        let slopes = |l: usize| row_slopes(&relax[l], searched.map(|m| &m.slopes[..]), (l, row));
        let mut gains = vec![[f64::NEG_INFINITY; 2]; candidates.len()];
        let mut layers: Vec<usize> = candidates.iter().map(|c| c.0).collect();
        layers.sort_unstable();
        layers.dedup();
        for l in layers {
            let Some(m) = trace.hidden.get(l).filter(|m| row < m.nrows()) else {
                continue;
            };
            let m = m.row(row);
            let Some(units) = relax.get(l).filter(|u| u.len() == m.len()) else {
                continue;
            };
            let (v, _) = relaxed_row(m, units, &slopes(l));
            let picks: Vec<usize> = (0..candidates.len())
                .filter(|&t| candidates[t].0 == l && candidates[t].1 < units.len())
                .collect();
            let mut rows = Array2::zeros((1 + 2 * picks.len(), v.len()));
            for (t, &p) in picks.iter().enumerate() {
                let j = candidates[p].1;
                for (r, value) in [(1 + 2 * t, m[j]), (2 + 2 * t, 0.0)] {
                    rows.row_mut(r).assign(&v);
                    rows[[r, j]] = value;
                }
            }
            rows.row_mut(0).assign(&v);
            let est = self.substituted_from(l, rows, relax, &slopes, set);
            for (t, &p) in picks.iter().enumerate() {
                let offset = upper_offset_paid(m[candidates[p].1], &units[candidates[p].1]);
                gains[p] = [1, 2].map(|k| est[k + 2 * t] - est[0] + offset);
            }
        }
        gains
    }

    /// Plain float64 bound of the rows `v` (coefficients over hidden layer `top`'s
    /// pre-activations) over `set`, substituting down through the layers at and below `top`
    /// with the relaxations `relax` and the lower slopes `slopes(l)`.
    fn substituted_from(
        &self,
        top: usize,
        mut v: Array2<f64>,
        relax: &[Vec<UnitRelaxation>],
        slopes: &dyn Fn(usize) -> Vec<f64>,
        set: InputSet<'_>,
    ) -> Vec<f64> {
        let mut cst = vec![0.0; v.nrows()];
        for l in (0..=top).rev() {
            let layer = &self.layers[l];
            for (c, b) in cst.iter_mut().zip(v.dot(&layer.b)) {
                *c += b;
            }
            let m = rows_times(&v, layer.w.view());
            if l == 0 {
                for (c, a) in cst.iter_mut().zip(m.rows()) {
                    *c += linear_minimum(a, set);
                }
                break;
            }
            let s = slopes(l - 1);
            v = Array2::zeros(m.dim());
            for (r, c) in cst.iter_mut().enumerate() {
                let (row, k) = relaxed_row(m.row(r), &relax[l - 1], &s);
                v.row_mut(r).assign(&row);
                *c += k;
            }
        }
        cst
    }
}

/// The lower slopes a row's substitution used at hidden layer `l`: the searched ones (clamped to
/// `[0, 1]`) where the search ran on every row, else CROWN's.
fn row_slopes(
    units: &[UnitRelaxation],
    searched: Option<&[Array2<f64>]>,
    (l, row): (usize, usize),
) -> Vec<f64> {
    let found =
        (searched.and_then(|s| s.get(l))).filter(|a| row < a.nrows() && a.ncols() == units.len());
    (units.iter().enumerate())
        .map(|(j, unit)| match (unit, found) {
            (UnitRelaxation::Unstable { .. }, Some(a)) => a[[row, j]].clamp(0.0, 1.0),
            (UnitRelaxation::Unstable { lower, .. }, None) => *lower,
            _ => 0.0,
        })
        .collect()
}

/// A row's coefficients `m` over a layer's outputs `h` carried to its pre-activations `z` through
/// each unit's lines (the lower line `a z` where `m_j >= 0`, else the upper `s z + t`): the
/// coefficients and the constant the upper lines add.
fn relaxed_row(m: ArrayView1<f64>, units: &[UnitRelaxation], slopes: &[f64]) -> (Array1<f64>, f64) {
    let mut k = 0.0;
    let v = (m.iter().zip(units).zip(slopes))
        .map(|((&c, unit), &a)| match *unit {
            UnitRelaxation::Inactive => 0.0,
            UnitRelaxation::Active => c,
            UnitRelaxation::Unstable { .. } if c >= 0.0 => a * c,
            UnitRelaxation::Unstable { slope, offset, .. } => {
                k += c * offset;
                slope * c
            }
        })
        .collect();
    (v, k)
}

/// What a unit's upper line costs a row with coefficient `m` on its output: `-m t` where the
/// line is used (`m < 0`), else 0; a split child no longer pays it.
fn upper_offset_paid(m: f64, unit: &UnitRelaxation) -> f64 {
    match *unit {
        UnitRelaxation::Unstable { offset, .. } if m < 0.0 => -m * offset,
        _ => 0.0,
    }
}

/// The minimum of `a . x` over `set`: `sum_i a_i (lo_i or hi_i)` over a box, `a . x0 - eps ||a||`
/// over a ball (plain float64).
fn linear_minimum(a: ArrayView1<f64>, set: InputSet<'_>) -> f64 {
    match set {
        InputSet::Box { lo, hi } => (a.iter().zip(lo).zip(hi))
            .map(|((&c, &l), &h)| if c > 0.0 { c * l } else { c * h })
            .sum(),
        InputSet::Ball { x0, eps } => {
            let at: f64 = a.iter().zip(x0).map(|(c, x)| c * x).sum();
            at - eps * a.dot(&a).sqrt()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::local::seeded_net::seeded_net;
    use crate::bounds::local::{Known, Phase, SplitOutcome, Splits};

    /// With CROWN's slopes and the parent's hidden bounds kept, a child's bound differs from its
    /// parent's only by the split unit's lines: the estimated gain is the difference of the two
    /// rigorous bounds (up to their float64 rounding), for every unstable unit of both hidden
    /// layers, both phases and every row.
    #[test]
    fn the_estimated_gain_is_the_childs_bound_less_the_parents() {
        let dense = seeded_net(7, &[4, 6, 5, 3]);
        let local = LocalNet::new(&dense, None, None).unwrap();
        let (lo, hi) = (vec![-0.8, -1.0, -0.5, -1.2], vec![1.0, 0.6, 1.1, 0.9]);
        let set = InputSet::Box { lo: &lo, hi: &hi };
        let c = ndarray::arr2(&[[1.0, -1.0, 0.0], [0.0, 1.0, -1.0], [-1.0, 0.0, 1.0]]);
        let bounded = |splits: &Splits, known| match local.split_lower_bounds(
            set,
            (&c, &[]),
            splits,
            (None, None),
            known,
        ) {
            SplitOutcome::Bounded(b) => Some(*b),
            _ => None,
        };
        let root = bounded(&Splits::none(), Known::Nothing).unwrap();
        let mut checked = 0;
        for (l, units) in root.hidden.relaxations().iter().enumerate() {
            for j in
                (0..units.len()).filter(|&j| matches!(units[j], UnitRelaxation::Unstable { .. }))
            {
                for row in 0..c.nrows() {
                    let gains =
                        local.split_gains(set, (&root.hidden, &root.trace, None), row, &[(l, j)]);
                    for (k, phase) in [Phase::Active, Phase::Inactive].into_iter().enumerate() {
                        let known = Known::Refine {
                            root: &root.hidden,
                            parent: None,
                            refine: false,
                        };
                        let Some(child) = bounded(&Splits::none().with(l, j, phase), known) else {
                            continue;
                        };
                        let actual = child.lower[row] - root.lower[row];
                        assert!(
                            (actual - gains[0][k]).abs() < 1e-9,
                            "{l} {j} {row} {k}: {actual} {:?}",
                            gains[0]
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 12, "{checked} children checked");
    }

    /// The lines a row's coefficients go through: the lower slope where nonnegative, the upper
    /// line (and its offset) where negative, nothing through an inactive unit.
    #[test]
    fn a_row_goes_through_each_units_lines() {
        let units = [
            UnitRelaxation::Inactive,
            UnitRelaxation::Active,
            UnitRelaxation::Unstable {
                lower: 1.0,
                slope: 0.5,
                offset: 2.0,
            },
            UnitRelaxation::Unstable {
                lower: 0.0,
                slope: 0.25,
                offset: 3.0,
            },
        ];
        let m = ndarray::arr1(&[7.0, -2.0, 4.0, -8.0]);
        let (v, k) = relaxed_row(m.view(), &units, &[0.0, 0.0, 0.75, 0.6]);
        assert_eq!(v.to_vec(), vec![0.0, -2.0, 3.0, -2.0]);
        assert_eq!(k, -24.0);
        assert_eq!(upper_offset_paid(-8.0, &units[3]), 24.0);
        assert_eq!(upper_offset_paid(4.0, &units[2]), 0.0);
        assert_eq!(upper_offset_paid(-2.0, &units[1]), 0.0);
    }

    /// A linear form's minimum over a box is at the vertex its signs choose, over a ball at
    /// `x0 - eps a / ||a||`.
    #[test]
    fn a_linear_form_is_smallest_at_its_minimiser() {
        let a = ndarray::arr1(&[3.0, -4.0]);
        let boxed = InputSet::Box {
            lo: &[-1.0, 0.0],
            hi: &[2.0, 0.5],
        };
        assert_eq!(linear_minimum(a.view(), boxed), -3.0 - 2.0);
        let ball = InputSet::Ball {
            x0: &[1.0, 1.0],
            eps: 2.0,
        };
        assert_eq!(linear_minimum(a.view(), ball), -1.0 - 10.0);
    }

    /// Searched slopes are read for unstable units only, clamped; without them CROWN's.
    #[test]
    fn a_rows_slopes_are_the_searched_ones_where_there() {
        let units = [
            UnitRelaxation::Active,
            UnitRelaxation::Unstable {
                lower: 1.0,
                slope: 0.5,
                offset: 1.0,
            },
        ];
        let searched = [ndarray::arr2(&[[0.3, 0.4], [0.9, 1.5]])];
        assert_eq!(row_slopes(&units, Some(&searched), (0, 1)), vec![0.0, 1.0]);
        assert_eq!(row_slopes(&units, Some(&searched), (0, 0)), vec![0.0, 0.4]);
        assert_eq!(row_slopes(&units, None, (0, 0)), vec![0.0, 1.0]);
        assert_eq!(row_slopes(&units, Some(&searched), (1, 0)), vec![0.0, 1.0]);
    }
}
