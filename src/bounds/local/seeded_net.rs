//! Small float64 ReLU networks with fixed pseudo-random weights in `[-1, 1]` (biases in
//! `[-0.3, 0.3]`), for the unit tests of the local bounds.

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
