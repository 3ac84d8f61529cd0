//! Split constraints of branch and bound (docs/soundness.md "Complete verification", B1-B2):
//! a subdomain fixes the phase of some hidden units, `z_hat_j >= 0` (active) or
//! `z_hat_j <= 0` (inactive), on the pre-activation of the execution the bounds speak about
//! (the real network's, or the deployed execution's with its rounding). Every execution has
//! each unit in at least one phase, so the two children of a split cover their parent.
//!
//! A split enters the bounds by clamping the unit's pre-activation bounds to its half-line
//! before the unit is relaxed: an active unit becomes the identity, an inactive one zero, both
//! exact over the subdomain. When the sound bounds of the unit, computed over the subdomain
//! with every split of earlier layers applied, miss the half-line, no execution of the
//! subdomain satisfies the splits: the subdomain is infeasible, shown, not assumed.

use super::interval::Bounds;

/// The phase a split fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// `z_hat_j >= 0`: the ReLU is the identity.
    Active,
    /// `z_hat_j <= 0`: the ReLU outputs 0.
    Inactive,
}

/// The phases a subdomain fixes: `(hidden layer, unit, phase)`, sorted, one per unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Splits(Vec<(usize, usize, Phase)>);

/// A split whose half-line the unit's sound bounds miss: the subdomain holds no execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Infeasible {
    /// The hidden layer (0-based).
    pub layer: usize,
    /// The unit.
    pub unit: usize,
}

impl Splits {
    /// No split: the whole input set.
    pub fn none() -> Splits {
        Splits(Vec::new())
    }

    /// These splits and unit `unit` of hidden layer `layer` fixed to `phase` (replacing a
    /// phase the unit had).
    pub fn with(&self, layer: usize, unit: usize, phase: Phase) -> Splits {
        let mut v: Vec<_> = (self.0.iter())
            .filter(|(l, j, _)| (*l, *j) != (layer, unit))
            .copied()
            .collect();
        v.push((layer, unit, phase));
        v.sort_unstable();
        Splits(v)
    }

    /// How many units are fixed.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no unit is fixed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fixed units, `(hidden layer, unit, phase)`, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &(usize, usize, Phase)> {
        self.0.iter()
    }
}

/// Clamps the bounds of hidden layer `layer` to the half-lines its splits fix: `lo := max(lo, 0)`
/// for an active unit, `hi := min(hi, 0)` for an inactive one. [`Infeasible`] when a unit's
/// bounds lie strictly on the other side (`hi < 0` for active, `lo > 0` for inactive). A split
/// naming a unit the layer does not have constrains nothing (bounds without a constraint hold
/// over a larger set), and is never taken for infeasibility.
pub(super) fn constrain(
    bounds: &mut Bounds,
    splits: &Splits,
    layer: usize,
) -> Result<(), Infeasible> {
    for &(l, unit, phase) in splits.iter().filter(|(l, _, _)| *l == layer) {
        let (Some(lo), Some(hi)) = (bounds.lo.get(unit).copied(), bounds.hi.get(unit).copied())
        else {
            continue;
        };
        let missed = match phase {
            Phase::Active => hi < 0.0,
            Phase::Inactive => lo > 0.0,
        };
        if missed {
            return Err(Infeasible { layer: l, unit });
        }
        match phase {
            Phase::Active => bounds.lo[unit] = lo.max(0.0),
            Phase::Inactive => bounds.hi[unit] = hi.min(0.0),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(lo: &[f64], hi: &[f64]) -> Bounds {
        Bounds {
            lo: lo.to_vec(),
            hi: hi.to_vec(),
        }
    }

    #[test]
    fn a_split_clamps_its_unit_and_no_other() {
        let s = Splits::none()
            .with(1, 0, Phase::Active)
            .with(1, 2, Phase::Inactive)
            .with(0, 1, Phase::Active);
        let mut x = b(&[-1.0, -2.0, -3.0], &[1.0, 2.0, 3.0]);
        assert_eq!(constrain(&mut x, &s, 1), Ok(()));
        assert_eq!(x, b(&[0.0, -2.0, -3.0], &[1.0, 2.0, 0.0]));
        let mut y = b(&[-1.0, -2.0], &[1.0, 2.0]);
        assert_eq!(constrain(&mut y, &s, 0), Ok(()));
        assert_eq!(y, b(&[-1.0, 0.0], &[1.0, 2.0]));
    }

    #[test]
    fn a_half_line_the_bounds_miss_is_infeasible_and_a_touching_one_is_not() {
        let act = Splits::none().with(0, 0, Phase::Active);
        let ina = Splits::none().with(0, 0, Phase::Inactive);
        let mut x = b(&[-2.0], &[-1e-300]);
        assert_eq!(
            constrain(&mut x, &act, 0),
            Err(Infeasible { layer: 0, unit: 0 })
        );
        let mut x = b(&[1e-300], &[2.0]);
        assert_eq!(
            constrain(&mut x, &ina, 0),
            Err(Infeasible { layer: 0, unit: 0 })
        );
        // z = 0 is in both phases
        let mut x = b(&[-2.0], &[0.0]);
        assert_eq!(constrain(&mut x, &act, 0), Ok(()));
        assert_eq!(x, b(&[0.0], &[0.0]));
        let mut x = b(&[0.0], &[2.0]);
        assert_eq!(constrain(&mut x, &ina, 0), Ok(()));
        assert_eq!(x, b(&[0.0], &[0.0]));
        // a unit the layer lacks constrains nothing and proves nothing
        let mut x = b(&[1.0], &[2.0]);
        let far = Splits::none().with(0, 5, Phase::Inactive);
        assert_eq!(constrain(&mut x, &far, 0), Ok(()));
        assert_eq!(x, b(&[1.0], &[2.0]));
    }

    #[test]
    fn splits_stay_sorted_and_one_per_unit() {
        let s = Splits::none()
            .with(2, 1, Phase::Active)
            .with(0, 3, Phase::Inactive)
            .with(2, 1, Phase::Inactive);
        let v: Vec<_> = s.iter().copied().collect();
        assert_eq!(v, vec![(0, 3, Phase::Inactive), (2, 1, Phase::Inactive)]);
        assert_eq!(s.len(), 2);
    }
}
