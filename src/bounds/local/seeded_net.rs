//! Small float64 ReLU networks with fixed pseudo-random weights in `[-1, 1]` (biases in
//! `[-0.3, 0.3]`), for the unit tests of the local bounds, and their exact pre-activations.

use ndarray::Array2;

use crate::arith::format::Format;
use crate::onnx::model::{Activation, Dense, DenseNet};

/// Layers of `widths[k+1] x widths[k]`, ReLU but the last (identity), drawn from an LCG started
/// at `seed` (each layer's weights, then its biases).
pub(super) fn seeded_net(seed: u64, widths: &[usize]) -> DenseNet {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let last = widths.len().saturating_sub(2);
    let layers = (widths.windows(2).enumerate())
        .map(|(l, w)| Dense {
            w: Array2::from_shape_fn((w[1], w[0]), |_| next()),
            b: (0..w[1]).map(|_| 0.3 * next()).collect(),
            act: if l == last {
                Activation::Identity
            } else {
                Activation::Relu
            },
            nodes: vec![],
            ops: vec![],
            casts: vec![],
            affine: None,
        })
        .collect();
    DenseNet::of_layers(layers, Format::Float64)
}

/// The pre-activations of every hidden layer of `dense` at `x`, in float64 (within 1e-9 of the
/// exact values on these small networks).
pub(super) fn pre_activations(dense: &DenseNet, x: &[f64]) -> Vec<Vec<f64>> {
    let mut h = x.to_vec();
    let mut out = Vec::new();
    for layer in &dense.layers[..dense.layers.len() - 1] {
        let z: Vec<f64> = (layer.w.rows().into_iter().zip(&layer.b))
            .map(|(row, b)| row.iter().zip(&h).map(|(w, v)| w * v).sum::<f64>() + b)
            .collect();
        h = z.iter().map(|v| v.max(0.0)).collect();
        out.push(z);
    }
    out
}
