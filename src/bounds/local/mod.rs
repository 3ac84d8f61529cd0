//! Local bounds: lower bounds on the **real** network's logit margins over the l2 ball around a
//! point, by linear bound propagation (CROWN: per-layer pre-activation bounds, linear ReLU
//! relaxations, backward substitution, the l2 dual norm at the input), computed in float64 with
//! every rounding bounded (docs/soundness.md "Local bounds").
//!
//! The certificate of mode `local` subtracts from these the deployed execution's deviation over
//! the ball (the same ball bounds as every other mode), so the local bound itself only has to
//! be a rigorous bound on the real network. Pre-activation bounds of each hidden layer are the
//! intersection of three sound sources: the per-unit Lipschitz bound around the centre
//! (`|z_j(x) - z_j(x0)| <= ||W_j|| prod_{k<l} ||W_k|| eps`), interval propagation from the
//! previous layer, and CROWN's backward substitution for the units the first two leave unstable.

mod backward;
pub mod interval;
pub mod relax;

use ndarray::{Array1, Array2, ArrayView1};

use crate::arith::sound::{add_up, l2_norm_up, mul_up, sub_down};
use crate::onnx::model::{Activation, DenseNet};
use interval::{layer_box, point, Bounds};
use relax::{relax_unit, UnitRelaxation};

/// One dense layer as the local bounds read it.
pub struct LocalLayer<'a> {
    /// `W_l` (`m_l x n_l`).
    w: &'a Array2<f64>,
    /// `|W_l|`.
    abs_w: Array2<f64>,
    /// `b_l`.
    b: Array1<f64>,
    /// `|b_l|`.
    abs_b: Array1<f64>,
    /// `||W_{l,j}||_2` per row, rounded up.
    row_norms: Vec<f64>,
}

/// A network prepared for local bounds.
pub struct LocalNet<'a> {
    layers: Vec<LocalLayer<'a>>,
    /// `fl(W_1 W_1^T)`: the input layer's Gram matrix, so that `||Lambda W_1||` costs a product
    /// with `m_1` columns instead of `n_1` (`backward::concretise`).
    input_gram: Array2<f64>,
    /// `||W_1||_F^2`, rounded up.
    input_frob2: f64,
    /// `prod_{k<l} ||W_k||` per layer `l` (upper bounds; index 0 is 1; infinite when unknown).
    lip_prefix: Vec<f64>,
}

/// Pre-activation bounds of every hidden layer over the ball, with their relaxations.
pub struct HiddenBounds {
    /// Per hidden layer, bounds on its pre-activations.
    pub pre: Vec<Bounds>,
    /// Per hidden layer, each unit's relaxation.
    relax: Vec<Vec<UnitRelaxation>>,
}

impl<'a> LocalNet<'a> {
    /// Prepares `net`; `lip_prefix` as in [`crate::bounds::certify::ModelBounds::lip_prefix`]
    /// (upper bounds of the products of the layers' spectral norms), `None` when the norms are
    /// unknown. Refused, with the reason, for what local bounds do not cover: affine steps.
    pub fn new(net: &'a DenseNet, lip_prefix: Option<&[f64]>) -> Result<LocalNet<'a>, String> {
        let depth = net.layers.len();
        let mut layers = Vec::with_capacity(depth);
        for (l, layer) in net.layers.iter().enumerate() {
            if layer.affine.is_some() {
                return Err(format!(
                    "local bounds do not cover affine steps (layer {})",
                    l + 1
                ));
            }
            let hidden = l + 1 < depth;
            if hidden != (layer.act == Activation::Relu) {
                return Err(format!(
                    "local bounds need ReLU on every hidden layer and none on the output (layer {})",
                    l + 1
                ));
            }
            layers.push(LocalLayer {
                w: &layer.w,
                abs_w: layer.w.mapv(f64::abs),
                b: Array1::from(layer.b.clone()),
                abs_b: layer.b.iter().map(|v| v.abs()).collect(),
                row_norms: layer
                    .w
                    .rows()
                    .into_iter()
                    .map(|r| l2_norm_up(r.iter().copied()))
                    .collect(),
            });
        }
        let lip_prefix = match lip_prefix {
            Some(p) if p.len() == depth => p.to_vec(),
            _ => std::iter::once(1.0)
                .chain(std::iter::repeat(f64::INFINITY))
                .take(depth)
                .collect(),
        };
        let w1 = &net.layers[0].w;
        let input_gram = w1.dot(&w1.t());
        let input_frob2 = mul_up(
            l2_norm_up(w1.iter().copied()),
            l2_norm_up(w1.iter().copied()),
        );
        Ok(LocalNet {
            layers,
            input_gram,
            input_frob2,
            lip_prefix,
        })
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.layers.last().map_or(0, |l| l.w.nrows())
    }

    /// Bounds on every hidden pre-activation `z_l(x)` over `||x - x0||_2 <= eps` (`eps` an upper
    /// bound of the radius, `x0` the exact input). `None` when a bound is not finite.
    pub fn hidden_bounds(&self, x0: &[f64], eps: f64) -> Option<HiddenBounds> {
        let x = ArrayView1::from(x0);
        let hidden = self.layers.len() - 1;
        let mut out = HiddenBounds {
            pre: Vec::with_capacity(hidden),
            relax: Vec::with_capacity(hidden),
        };
        // enclosure of the centre's activations h_{l-1}(x0)
        let mut centre = point(x);
        for l in 0..hidden {
            let layer = &self.layers[l];
            let at_centre = layer_box(layer, &centre);
            let spread = mul_up(eps, self.lip_prefix[l]);
            let lipschitz = Bounds {
                lo: (at_centre.lo.iter().zip(&layer.row_norms))
                    .map(|(c, n)| sub_down(*c, mul_up(spread, *n)))
                    .collect(),
                hi: (at_centre.hi.iter().zip(&layer.row_norms))
                    .map(|(c, n)| add_up(*c, mul_up(spread, *n)))
                    .collect(),
            };
            let mut bounds = match out.pre.last() {
                None => lipschitz,
                Some(prev) => lipschitz.intersect(&layer_box(layer, &prev.relu())),
            };
            if l > 0 {
                self.tighten(l, &mut bounds, &out, x, eps);
            }
            let relax = (bounds.lo.iter().zip(&bounds.hi))
                .map(|(lo, hi)| relax_unit(*lo, *hi))
                .collect::<Option<Vec<_>>>()?;
            out.pre.push(bounds);
            out.relax.push(relax);
            centre = at_centre.relu();
        }
        Some(out)
    }

    /// CROWN bounds for the units of hidden layer `l` that `bounds` leaves unstable: one
    /// backward substitution with rows `e_j` and `-e_j` per such unit.
    fn tighten(
        &self,
        l: usize,
        bounds: &mut Bounds,
        below: &HiddenBounds,
        x: ArrayView1<f64>,
        eps: f64,
    ) {
        let unstable: Vec<usize> = (0..bounds.lo.len())
            .filter(|&j| bounds.lo[j] < 0.0 && bounds.hi[j] > 0.0)
            .collect();
        if unstable.is_empty() {
            return;
        }
        let mut c = Array2::zeros((2 * unstable.len(), bounds.lo.len()));
        for (t, &j) in unstable.iter().enumerate() {
            c[[2 * t, j]] = 1.0;
            c[[2 * t + 1, j]] = -1.0;
        }
        let lower = backward::lower_bounds(self, l, c, (&below.pre, &below.relax), x, eps);
        for (t, &j) in unstable.iter().enumerate() {
            bounds.lo[j] = bounds.lo[j].max(lower[2 * t]);
            bounds.hi[j] = bounds.hi[j].min(-lower[2 * t + 1]);
        }
    }

    /// Lower bounds on the real margins `z_i(x) - z_j(x)` over `||x - x0||_2 <= eps`, one per
    /// class `j` (`+inf` at `j = i`, `-inf` where no finite bound holds).
    pub fn margin_lower_bounds(&self, x0: &[f64], eps: f64, i: usize) -> Vec<f64> {
        self.point_bounds(x0, eps, i).0
    }

    /// [`LocalNet::margin_lower_bounds`] with the hidden layers' bounds they rest on (`None`
    /// when a bound was not finite: then every margin bound is `-inf`).
    pub fn point_bounds(&self, x0: &[f64], eps: f64, i: usize) -> (Vec<f64>, Option<HiddenBounds>) {
        let classes = self.classes();
        let Some(hidden) = self.hidden_bounds(x0, eps) else {
            let none = (0..classes)
                .map(|j| {
                    if j == i {
                        f64::INFINITY
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            return (none, None);
        };
        let others: Vec<usize> = (0..classes).filter(|&j| j != i).collect();
        let mut c = Array2::zeros((others.len(), classes));
        for (t, &j) in others.iter().enumerate() {
            c[[t, i]] = 1.0;
            c[[t, j]] = -1.0;
        }
        let top = self.layers.len() - 1;
        let x = ArrayView1::from(x0);
        let lower = backward::lower_bounds(self, top, c, (&hidden.pre, &hidden.relax), x, eps);
        let mut out = vec![f64::INFINITY; classes];
        for (t, &j) in others.iter().enumerate() {
            out[j] = lower[t];
        }
        (out, Some(hidden))
    }
}
