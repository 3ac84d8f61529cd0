//! What a slope search found: per hidden layer, the lower slopes and the split multipliers.

use ndarray::{Array2, Axis};

/// What the search found: per hidden layer, rows x units, the lower slopes and the split
/// constraints' multipliers (zero where no split is). A search may start from another's
/// (branch and bound's children from their parent's), rows selected alike.
#[derive(Clone, Debug)]
pub struct Multipliers {
    /// Lower slopes in `[0, 1]`.
    pub(in crate::bounds::local) slopes: Vec<Array2<f64>>,
    /// Multipliers `>= 0`.
    pub(in crate::bounds::local) betas: Vec<Array2<f64>>,
}

impl Multipliers {
    /// The rows `rows` (of the rows these were found for), in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Multipliers {
        let pick = |v: &Vec<Array2<f64>>| -> Vec<Array2<f64>> {
            v.iter().map(|a| a.select(Axis(0), rows)).collect()
        };
        Multipliers {
            slopes: pick(&self.slopes),
            betas: pick(&self.betas),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        8 * (self.slopes.iter().chain(&self.betas))
            .map(|a| a.len())
            .sum::<usize>()
    }
}
