//! Which unstable unit a ReLU split fixes: BaBSR's score (Bunel et al. 2020) over the rows'
//! coefficients, for branch and bound's subdomains (`engine/complete/branch.rs`) and for a root's
//! branching on its own units ([`super::unit_branching`]). A choice steers a search only: any
//! split gives children that cover their parent (docs/soundness.md B1).

use ndarray::Array2;

use super::relax::UnitRelaxation;

/// Hidden layers, from the shallowest holding an unstable unit, whose units a ReLU split may
/// fix. A split at layer `l` makes every layer above it computed again, and with the root's
/// searched slopes those bounds tighten (docs/soundness.md B11): what a shallow split gains
/// reaches every layer above, which the score below, the split's effect through the unit's own
/// line alone, does not see. On mnistfc's 256x6 `prop_12_0.03` the score over every layer
/// leaves the search at -89.5 after 2,000 subdomains, the score over the first two layers
/// decides it in 231, over the first one alone in 571 (docs/performance.md "Session 20").
pub const SPLIT_LAYERS: usize = 2;

/// Up to `count` unstable hidden units whose split may most help row `row`'s bound, best first
/// (a BaBSR-style score, Bunel et al. 2020), among the [`SPLIT_LAYERS`] shallowest hidden layers
/// holding an unstable unit: the loss the unit's upper line costs the bound, `max(0, -m_j) t_j`
/// with `m_j` the row's coefficient on the unit's output and `t_j` the line's offset, then
/// `|m_j| t_j` (where no unit costs anything, every coefficient nonnegative); equals in
/// layer-then-unit order, a NaN score last. `(hidden layer, unit)`; empty when no unit is unstable.
pub fn relu_candidates(
    relax: &[Vec<UnitRelaxation>],
    coef: &[Array2<f64>],
    row: usize,
    count: usize,
) -> Vec<(usize, usize)> {
    let is_unstable = |u: &UnitRelaxation| matches!(u, UnitRelaxation::Unstable { .. });
    let layers = (relax.iter().zip(coef).enumerate())
        .filter(|(_, (units, _))| units.iter().any(is_unstable))
        .take(SPLIT_LAYERS);
    let number = |x: f64| if x.is_nan() { f64::NEG_INFINITY } else { x };
    let mut scored: Vec<((usize, usize), (f64, f64))> = Vec::new();
    for (l, (units, m)) in layers {
        for (j, unit) in units.iter().enumerate() {
            let UnitRelaxation::Unstable { offset, .. } = *unit else {
                continue;
            };
            let v = m.get((row, j)).copied().unwrap_or(0.0);
            let score = ((-v).max(0.0) * offset, v.abs() * offset);
            scored.push(((l, j), (number(score.0), number(score.1))));
        }
    }
    // stable: equals keep their layer-then-unit order
    scored.sort_by(|a, b| (b.1 .0.total_cmp(&a.1 .0)).then(b.1 .1.total_cmp(&a.1 .1)));
    scored.into_iter().take(count).map(|(at, _)| at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// The candidates are the best scored, in score order (equals in layer-then-unit order).
    #[test]
    fn the_candidates_are_the_best_scored_in_order() {
        let unstable = |offset| UnitRelaxation::Unstable {
            lower: 0.0,
            slope: 0.5,
            offset,
        };
        let relax = vec![vec![unstable(1.0), UnitRelaxation::Active, unstable(2.0)]];
        let coef = vec![ndarray::arr2(&[[-1.0, 5.0, -1.0], [3.0, 0.0, 1.0]])];
        assert_eq!(relu_candidates(&relax, &coef, 0, 8), vec![(0, 2), (0, 0)]);
        assert_eq!(relu_candidates(&relax, &coef, 0, 1), vec![(0, 2)]);
        assert_eq!(relu_candidates(&relax, &coef, 1, 8), vec![(0, 0), (0, 2)]);
        assert!(relu_candidates(&[], &[], 0, 8).is_empty());
        let nan = vec![ndarray::arr2(&[[f64::NAN, 0.0, 1.0]])];
        assert_eq!(relu_candidates(&relax, &nan, 0, 8), vec![(0, 2), (0, 0)]);
    }
    /// The best-scored candidate alone.
    fn top(
        relax: &[Vec<UnitRelaxation>],
        coef: &[Array2<f64>],
        row: usize,
    ) -> Option<(usize, usize)> {
        relu_candidates(relax, coef, row, 1).first().copied()
    }

    fn unstable(offset: f64) -> UnitRelaxation {
        UnitRelaxation::Unstable {
            lower: 0.0,
            slope: 0.5,
            offset,
        }
    }

    #[test]
    fn the_relu_split_is_the_costliest_upper_line() {
        let relax = vec![
            vec![unstable(1.0), UnitRelaxation::Active, unstable(3.0)],
            vec![unstable(2.0), UnitRelaxation::Inactive],
        ];
        // row 0: costs 0.5 * 1, 0 (m >= 0), 2 * 2 = 4 -> (1, 0)
        let coef = vec![
            array![[-0.5, -9.0, 1.0], [0.0, 0.0, -1.0]],
            array![[-2.0, -9.0], [0.0, 0.0]],
        ];
        assert_eq!(top(&relax, &coef, 0), Some((1, 0)));
        // row 1: only (0, 2) costs
        assert_eq!(top(&relax, &coef, 1), Some((0, 2)));
        // nothing costs: the largest |m| t, here (0, 2) with 1 * 3
        let free = vec![array![[0.5, 0.0, 1.0]], array![[0.0, 0.0]]];
        assert_eq!(top(&relax, &free, 0), Some((0, 2)));
        // equal scores: the first
        let tie = vec![array![[-3.0, 0.0, -1.0]], array![[0.0, 0.0]]];
        assert_eq!(top(&relax, &tie, 0), Some((0, 0)));
        let stable = vec![vec![UnitRelaxation::Active], vec![UnitRelaxation::Inactive]];
        assert_eq!(top(&stable, &coef, 0), None);
    }

    /// Only the two shallowest layers holding an unstable unit are scored: a costlier unit
    /// above them is not chosen, and a layer without one does not count.
    #[test]
    fn the_relu_split_is_in_the_two_shallowest_unstable_layers() {
        let layer = |u: UnitRelaxation| vec![u, UnitRelaxation::Active];
        let coef = |n: usize| vec![array![[-1.0, 0.0]]; n];
        // costs 1, 2 and 9: the third layer's is not scored
        let three = vec![
            layer(unstable(1.0)),
            layer(unstable(2.0)),
            layer(unstable(9.0)),
        ];
        assert_eq!(SPLIT_LAYERS, 2);
        assert_eq!(top(&three, &coef(3), 0), Some((1, 0)));
        // the first layer stable: the second and third are scored
        let first_stable = vec![
            layer(UnitRelaxation::Inactive),
            layer(unstable(2.0)),
            layer(unstable(9.0)),
            layer(unstable(20.0)),
        ];
        assert_eq!(top(&first_stable, &coef(4), 0), Some((2, 0)));
    }
}
