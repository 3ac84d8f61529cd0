//! Estimated effect of a ReLU split on one row's bound, for branch and bound's choice of the unit
//! to split (filtered smart branching, De Palma et al. 2021): the row's backward substitution,
//! with the lower slopes its search found (CROWN's without one), is redone from the split unit's
//! layer down to the input with the unit's lines replaced by each child's phase, every other
//! unit's lines kept. A choice of where to split only: the estimates are plain float64 and the
//! multipliers of earlier splits are left out of both sides of each difference, so nothing here
//! enters a bound.

use ndarray::{Array1, Array2, ArrayView1};

use super::backward::Trace;
use super::hidden::HiddenBounds;
use super::local_net::LocalNet;
use super::region::InputSet;
use super::relax::UnitRelaxation;
use super::rows::rows_times;
use super::slopes::Multipliers;

/// What a subdomain's bounds left for estimating its children's: its hidden layers' relaxations,
/// the coefficients its substitution carried, and the lower slopes it searched with which of their
/// rows is the row estimated for.
pub type Estimated<'a> = (
    &'a HiddenBounds,
    &'a Trace,
    Option<(&'a Multipliers, usize)>,
);

impl LocalNet<'_> {
    /// For row `row` of `at`'s bounds over `set` and each candidate `(hidden layer, unit)`, the
    /// estimated gain of its bound in the child with the unit active and in the child with it
    /// inactive: the substitution from the unit's layer down, with the unit's output `h_j` taken
    /// as `z_j` or `0` instead of its lines, less the same substitution with its lines, plus the
    /// upper line's offset the child no longer pays. The row's coefficients on each layer's
    /// outputs are carried down from the last hidden layer's (`C W`, which no slope changes)
    /// with the same slopes. `-inf` where the coefficients are not at hand.
    pub fn split_gains(
        &self,
        set: InputSet<'_>,
        (hidden, trace, searched): Estimated<'_>,
        row: usize,
        candidates: &[(usize, usize)],
    ) -> Vec<[f64; 2]> {
        let relax = hidden.relaxations();
        let searched_row = searched.map_or(0, |(_, r)| r);
        let slopes = |l: usize| {
            row_slopes(
                &relax[l],
                searched.map(|(m, _)| &m.slopes[..]),
                (l, searched_row),
            )
        };
        let mut gains = vec![[f64::NEG_INFINITY; 2]; candidates.len()];
        let lowest = candidates.iter().map(|c| c.0).min().unwrap_or(usize::MAX);
        let coefficients = self.coefficients_down_to(lowest, relax, trace, row, &slopes);
        for (l, m) in coefficients.iter().enumerate() {
            let Some(m) = m.as_ref().map(|m| m.view()) else {
                continue;
            };
            let Some(units) = relax.get(l).filter(|u| u.len() == m.len()) else {
                continue;
            };
            let (v, _) = relaxed_row(m, units, &slopes(l));
            let picks: Vec<usize> = (0..candidates.len())
                .filter(|&t| candidates[t].0 == l && candidates[t].1 < units.len())
                .collect();
            if picks.is_empty() {
                continue;
            }
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

    /// Row `row`'s coefficients on the outputs of each hidden layer from `lowest` up (`None`
    /// below it, and where the trace lacks them): the last hidden layer's from the trace, each
    /// below carried through the layer above's lines with `slopes`.
    fn coefficients_down_to(
        &self,
        lowest: usize,
        relax: &[Vec<UnitRelaxation>],
        trace: &Trace,
        row: usize,
        slopes: &dyn Fn(usize) -> Vec<f64>,
    ) -> Vec<Option<Array1<f64>>> {
        let mut out = vec![None; relax.len()];
        let top = relax.len().checked_sub(1);
        let mut m = top
            .and_then(|t| trace.hidden.get(t))
            .filter(|m| row < m.nrows())
            .map(|m| m.row(row).to_owned());
        for l in (lowest..relax.len()).rev() {
            let Some(here) = m.take().filter(|m| m.len() == relax[l].len()) else {
                break;
            };
            if l > lowest {
                let (v, _) = relaxed_row(here.view(), &relax[l], &slopes(l));
                m = Some(v.dot(self.layers[l].w));
            }
            out[l] = Some(here);
        }
        out
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

/// The lower slopes a row's substitution used at hidden layer `l`: the searched ones where the
/// search ran on every row and found one in `[0, 1]`, else CROWN's (as the rigorous substitution
/// reads them).
fn row_slopes(
    units: &[UnitRelaxation],
    searched: Option<&[Array2<f64>]>,
    (l, row): (usize, usize),
) -> Vec<f64> {
    let found =
        (searched.and_then(|s| s.get(l))).filter(|a| row < a.nrows() && a.ncols() == units.len());
    (units.iter().enumerate())
        .map(|(j, unit)| match (unit, found.map(|a| a[[row, j]])) {
            (UnitRelaxation::Unstable { .. }, Some(a)) if (0.0..=1.0).contains(&a) => a,
            (UnitRelaxation::Unstable { lower, .. }, _) => *lower,
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
    use crate::bounds::local::region::Region;
    use crate::bounds::local::seeded_net::seeded_net;
    use crate::bounds::local::{Known, Phase, SplitOutcome, Splits};

    /// A child with its parent's hidden bounds (the split unit clamped) differs from its parent
    /// only by the split unit's lines: with the same lower slopes, the estimated gain is the
    /// difference of the two rigorous bounds (up to their float64 rounding). Every unstable unit
    /// of both hidden layers estimated at once, both phases, every row, with CROWN's slopes and
    /// with given ones.
    #[test]
    fn the_estimated_gain_is_the_childs_bound_less_the_parents() {
        let dense = seeded_net(7, &[4, 6, 5, 3]);
        let local = LocalNet::new(&dense, None, None).unwrap();
        let (lo, hi) = (vec![-0.8, -1.0, -0.5, -1.2], vec![1.0, 0.6, 1.1, 0.9]);
        let set = InputSet::Box { lo: &lo, hi: &hi };
        let region = Region::new(set, 4).unwrap();
        let c = ndarray::arr2(&[[1.0, -1.0, 0.0], [0.0, 1.0, -1.0], [-1.0, 0.0, 1.0]]);
        let SplitOutcome::Bounded(root) = local.split_lower_bounds(
            set,
            (&c, &[]),
            &Splits::none(),
            (None, None),
            Known::Nothing,
        ) else {
            panic!("the box is finite")
        };
        let relax = root.hidden.relaxations();
        let all: Vec<(usize, usize)> = (relax.iter().enumerate())
            .flat_map(|(l, u)| (0..u.len()).map(move |j| (l, j)))
            .filter(|&(l, j)| matches!(relax[l][j], UnitRelaxation::Unstable { .. }))
            .collect();
        assert!(all.iter().any(|a| a.0 == 0) && all.iter().any(|a| a.0 == 1));
        let given = Multipliers {
            slopes: (relax.iter().enumerate())
                .map(|(l, u)| {
                    Array2::from_shape_fn((3, u.len()), |(r, j)| ((r + 2 * j + l) % 5) as f64 / 4.0)
                })
                .collect(),
            betas: vec![],
        };
        let bound = |hidden: &HiddenBounds, slopes: Option<&Multipliers>| {
            let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
            let lines = (slopes.map(|m| &m.slopes[..]), true, None);
            crate::bounds::local::backward::lower_bounds(
                &local,
                2,
                c.clone(),
                parts,
                lines,
                &region,
                None,
            )
        };
        let mut checked = 0;
        for slopes in [None, Some(&given)] {
            let parent = bound(&root.hidden, slopes);
            for (row, p) in parent.iter().enumerate() {
                let searched = slopes.map(|m| (m, row));
                let gains =
                    local.split_gains(set, (&root.hidden, &root.trace, searched), row, &all);
                for (&(l, j), g) in all.iter().zip(&gains) {
                    for (k, phase) in [Phase::Active, Phase::Inactive].into_iter().enumerate() {
                        let splits = Splits::none().with(l, j, phase);
                        let Ok(child) = root.hidden.with_splits(&splits) else {
                            continue;
                        };
                        let actual = bound(&child, slopes)[row] - p;
                        assert!(
                            (actual - g[k]).abs() < 1e-9,
                            "{l} {j} {row} {k}: {actual} {g:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 24, "{checked} children checked");
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
        let searched = [ndarray::arr2(&[[0.3, 0.4], [0.9, 1.5], [0.1, f64::NAN]])];
        assert_eq!(row_slopes(&units, Some(&searched), (0, 1)), vec![0.0, 1.0]);
        assert_eq!(row_slopes(&units, Some(&searched), (0, 2)), vec![0.0, 1.0]);
        assert_eq!(row_slopes(&units, Some(&searched), (0, 0)), vec![0.0, 0.4]);
        assert_eq!(row_slopes(&units, None, (0, 0)), vec![0.0, 1.0]);
        assert_eq!(row_slopes(&units, Some(&searched), (1, 0)), vec![0.0, 1.0]);
    }
}
