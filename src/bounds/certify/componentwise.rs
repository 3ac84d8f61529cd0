//! Componentwise activation bounds (beyond the paper; docs/soundness.md "Componentwise bounds").
//!
//! The paper bounds a layer's rounding error through `rel_w || |W_l| |z_hat_{l-1}| ||` and that
//! by `rel_w |||W_l||| r_{l-1}`. With a reference activation `c_{l-1}` at the centre (the float64
//! execution's, or the input itself for the first layer) and `rho >= ||z_hat_{l-1} - c_{l-1}||`,
//! `|z_hat| <= |c| + |z_hat - c|` componentwise gives
//! `|| |W_l| |z_hat_{l-1}| || <= || |W_l| |c_{l-1}| || + |||W_l||| rho`, and for the output pair
//! `(|W_{L,i}| + |W_{L,j}|) . |z_hat| <= v_i + v_j + ||(|W_{L,i}| + |W_{L,j}|)|| rho` with
//! `v = |W_L| |c_{L-1}|`. This module measures `|| |W_l| |c_{l-1}| ||` and `v` per point, rounded
//! up: the sums of nonnegative `f64` products in any order are within `gamma_n` of the exact sum,
//! so `s <= s_hat / (1 - gamma_n)`, plus `2^-1074` per product for products below the normal
//! range.

use ndarray::{Array2, ArrayView2};

use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::sound::{add_up, div_up, l2_norm_up, mul_up, sub_down};
use crate::onnx::model::DenseNet;

use super::centre::HiCentre;
use super::model_bounds::{ModelBounds, PairBounds};
use super::quantities::gamma_n;
use super::tensor_core;

/// `|W_l|^T` of every dense layer (`None` for an affine step) with the factor that turns a
/// computed sum of `n_l` nonnegative products into an upper bound on the exact one.
pub struct AbsWeights {
    layers: Vec<Option<(Array2<f64>, f64, f64)>>,
}

/// Per point: `|| |W_l| |c_{l-1}| ||` for every layer (NaN for an affine step), and
/// `|W_L| |c_{L-1}|`.
#[derive(Default)]
pub struct AbsProducts {
    /// Row-major `[rows, L]`.
    pub norms: Vec<f64>,
    /// Row-major `[rows, classes]`.
    pub last: Vec<f64>,
}

impl AbsWeights {
    /// Prepare `net`'s absolute weights for the execution model `exec` (weights below the
    /// tensor cores' normal range count with [`tensor_core::alignment_weight`]).
    pub fn new(net: &DenseNet, exec: &ExecutionModel) -> AbsWeights {
        let lambda = exec.tensor_input_emin().map(crate::arith::format::pow2);
        let layers = net
            .layers
            .iter()
            .map(|l| {
                l.affine.is_none().then(|| {
                    let n = l.n() as u64;
                    // s <= s_hat / (1 - gamma_n), rounded up
                    let factor = div_up(1.0, sub_down(1.0, gamma_n(Format::Float64, n)));
                    let tiny = mul_up(n as f64, f64::from_bits(1));
                    (
                        l.w.t().mapv(|w| tensor_core::alignment_weight(w, lambda)),
                        factor,
                        tiny,
                    )
                })
            })
            .collect();
        AbsWeights { layers }
    }

    /// The products of one block of rows: `input` `[rows, n_1]` (the points) and `hidden`, the
    /// reference's outputs of layers `1..L-1`.
    pub fn measure(&self, input: ArrayView2<f64>, hidden: &[Array2<f64>]) -> AbsProducts {
        let rows = input.nrows();
        let depth = self.layers.len();
        let mut norms = vec![f64::NAN; rows * depth];
        let mut last = Vec::new();
        for (l, layer) in self.layers.iter().enumerate() {
            let Some((abs_wt, factor, tiny)) = layer else {
                continue;
            };
            let c = if l == 0 { input } else { hidden[l - 1].view() };
            let sums = c.mapv(f64::abs).dot(abs_wt);
            for (r, row) in sums.rows().into_iter().enumerate() {
                let up: Vec<f64> = row
                    .iter()
                    .map(|&s| add_up(mul_up(s, *factor), *tiny))
                    .collect();
                norms[r * depth + l] = l2_norm_up(up.iter().copied());
                if l + 1 == depth {
                    last.extend(up);
                }
            }
        }
        AbsProducts { norms, last }
    }
}

/// The componentwise deviation chain over the ball of radius `eps` (sec. 5's recursion with the
/// componentwise term): `D_0` the input deviation, then for every hidden layer
/// `D_l = alpha_l D_{l-1} + T_l + kappa_l (prefix_{l-1} eps + D^hi_{l-1}) + beta_l` with
/// `T_l = rel_w || |W_l| |c_{l-1}| ||` (an affine step: `kappa_l ||c_{l-1}||`). Returns `D_{L-1}` and
/// `rho_{L-1} = D_{L-1} + prefix_{L-1} eps + D^hi_{L-1} >= ||z_hat_{L-1}(x') - c_{L-1}||`.
/// The caller checks overflow over the ball with the measured radii (which bound the same
/// activations).
pub fn chain(
    fmt: &ModelBounds,
    x_norm: f64,
    hi: &HiCentre<'_>,
    dhi: &[f64],
    eps: f64,
) -> (f64, f64) {
    let depth = fmt.layers.len();
    let mut d = fmt.d0;
    for (l, lb) in fmt.layers[..depth - 1].iter().enumerate() {
        let norm_c = if l == 0 { x_norm } else { hi.norms[l - 1] };
        let spread = add_up(mul_up(fmt.lip_prefix[l], eps), dhi[l]);
        let own = match (lb.rounding.map(|r| r.rel_w), hi.abs_norms[l]) {
            (Some(rel_w), u) if u.is_finite() => mul_up(rel_w, u),
            _ => mul_up(lb.kappa_abs, norm_c),
        };
        d = add_up(
            add_up(
                add_up(mul_up(lb.alpha, d), own),
                mul_up(lb.kappa_abs, spread),
            ),
            lb.beta_const,
        );
    }
    let spread = add_up(mul_up(fmt.lip_prefix[depth - 1], eps), dhi[depth - 1]);
    (d, add_up(d, spread))
}

/// The componentwise final-pair error (Lemma "Final-layer pairwise deviation" with the
/// componentwise term): `||w_i - w_j|| d + rel_w (v_i + v_j) + rel_w ||(|w_i| + |w_j|)|| rho +
/// beta_const^{ij}`, for an input deviation `d` and `rho >= ||z_hat_{L-1} - c_{L-1}||`, rounded
/// up.
pub fn pair_error(
    p: &PairBounds,
    rel_w: f64,
    v: &[f64],
    (i, j): (usize, usize),
    d: f64,
    rho: f64,
) -> f64 {
    let own = mul_up(rel_w, add_up(v[i], v[j]));
    add_up(
        add_up(add_up(mul_up(p.diff, d), own), mul_up(p.kappa_abs, rho)),
        p.beta_const,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::model::{Activation, Dense};
    use ndarray::array;
    use rug::Rational;

    fn net(w: Array2<f64>) -> DenseNet {
        let layer = Dense {
            b: vec![0.0; w.nrows()],
            w,
            act: Activation::Identity,
            nodes: vec![],
            ops: vec![],
            casts: vec![],
            affine: None,
        };
        DenseNet::of_layers(vec![layer], Format::Float64)
    }

    /// `|W| |x|` bounds the exact products from above, and `|| |W| |x| ||` the exact norm.
    #[test]
    fn products_are_upper_bounds_of_the_exact_ones() {
        let w = array![[0.1, -0.7, 1e-300], [1.0 / 3.0, 2.0, -5e-324]];
        let x = array![[0.3, -1.0 / 7.0, 1e-10]];
        let p = AbsWeights::new(&net(w.clone()), &ExecutionModel::float64_reference())
            .measure(x.view(), &[]);
        let mut norm_sq = Rational::new();
        for i in 0..2 {
            let mut s = Rational::new();
            for j in 0..3 {
                s += Rational::from_f64(w[[i, j]].abs()).unwrap()
                    * Rational::from_f64(x[[0, j]].abs()).unwrap();
            }
            assert!(Rational::from_f64(p.last[i]).unwrap() >= s, "row {i}");
            norm_sq += s.clone() * &s;
        }
        let n = Rational::from_f64(p.norms[0]).unwrap();
        assert!(n.clone() * &n >= norm_sq);
    }
}
