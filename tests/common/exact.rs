//! Exact forward passes of a converted network (the real network `N` of the certificate), for
//! comparing a runtime's logits with the exact ones.
//!
//! Every weight, bias and input is a binary floating-point value, hence an integer multiple of
//! `2^-e` for the format's smallest subnormal `2^-e`. Activations are kept as big integers with a
//! power-of-two scale, so sums and products are exact; ReLU is a sign test. `Cast` nodes are not
//! applied: they belong to the execution, not to `N`.

#![allow(dead_code)]

use lipfp::arith::format::Format;
use lipfp::onnx::model::{Activation, DenseNet};
use rug::{Integer, Rational};

/// A network prepared for exact evaluation.
pub struct ExactNet {
    /// Exponent `e` of the weight grid `2^-e`.
    unit: u32,
    layers: Vec<ExactLayer>,
}

struct ExactLayer {
    /// Rows of `W * 2^unit`.
    w: Vec<Vec<Integer>>,
    /// The bias as exact rationals (scaled when the layer runs).
    b: Vec<Rational>,
    relu: bool,
}

/// `-log2` of the smallest positive subnormal of `f`.
fn grid_exponent(f: Format) -> u32 {
    (f.precision() as i32 - 1 - f.emin()) as u32
}

/// `x * 2^e` as an integer; panics if it is not one (the value is not on the grid).
fn scaled(x: f64, e: u32) -> Integer {
    let q = Rational::from_f64(x).expect("finite") << e;
    assert_eq!(*q.denom(), 1, "{x:e} is not a multiple of 2^-{e}");
    q.numer().clone()
}

impl ExactNet {
    /// Prepare `net` (weights are values of `net.format`).
    pub fn new(net: &DenseNet) -> Self {
        let unit = grid_exponent(net.format);
        let layers = net
            .layers
            .iter()
            .map(|l| ExactLayer {
                w: l.w
                    .rows()
                    .into_iter()
                    .map(|r| r.iter().map(|&x| scaled(x, unit)).collect())
                    .collect(),
                b: l.b
                    .iter()
                    .map(|&x| Rational::from_f64(x).expect("finite"))
                    .collect(),
                relu: l.act == Activation::Relu,
            })
            .collect();
        ExactNet { unit, layers }
    }

    /// The exact logits at `x` (values of the storage format).
    pub fn logits(&self, x: &[f64]) -> Vec<Rational> {
        let mut scale = self.unit;
        let mut z: Vec<Integer> = x.iter().map(|&v| scaled(v, scale)).collect();
        for l in &self.layers {
            let out_scale = scale + self.unit;
            z =
                l.w.iter()
                    .zip(&l.b)
                    .map(|(row, b)| {
                        let mut acc = Integer::new();
                        for (w, v) in row.iter().zip(&z) {
                            if *w != 0 && *v != 0 {
                                acc += w * v;
                            }
                        }
                        let b = Rational::from(b << out_scale);
                        assert_eq!(*b.denom(), 1, "bias off the grid");
                        acc += b.numer();
                        if l.relu && acc < 0 {
                            acc = Integer::new();
                        }
                        acc
                    })
                    .collect();
            scale = out_scale;
        }
        z.into_iter().map(|v| Rational::from(v) >> scale).collect()
    }
}
