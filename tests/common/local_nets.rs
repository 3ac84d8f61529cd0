//! Small random ReLU networks and points of their l2 balls, shared by the tests of the local
//! bounds (`tests/bounds/local_exact.rs`, `tests/bounds/local_deployed.rs`): exact and float64 forward passes,
//! margin gradients, and ball points (random directions, the axes, a projected-gradient attack on
//! every margin) checked to lie in the ball in exact rationals.

#![allow(dead_code)]

use super::exact_bounds::{net, q};
use lipfp::arith::format::Format;
use lipfp::onnx::model::DenseNet;
use ndarray::Array2;
use rug::Rational;

/// splitmix64: a small deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[-1, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Approximately normal (sum of uniforms).
    pub fn normal(&mut self) -> f64 {
        (0..4).map(|_| self.unit()).sum::<f64>() * 0.866
    }
}

pub fn random_net(widths: &[usize], seed: u64, scale: f64) -> DenseNet {
    let mut rng = Rng(seed);
    let f = Format::Float32;
    let mut ws = Vec::new();
    let mut bs = Vec::new();
    for l in 0..widths.len() - 1 {
        let (m, n) = (widths[l + 1], widths[l]);
        let s = scale / (n as f64).sqrt();
        ws.push(Array2::from_shape_fn((m, n), |_| f.round(s * rng.normal())));
        bs.push((0..m).map(|_| f.round(0.3 * rng.normal())).collect());
    }
    net(f, ws, bs)
}

/// The exact forward pass: hidden pre-activations and logits.
pub fn exact_forward(net: &DenseNet, x: &[Rational]) -> (Vec<Vec<Rational>>, Vec<Rational>) {
    let mut h: Vec<Rational> = x.to_vec();
    let mut pre = Vec::new();
    for (l, layer) in net.layers.iter().enumerate() {
        let z: Vec<Rational> = (0..layer.w.nrows())
            .map(|r| {
                let mut s = q(layer.b[r]);
                for (c, v) in h.iter().enumerate() {
                    s += q(layer.w[[r, c]]) * v;
                }
                s
            })
            .collect();
        if l + 1 == net.layers.len() {
            return (pre, z);
        }
        h = z.iter().map(|v| v.clone().max(Rational::new())).collect();
        pre.push(z);
    }
    unreachable!()
}

/// The float64 forward pass (for the attack).
pub fn forward(net: &DenseNet, x: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut h = x.to_vec();
    let mut pre = Vec::new();
    for (l, layer) in net.layers.iter().enumerate() {
        let z: Vec<f64> = (0..layer.w.nrows())
            .map(|r| layer.b[r] + (0..h.len()).map(|c| layer.w[[r, c]] * h[c]).sum::<f64>())
            .collect();
        if l + 1 == net.layers.len() {
            return (pre, z);
        }
        h = z.iter().map(|v| v.max(0.0)).collect();
        pre.push(z);
    }
    unreachable!()
}

/// Gradient of `z_i - z_j` at `x` (float64, for the attack).
pub fn margin_gradient(net: &DenseNet, x: &[f64], i: usize, j: usize) -> Vec<f64> {
    let (pre, _) = forward(net, x);
    let top = net.layers.len() - 1;
    let mut g: Vec<f64> = (0..net.layers[top].w.ncols())
        .map(|c| net.layers[top].w[[i, c]] - net.layers[top].w[[j, c]])
        .collect();
    for l in (0..top).rev() {
        let w = &net.layers[l].w;
        let masked: Vec<f64> = g
            .iter()
            .zip(&pre[l])
            .map(|(g, z)| if *z > 0.0 { *g } else { 0.0 })
            .collect();
        g = (0..w.ncols())
            .map(|c| (0..w.nrows()).map(|r| masked[r] * w[[r, c]]).sum())
            .collect();
    }
    g
}

/// `x0 + t d` with `||d|| = 1`, kept if it lies in the ball exactly.
pub fn in_ball(x0: &[f64], eps: f64, x: Vec<f64>) -> Option<Vec<f64>> {
    let d2: Rational = x0
        .iter()
        .zip(&x)
        .map(|(a, b)| {
            let d = q(*b) - q(*a);
            d.clone() * d
        })
        .sum();
    (d2 <= q(eps) * q(eps)).then_some(x)
}

pub fn along(x0: &[f64], d: &[f64], t: f64) -> Vec<f64> {
    let norm = d.iter().map(|v| v * v).sum::<f64>().sqrt();
    x0.iter().zip(d).map(|(a, v)| a + t * v / norm).collect()
}

/// Points of the ball: random directions at the sphere and inside, the axes' vertices, and a
/// projected-gradient descent on every margin `z_i - z_j`.
pub fn ball_points(net: &DenseNet, x0: &[f64], eps: f64, i: usize, rng: &mut Rng) -> Vec<Vec<f64>> {
    let n = x0.len();
    let shrink = 1.0 - 1e-9;
    let mut out = Vec::new();
    for k in 0..200 {
        let d: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let t = if k % 2 == 0 {
            eps * shrink
        } else {
            eps * rng.unit().abs()
        };
        out.push(along(x0, &d, t));
    }
    for a in 0..n {
        for s in [-1.0, 1.0] {
            let mut d = vec![0.0; n];
            d[a] = s;
            out.push(along(x0, &d, eps * shrink));
        }
    }
    for j in (0..net.classes()).filter(|&j| j != i) {
        let mut x = x0.to_vec();
        for _ in 0..60 {
            let g = margin_gradient(net, &x, i, j);
            if g.iter().all(|v| *v == 0.0) {
                break;
            }
            let step = along(&x, &g.iter().map(|v| -v).collect::<Vec<_>>(), eps / 10.0);
            let off: Vec<f64> = step.iter().zip(x0).map(|(a, b)| a - b).collect();
            let r = off.iter().map(|v| v * v).sum::<f64>().sqrt();
            x = if r > eps * shrink {
                along(x0, &off, eps * shrink)
            } else {
                step
            };
        }
        out.push(x);
    }
    out.into_iter()
        .filter_map(|x| in_ball(x0, eps, x))
        .collect()
}

pub fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, k| if v[k] > v[b] { k } else { b })
}

pub fn nets() -> Vec<(String, DenseNet)> {
    vec![
        ("3-5-5-3".into(), random_net(&[3, 5, 5, 3], 1, 1.5)),
        ("2-4-4-4-2".into(), random_net(&[2, 4, 4, 4, 2], 2, 1.8)),
        ("6-8-3".into(), random_net(&[6, 8, 3], 3, 1.0)),
        (
            "4-6-6-6-4 wide".into(),
            random_net(&[4, 6, 6, 6, 4], 4, 3.0),
        ),
        // degenerate shapes: no hidden layer (the first layer is also the last), width 1
        ("5-3 no hidden layer".into(), random_net(&[5, 3], 5, 1.0)),
        ("4-2 no hidden layer".into(), random_net(&[4, 2], 6, 2.0)),
        ("3-1-3 width 1".into(), random_net(&[3, 1, 3], 7, 1.5)),
    ]
}

/// The exact margin gradient of `z_i - z_j` where the activation pattern is fixed.
pub fn exact_gradient(net: &DenseNet, x0: &[f64], i: usize, j: usize) -> Vec<Rational> {
    let xq: Vec<Rational> = x0.iter().map(|v| q(*v)).collect();
    let (pre, _) = exact_forward(net, &xq);
    let top = net.layers.len() - 1;
    let w = &net.layers[top].w;
    let mut g: Vec<Rational> = (0..w.ncols())
        .map(|c| q(w[[i, c]]) - q(w[[j, c]]))
        .collect();
    for l in (0..top).rev() {
        let w = &net.layers[l].w;
        g = (0..w.ncols())
            .map(|c| {
                (0..w.nrows())
                    .filter(|&r| pre[l][r] > 0)
                    .map(|r| g[r].clone() * q(w[[r, c]]))
                    .sum()
            })
            .collect();
    }
    g
}
