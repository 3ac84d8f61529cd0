//! The lower slopes a set's search found for its hidden units' own bounds, kept so that the
//! bounds of a part of the set (branch and bound's subdomains) can be computed again with them
//! instead of CROWN's adaptive slopes (docs/soundness.md B11).
//!
//! A subdomain's bounds on a unit lie inside the set's, so every unit unstable over the
//! subdomain was unstable over the set and has its two rows here. Any lower slope in `[0, 1]`
//! gives a sound lower line whatever the bounds it is used with (L5), so the slopes found for
//! the larger set are sound for the smaller one; they are only a better guess than CROWN's,
//! which ignore what the search learnt at the root.

use ndarray::{Array2, Axis};

/// For one hidden layer, the units the search bounded (ascending) and, per hidden layer below,
/// the slopes it found for their rows: row `2t` bounds unit `units[t]` from below, row `2t + 1`
/// its negation (the upper bound).
#[derive(Clone, Debug)]
pub struct UnitSlopes {
    /// The units bounded, ascending.
    units: Vec<usize>,
    /// Per hidden layer below, rows x units.
    slopes: Vec<Array2<f64>>,
}

impl UnitSlopes {
    /// The slopes `slopes` found for the rows `2t`, `2t + 1` of each of `units` (ascending);
    /// `None` where the rows disagree with the units.
    pub(in crate::bounds::local) fn new(
        units: Vec<usize>,
        slopes: Vec<Array2<f64>>,
    ) -> Option<UnitSlopes> {
        let ascending = units.windows(2).all(|w| w[0] < w[1]);
        let rows = slopes.iter().all(|s| s.nrows() == 2 * units.len());
        (ascending && rows).then_some(UnitSlopes { units, slopes })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        8 * self.units.len() + 8 * self.slopes.iter().map(|s| s.len()).sum::<usize>()
    }

    /// Per hidden layer below, the slopes of the rows `2t`, `2t + 1` for each of `wanted` (rows
    /// in that order), each clamped to `[0, 1]` (a NaN stays NaN, which the substitution reads
    /// as CROWN's slope); `None` when some unit of `wanted` was not bounded here.
    pub(in crate::bounds::local) fn rows_for(&self, wanted: &[usize]) -> Option<Vec<Array2<f64>>> {
        let mut rows = Vec::with_capacity(2 * wanted.len());
        for j in wanted {
            let t = self.units.binary_search(j).ok()?;
            rows.extend([2 * t, 2 * t + 1]);
        }
        let pick = |s: &Array2<f64>| s.select(Axis(0), &rows).mapv(|v| v.clamp(0.0, 1.0));
        Some(self.slopes.iter().map(pick).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// Units 2 and 5, one layer below with two units: the rows of the units asked for, in their
    /// order, clamped to `[0, 1]`; a unit not bounded gives nothing; rows that disagree with
    /// the units or units out of order are refused.
    #[test]
    fn the_rows_of_the_units_asked_for_clamped_to_the_unit_interval() {
        let slopes = array![[0.5, 1.5], [-0.25, 0.75], [0.125, f64::NAN], [1.0, 0.0]];
        let Some(found) = UnitSlopes::new(vec![2, 5], vec![slopes.clone()]) else {
            panic!("two units, four rows")
        };
        let Some(picked) = found.rows_for(&[5, 2]) else {
            panic!("both units were bounded")
        };
        assert_eq!(picked.len(), 1);
        let expected = [[0.125, f64::NAN], [1.0, 0.0], [0.5, 1.0], [0.0, 0.75]];
        for (r, row) in expected.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                let got = picked[0][[r, j]];
                assert!(got == *v || (got.is_nan() && v.is_nan()), "{r},{j}: {got}");
            }
        }
        assert!(found.rows_for(&[2, 3]).is_none());
        assert!(UnitSlopes::new(vec![5, 2], vec![slopes.clone()]).is_none());
        assert!(UnitSlopes::new(vec![2], vec![slopes]).is_none());
    }
}
