//! A search's multipliers kept for a later search's start (branch and bound's children start
//! from their parent's): in single precision, and only at the units a later search over a part
//! of the same subdomain can read, the largest part of a queued subdomain made small.

use ndarray::{Array2, Axis};

use super::multipliers::Multipliers;
use crate::bounds::local::relax::UnitRelaxation;
use crate::bounds::local::split::Splits;

/// [`Multipliers`] kept for a later search's start, per hidden layer at the units it keeps
/// (rows x kept units). Only a search's starting point is rounded or left out, and a search
/// projects its start onto `[0, 1]` and `[0, inf)` (which rounding to nearest keeps values in
/// anyway, and 0 is in both), so every bound stays sound whatever the start.
#[derive(Clone, Debug)]
pub struct StoredMultipliers {
    /// Per hidden layer, its width.
    widths: Vec<usize>,
    /// Per hidden layer, the units kept, ascending.
    units: Vec<Vec<u32>>,
    /// Per hidden layer, the lower slopes at the kept units.
    slopes: Vec<Array2<f32>>,
    /// Per hidden layer, the split multipliers at the kept units.
    betas: Vec<Array2<f32>>,
}

impl Multipliers {
    /// These multipliers kept for a search over a part of the subdomain they were found for (its
    /// children), in single precision, at the units such a search reads: per hidden layer, those
    /// the subdomain's relaxations `relax` leave unstable (a lower slope is read only at an
    /// unstable unit, and a child's bounds, which lie inside its parent's, leave no other unit
    /// unstable) and those its `splits` fix (a multiplier is read only at a split unit, and a
    /// child's new split is at a unit unstable here). `None` where the shapes disagree.
    pub fn stored(
        &self,
        relax: &[Vec<UnitRelaxation>],
        splits: &Splits,
    ) -> Option<StoredMultipliers> {
        let same = |a: &[Array2<f64>]| {
            a.len() == relax.len() && a.iter().zip(relax).all(|(m, r)| m.ncols() == r.len())
        };
        if !same(&self.slopes) || !same(&self.betas) {
            return None;
        }
        let units: Vec<Vec<u32>> = (relax.iter().enumerate())
            .map(|(l, layer)| {
                (layer.iter().enumerate())
                    .filter(|(j, u)| {
                        matches!(u, UnitRelaxation::Unstable { .. })
                            || splits.iter().any(|s| (s.0, s.1) == (l, *j))
                    })
                    .map(|(j, _)| j as u32)
                    .collect()
            })
            .collect();
        let narrow = |v: &[Array2<f64>]| -> Vec<Array2<f32>> {
            (v.iter().zip(&units))
                .map(|(a, at)| {
                    let at: Vec<usize> = at.iter().map(|j| *j as usize).collect();
                    a.select(Axis(1), &at).mapv(|x| x as f32)
                })
                .collect()
        };
        Some(StoredMultipliers {
            widths: relax.iter().map(Vec::len).collect(),
            slopes: narrow(&self.slopes),
            betas: narrow(&self.betas),
            units,
        })
    }
}

impl StoredMultipliers {
    /// The rows `rows` (of the rows these were found for), in that order, in double precision,
    /// every unit not kept 0.
    pub fn select_rows(&self, rows: &[usize]) -> Multipliers {
        let widen = |v: &[Array2<f32>]| -> Vec<Array2<f64>> {
            (v.iter().zip(&self.units).zip(&self.widths))
                .map(|((a, at), width)| {
                    let mut out = Array2::zeros((rows.len(), *width));
                    for (t, &r) in rows.iter().enumerate() {
                        for (k, &j) in at.iter().enumerate() {
                            out[[t, j as usize]] = f64::from(a[[r, k]]);
                        }
                    }
                    out
                })
                .collect()
        };
        Multipliers {
            slopes: widen(&self.slopes),
            betas: widen(&self.betas),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let entries: usize = (self.slopes.iter().chain(&self.betas))
            .map(|a| a.len())
            .sum();
        let units: usize = self.units.iter().map(Vec::len).sum();
        4 * (entries + units) + 8 * self.widths.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::local::split::Phase;
    use ndarray::array;

    fn unstable() -> UnitRelaxation {
        UnitRelaxation::Unstable {
            lower: 0.0,
            slope: 0.5,
            offset: 1.0,
        }
    }

    /// Kept: the unstable units and the split ones, each value rounded to single precision;
    /// read back: the rows asked for, in their order, 0 at every other unit; the bytes are the
    /// kept entries' and units'.
    #[test]
    fn only_the_unstable_and_split_units_are_kept() {
        let relax = vec![
            vec![unstable(), UnitRelaxation::Active, UnitRelaxation::Inactive],
            vec![UnitRelaxation::Active, unstable()],
        ];
        let splits = Splits::none().with(0, 2, Phase::Inactive);
        let third = 1.0 / 3.0;
        let m = Multipliers {
            slopes: vec![
                array![[third, 0.5, 0.25], [0.75, 1.0, 1.0]],
                array![[1.0, 0.125], [0.0, 0.5]],
            ],
            betas: vec![
                array![[0.0, 0.0, 2.0], [0.0, 0.0, third]],
                array![[9.0, 0.0], [0.0, 0.0]],
            ],
        };
        let s = m.stored(&relax, &splits).unwrap();
        assert_eq!(s.units, vec![vec![0, 2], vec![1]]);
        assert_eq!(s.bytes(), 4 * (2 * (4 + 2) + 3) + 8 * 2);
        let back = s.select_rows(&[1, 0]);
        let t32 = f64::from(third as f32);
        assert_ne!(t32, third);
        assert_eq!(back.slopes[0], array![[0.75, 0.0, 1.0], [t32, 0.0, 0.25]]);
        assert_eq!(back.slopes[1], array![[0.0, 0.5], [0.0, 0.125]]);
        assert_eq!(back.betas[0], array![[0.0, 0.0, t32], [0.0, 0.0, 2.0]]);
        // a multiplier at a unit neither unstable nor split is not kept (it is never read)
        assert_eq!(back.betas[1], array![[0.0, 0.0], [0.0, 0.0]]);
        // shapes that disagree with the relaxations keep nothing
        assert!(m.stored(&relax[..1], &splits).is_none());
        let narrow = vec![relax[0].clone(), vec![unstable()]];
        assert!(m.stored(&narrow, &splits).is_none());
    }
}
