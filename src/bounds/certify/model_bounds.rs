//! What depends only on the model, precomputed once ([`ModelBounds`]: per layer
//! [`LayerBounds`], per class pair [`PairBounds`]), and the per-instance helpers every mode
//! reads the centre logits with.

use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::sound::{mul_up, sqrt_up, sub_down};
use crate::bounds::local::LayerRounding;
use crate::bounds::norms::LayerNorms;
use crate::onnx::model::{DenseNet, HeadOp};

use super::layer_bounds::{dense_layer_bounds, layer_terms, pair_table, step_layer_bounds};
use super::quantities::{deviation_step, overflow_free, radius_step, OverflowConstants};
use super::refusal::Refusal;
use super::{affine, head, quantities};

/// Outcome of one mode at one instance.
pub type Verdict = Result<(), Refusal>;

/// Model-level constants of one hidden or output layer.
#[derive(Clone, Debug)]
pub struct LayerBounds {
    /// `||W_l||` (upper bound).
    pub spectral: f64,
    /// `alpha_l = ||W_l|| + rel_w |||W_l|||` (sec. 5, the paper's `kappa_{n_l}` generalised to
    /// the execution model's `LayerError`).
    pub alpha: f64,
    /// `rel_w |||W_l|||`, the coefficient of `r` in `beta_l(r)`.
    pub kappa_abs: f64,
    /// `rel_b ||b_l|| + abs sqrt(m_l)` (the paper's `u ||b_l|| + (1+u) a_dot(n_l) sqrt(m_l)`).
    pub beta_const: f64,
    /// `||b_l||_2` (upper bound).
    pub bias_l2: f64,
    /// Constants of the layer's overflow check.
    pub overflow: OverflowConstants,
    /// The componentwise rounding model of a dense layer, `(rel_w, rel_b, abs)` rounded up (the
    /// componentwise bounds multiply `|| |W_l| |c| ||` by `rel_w`; local bounds use all three);
    /// `None` for an affine step.
    pub rounding: Option<LayerRounding>,
}

/// Model-level constants of one ordered class pair `(i, j)` of the output layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct PairBounds {
    /// `alpha^{ij} = ||W_{L,i} - W_{L,j}|| + rel_w ||(|W_{L,i}| + |W_{L,j}|)||`.
    pub alpha: f64,
    /// `rel_w ||(|W_{L,i}| + |W_{L,j}|)||`.
    pub kappa_abs: f64,
    /// `rel_b (|b_{L,i}| + |b_{L,j}|) + 2 abs` (the paper's `u (...) + 2 (1+u) a_dot(n_L)`).
    pub beta_const: f64,
    /// Margin Lipschitz constant `L_{ij} = ||W_{L,i} - W_{L,j}|| prod_{l<L} ||W_l||`.
    pub lip: f64,
    /// `||W_{L,i} - W_{L,j}||` (upper bound).
    pub diff: f64,
}

/// Everything the per-instance certificates need that depends only on the model, the format
/// and the norms.
#[derive(Clone, Debug)]
pub struct ModelBounds {
    /// Deployment (storage) format.
    pub format: Format,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
    /// The execution model the bounds cover.
    pub execution: ExecutionModel,
    /// One entry per layer (the last is the output layer).
    pub layers: Vec<LayerBounds>,
    /// `classes x classes` pair table, row-major by `(i, j)`.
    pub pairs: Vec<PairBounds>,
    /// Number of classes.
    pub classes: usize,
    /// `prod_{k<=l} ||W_k||` for `l = 0..L-1` (index 0 is 1): the Lipschitz constant of the map
    /// from the input to layer `l`, used by the measured radii.
    pub lip_prefix: Vec<f64>,
    /// Deviation base case `D_0`: 0, or `lambda sqrt(n_1)` under FTZ (Appendix; the largest
    /// `lambda` of the formats involved).
    pub d0: f64,
    /// The logit margin the model's classifier head needs on top of the certificate (0 for
    /// logits): every sound mode proves `m_hat_{ij} > head_margin` ([`head::head_margin`]).
    pub head_margin: f64,
    /// When set, no instance can be certified in a sound mode, and why.
    pub vacuous: Option<String>,
    /// The zero-floor class of a ReLU output ([`DenseNet::floor_class`]): a point whose
    /// predicted class it is has no positive output and is never certified.
    pub floor_class: Option<usize>,
}

impl ModelBounds {
    /// Precompute the bounds of `net` (already converted to the storage format) from its layer
    /// norms, for every execution the model `exec` covers.
    pub fn new(net: &DenseNet, norms: &[LayerNorms], exec: &ExecutionModel) -> Self {
        let mut vacuous = None;
        let mut layers = Vec::with_capacity(net.layers.len());
        let mut last_err = None;
        for (l, (layer, nrm)) in net.layers.iter().zip(norms).enumerate() {
            if let Some(step) = &layer.affine {
                layers.push(step_layer_bounds(&affine::step_bounds(step, exec.storage)));
                continue;
            }
            let previous = l.checked_sub(1).map(|p| &net.layers[p]);
            let (err, checks, vac) = layer_terms(exec, layer, previous, l);
            vacuous = vacuous.or(vac);
            layers.push(dense_layer_bounds(layer, nrm, &err, exec, checks));
            last_err = Some(err);
        }
        let last_err = last_err.expect("a network has at least one layer");
        let last = &net.layers[net.layers.len() - 1];
        let mut lip_prefix = vec![1.0];
        for lb in &layers[..layers.len() - 1] {
            lip_prefix.push(mul_up(lip_prefix[lip_prefix.len() - 1], lb.spectral));
        }
        let pairs = pair_table(
            last,
            &last_err,
            lip_prefix[lip_prefix.len() - 1],
            exec.tensor_input_emin().map(crate::arith::format::pow2),
        );
        let head_margin = head::head_margin(&net.head, exec.storage, last.m() as u64);
        if head_margin.is_none() && vacuous.is_none() {
            vacuous = Some(format!(
                "the classifier head's top probability can underflow in {} with {} classes: \
                 the head cannot be certified (docs/soundness.md \"Classifier heads\")",
                exec.storage,
                last.m()
            ));
        }
        if let Some(o) = exec.output_rounding {
            let elementwise = net.layers.iter().any(|l| l.affine.is_some())
                || net
                    .head
                    .iter()
                    .any(|h| matches!(h, HeadOp::Softmax | HeadOp::LogSoftmax));
            if elementwise && vacuous.is_none() {
                vacuous = Some(format!(
                    "elementwise steps and Softmax/LogSoftmax heads computed in the runtime's {o} \
                     inference precision are not modelled; cut them from the graph or certify for \
                     another runtime"
                ));
            }
        }
        let d0 = if exec.ftz {
            mul_up(exec.largest_lambda(), sqrt_up(net.input_dim() as f64))
        } else {
            0.0
        };
        ModelBounds {
            format: exec.storage,
            ftz: exec.ftz,
            execution: *exec,
            layers,
            pairs,
            classes: last.m(),
            lip_prefix,
            d0,
            head_margin: head_margin.unwrap_or(f64::INFINITY),
            vacuous,
            floor_class: net.floor_class(),
        }
    }

    /// Tighten the Lipschitz prefixes (and the pairs' `L_{ij}`) with `merged[k]`, the norm of
    /// the composed map of layers `k-1` and `k` when one is an affine step
    /// ([`crate::bounds::norms::merged_step_norms`]): `prefix[k+1] = min(prefix[k] ||W_k||,
    /// prefix[k-1] ||composed||)`, both upper bounds on the Lipschitz constant to layer `k+1`.
    pub fn use_merged_norms(&mut self, merged: &[Option<f64>]) {
        let depth = self.layers.len();
        let mut prefix = vec![1.0];
        for l in 1..depth {
            let mut p = mul_up(prefix[l - 1], self.layers[l - 1].spectral);
            if let Some(Some(m)) = merged.get(l - 1).filter(|_| l >= 2) {
                p = p.min(mul_up(prefix[l - 2], *m));
            }
            prefix.push(p);
        }
        let last = prefix[depth - 1];
        for pair in &mut self.pairs {
            pair.lip = mul_up(pair.diff, last);
        }
        self.lip_prefix = prefix;
    }

    /// The centre deviation bound `E_ctr^{ij}` (Lemma "Final-layer pairwise deviation" on the
    /// deterministic chain from `r_0 = x_norm`, `eps = 0`): for every covered execution at a
    /// point of norm at most `x_norm`, `|m_hat_{ij} - m_{ij}|` is at most this; or the layer
    /// whose overflow check fails.
    pub fn margin_deviation(&self, x_norm: f64, i: usize, j: usize) -> Result<f64, Refusal> {
        let (r, d) = self.hidden_chain(x_norm)?;
        let p = self.pair(i, j);
        Ok(quantities::final_pair_bounds(
            p.alpha,
            d,
            p.kappa_abs,
            r,
            p.beta_const,
        ))
    }

    /// Pair bounds for predicted class `i` and competitor `j`.
    pub fn pair(&self, i: usize, j: usize) -> &PairBounds {
        &self.pairs[i * self.classes + j]
    }

    /// The interleaved forward induction (sec. 4 "Interleaved forward induction" with the
    /// deviation recursion of sec. 5) from input radius `r0`: checks overflow-freedom at every
    /// layer `1..=L` and returns `(r_{L-1}, D_{L-1})`.
    pub fn hidden_chain(&self, r0: f64) -> Result<(f64, f64), Refusal> {
        let mut r = r0;
        let mut d = self.d0;
        let last = self.layers.len() - 1;
        for (l, lb) in self.layers.iter().enumerate() {
            if !overflow_free(&lb.overflow, r, d) {
                return Err(Refusal::Overflow(l + 1));
            }
            if l == last {
                break;
            }
            d = deviation_step(lb.alpha, d, lb.kappa_abs, r, lb.beta_const);
            r = radius_step(lb.spectral, r, lb.bias_l2);
        }
        Ok((r, d))
    }
}

impl ModelBounds {
    /// The deterministic forward induction from `r0`, recording `r_l` and `D_l` for
    /// `l = 0..L-1` (sec. 4 and 5); overflow is checked at every layer `1..=L`.
    pub fn deviation_profile(&self, r0: f64) -> Result<(Vec<f64>, Vec<f64>), Refusal> {
        let depth = self.layers.len();
        let mut radii = Vec::with_capacity(depth);
        let mut devs = Vec::with_capacity(depth);
        let (mut r, mut d) = (r0, self.d0);
        for (l, lb) in self.layers.iter().enumerate() {
            if let Some(p) = l.checked_sub(1).map(|k| &self.layers[k]) {
                d = deviation_step(p.alpha, d, p.kappa_abs, r, p.beta_const);
                r = radius_step(p.spectral, r, p.bias_l2);
            }
            radii.push(r);
            devs.push(d);
            if !overflow_free(&lb.overflow, r, d) {
                return Err(Refusal::Overflow(l + 1));
            }
        }
        Ok((radii, devs))
    }

    /// The deviation recursion driven by given radii `r_0..r_{L-1}` (any valid bounds on the
    /// real activation norms over the ball: Lemma "Measured radii"), with the overflow checks
    /// at every layer `1..=L` using the same radii. Returns `D_{L-1}`.
    pub fn chain_with_radii(&self, radii: &[f64]) -> Result<f64, Refusal> {
        let mut d = self.d0;
        let last = self.layers.len() - 1;
        for (l, (lb, &r)) in self.layers.iter().zip(radii).enumerate() {
            if !overflow_free(&lb.overflow, r, d) {
                return Err(Refusal::Overflow(l + 1));
            }
            if l < last {
                d = deviation_step(lb.alpha, d, lb.kappa_abs, r, lb.beta_const);
            }
        }
        Ok(d)
    }
}

/// Index of the largest logit (the first on ties), or `None` when a logit is not finite.
pub fn predicted_class(logits: &[f64]) -> Option<usize> {
    if logits.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut best = 0;
    for (k, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = k;
        }
    }
    Some(best)
}

/// Lower bound on the deployed margin `m_hat_{ij} = y_i - y_j` (logits are exact format values).
#[inline]
pub fn margin_lower(logits: &[f64], i: usize, j: usize) -> f64 {
    sub_down(logits[i], logits[j])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicted_class_handles_ties_and_nan() {
        assert_eq!(predicted_class(&[1.0, 3.0, 3.0]), Some(1));
        assert_eq!(predicted_class(&[1.0, f64::NAN]), None);
        assert_eq!(predicted_class(&[f64::INFINITY, 0.0]), None);
    }

    #[test]
    fn refusal_codes_round_trip() {
        for r in [
            Refusal::Margin,
            Refusal::Overflow(3),
            Refusal::NonFiniteLogits,
            Refusal::ReferenceOverflow(2),
            Refusal::Model,
            Refusal::NoReference,
            Refusal::NoLocal,
            Refusal::Falsified,
            Refusal::Undecided,
        ] {
            // every variant is listed: adding one without listing it fails to compile here
            match r {
                Refusal::Margin
                | Refusal::Overflow(_)
                | Refusal::NonFiniteLogits
                | Refusal::ReferenceOverflow(_)
                | Refusal::Model
                | Refusal::NoReference
                | Refusal::NoLocal
                | Refusal::Falsified
                | Refusal::Undecided => {}
            }
            assert_eq!(Refusal::from_code(&r.code()), Some(r));
        }
        assert_eq!(Refusal::from_code("bogus"), None);
        assert_eq!(Refusal::from_code("overflow:x"), None);
    }

    #[test]
    fn refusals_read_as_their_reason() {
        assert_eq!(Refusal::Margin.to_string(), "margin too small");
        assert_eq!(
            Refusal::Overflow(2).to_string(),
            "overflow not excluded at layer 2"
        );
        assert_eq!(
            Refusal::ReferenceOverflow(1).to_string(),
            "float64 reference: overflow not excluded at layer 1"
        );
    }

    /// Three dense layers `2 -> 2 -> 2 -> 2`, each `||W|| = 2`, with norm bounds 2, 3 and 5.
    fn three_layers() -> (DenseNet, Vec<LayerNorms>) {
        let layer = |l: usize| crate::onnx::model::Dense {
            w: ndarray::arr2(&[[2.0, 0.0], [0.0, 1.0]]),
            b: vec![0.0, 0.0],
            act: if l < 2 {
                crate::onnx::model::Activation::Relu
            } else {
                crate::onnx::model::Activation::Identity
            },
            nodes: vec![format!("gemm{l}")],
            ops: vec![],
            casts: Vec::new(),
            affine: None,
        };
        let net = DenseNet::of_layers((0..3).map(layer).collect(), Format::Float32);
        // distinct bounds per layer (each above the true norm 2), so that a prefix reading
        // the wrong layer's norm shows
        let norms = [2.0, 3.0, 5.0]
            .map(|s| LayerNorms {
                spectral: s,
                abs_spectral: s,
            })
            .to_vec();
        (net, norms)
    }

    #[test]
    fn merged_norms_tighten_exactly_the_prefix_they_compose() {
        let (net, norms) = three_layers();
        let exec = ExecutionModel::deployed(Format::Float32, None, false).unwrap();
        let mut b = ModelBounds::new(&net, &norms, &exec);
        // without a merge: prefix = 1, 2, 2 * 3, rounded up once per step
        assert_eq!(b.lip_prefix[0], 1.0);
        assert!(b.lip_prefix[2] >= 6.0 && b.lip_prefix[2] <= 6.0 * (1.0 + 1e-15));
        // layers 0 and 1 composed with norm 1.5: prefix[2] = min(prefix[1] 3, 1.5)
        b.use_merged_norms(&[None, Some(1.5), None]);
        assert!(b.lip_prefix[1] >= 2.0 && b.lip_prefix[1] <= 2.0 * (1.0 + 1e-15));
        assert!(b.lip_prefix[2] >= 1.5 && b.lip_prefix[2] <= 1.5 * (1.0 + 1e-15));
        // the pairs' Lipschitz constants follow the last prefix
        let p = b.pair(0, 1);
        assert!(p.lip >= p.diff * 1.5 && p.lip <= p.diff * 1.5 * (1.0 + 1e-15));
        // a merge that is not tighter changes nothing; merged[0] has no earlier prefix
        let mut c = ModelBounds::new(&net, &norms, &exec);
        let before = c.lip_prefix.clone();
        c.use_merged_norms(&[Some(0.1), Some(7.0), None]);
        assert_eq!(c.lip_prefix, before);
    }
}
