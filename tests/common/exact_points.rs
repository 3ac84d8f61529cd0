//! Small networks, test points and the test's own executions for `tests/bounds/pointwise_exact.rs`:
//! the deployed execution (float32 products and sums, bias last, one rounding to the storage
//! format), the float64 reference execution (native `f64`, bias last), and from them the values the
//! production passes measure at a point (`||x||`, `||z_hi_l||`, the penultimate gap,
//! `|| |W_l| |c_{l-1}| ||`, `|W_L| |c_{L-1}|`), each the smallest `f64` at or above the exact value.
//! lipfp is called only to build its `ModelBounds` (the inputs of a certificate) and to certify.

#![allow(dead_code)]

use super::exact_bounds::*;
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::bounds::certify::{Centre, Certifier, HiCentre, Mode, ModelBounds, PointResult};
use lipfp::bounds::norms::LayerNorms;
use lipfp::onnx::model::{Activation, DenseNet, HeadOp};
use ndarray::Array2;
use rug::float::Round;
use rug::{Float, Rational};

pub struct PCase {
    pub label: String,
    pub format: Format,
    pub net: DenseNet,
    /// lipfp's bounds in the deployment format and with float64 constants (as
    /// `ReferenceData::bounds` builds them).
    pub mb: ModelBounds,
    pub hb: ModelBounds,
    /// The exact references of both.
    pub nr: NetRef,
    pub nh: NetRef,
    /// Exact `rel_w` per layer (deployment format).
    pub rel_w: Vec<Rational>,
    /// The head's logit margin `g`.
    pub g: Iv,
}

pub fn cases() -> Vec<PCase> {
    let mut out = Vec::new();
    for format in [Format::Float32, Format::Float16] {
        for ftz in [false, true] {
            let mut b = net_b(format);
            b.head = vec![HeadOp::Softmax];
            for (name, net, dyadic) in [
                ("A 3-4-2", net_a(format), true),
                ("B 4-5-5-3 softmax", b, false),
                ("C 2-3-3", net_c(format), false),
                ("D 5-3 no hidden layer", net_d(format), false),
                ("E 3-1-2 width 1", net_e(format), false),
                ("F 3-3-2 identity layer", net_f(format), false),
                ("G 4-3-2 huge biases", net_g(format), false),
                ("H 3-4-2 dead layer", net_h(format), false),
            ] {
                let norms: Vec<LayerNorms> = norms_for(&net, dyadic);
                let exec = ExecutionModel::deployed(format, None, ftz).unwrap();
                let mb = ModelBounds::new(&net, &norms, &exec);
                let hb = ModelBounds::new(&net, &norms, &ExecutionModel::float64_reference());
                assert!(mb.vacuous.is_none(), "{:?}", mb.vacuous);
                let rel_w = net
                    .layers
                    .iter()
                    .map(|l| layer_error_ref(format, None, ftz, l).0 .0)
                    .collect();
                let g = if net.head.is_empty() {
                    Iv::zero()
                } else {
                    softmax_margin(format, net.layers.last().unwrap().m() as u64)
                };
                out.push(PCase {
                    label: format!("{format} ftz={ftz} net {name}"),
                    format,
                    nr: reference(&net, &norms, format, None, ftz),
                    nh: reference(&net, &norms, Format::Float64, None, false),
                    net,
                    mb,
                    hb,
                    rel_w,
                    g,
                });
            }
        }
    }
    out
}

/// The Softmax head's margin (docs/soundness.md "Classifier heads"): `eps_t = max(2^-16, 8u)`,
/// `rho = ((1 - eps_t - lambda)(1-u)^2/(1+u)^2 - lambda)/(1 + eps_t)`, `g = max(-ln(rho)/(1-u),
/// lambda)`, after checking `(1 - eps_t - lambda)(1-u)^3 / S_max > lambda` with
/// `S_max = K (1 + eps_t + lambda)(1 + u)^(K-1)`. The logarithm is enclosed at 256 bits.
pub fn softmax_margin(f: Format, classes: u64) -> Iv {
    let c = fc(f);
    let one = || Rational::from(1);
    let eps_t = Rational::from(&c.u * 8u32).max(pow2(-16));
    let top = one() - &eps_t - &c.lambda;
    let (um, up) = (one() - &c.u, one() + &c.u);
    let mut s_max = (one() + &eps_t + &c.lambda) * int(classes);
    for _ in 1..classes {
        s_max *= &up;
    }
    let xc = Rational::from(&top * &um) * &um * &um / s_max;
    assert!(xc > c.lambda, "{f}: the Softmax head is not certifiable");
    let rho = (top * &um * &um / (Rational::from(&up * &up)) - &c.lambda) / (one() + &eps_t);
    assert!(rho > 0 && rho < 1);
    let ln = |r: Round| -> Rational {
        let mut x = Float::with_val_round(256, &rho, r).0;
        x.ln_round(r);
        x.to_rational().unwrap()
    };
    // -ln is decreasing: the lower end comes from the upper logarithm
    let lo = -ln(Round::Up) / &um;
    let hi = -ln(Round::Down) / &um;
    Iv {
        lo: lo.max(c.lambda.clone()),
        hi: hi.max(c.lambda),
    }
}

/// A test point with what the production passes measure there, from the test's own executions.
pub struct Point {
    pub x: Vec<f64>,
    pub x_norm: f64,
    pub logits: Vec<f64>,
    pub penultimate: Vec<f64>,
    pub hi_logits: Vec<f64>,
    /// `z_hi_l` for the hidden layers `l = 1..L-1`.
    pub hi_hidden: Vec<Vec<f64>>,
    pub hi_norms: Vec<f64>,
    pub gap: f64,
    pub abs_norms: Vec<f64>,
    pub abs_last: Vec<f64>,
}

/// The smallest `f64` at or above `r`.
pub fn up(r: &Rational) -> f64 {
    let mut f = r.to_f64();
    while q(f) < *r {
        f = f.next_up();
    }
    while f > 0.0 && q(f.next_down()) >= *r {
        f = f.next_down();
    }
    f
}

/// An `f64` upper bound of `sqrt(s)`.
pub fn sqrt_up(s: Rational) -> f64 {
    up(&Iv::exact(s).sqrt().hi)
}

pub fn sum_sq_q(v: impl IntoIterator<Item = Rational>) -> Rational {
    v.into_iter()
        .fold(Rational::new(), |acc, x| acc + x.square())
}

/// Exact `|W| |c|` of one layer.
pub fn abs_products(w: &Array2<f64>, c: &[f64]) -> Vec<Rational> {
    w.rows()
        .into_iter()
        .map(|row| {
            row.iter()
                .zip(c)
                .map(|(&a, &b)| q(a).abs() * q(b).abs())
                .fold(Rational::new(), |acc, x| acc + x)
        })
        .collect()
}

/// The deployed execution: float32 products and sums, bias last, one rounding to the storage
/// format (lipfp's own centre execution; a covered one). Returns the logits and the input of the
/// output layer.
pub fn deployed(net: &DenseNet, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut z = x.to_vec();
    let mut pen = z.clone();
    for (l, layer) in net.layers.iter().enumerate() {
        if l + 1 == net.layers.len() {
            pen = z.clone();
        }
        z = layer
            .w
            .rows()
            .into_iter()
            .zip(&layer.b)
            .map(|(row, &b)| {
                let mut acc = 0f32;
                for (&w, &v) in row.iter().zip(&z) {
                    acc += w as f32 * v as f32;
                }
                acc += b as f32;
                let v = net.format.round(acc as f64);
                if layer.act == Activation::Relu {
                    v.max(0.0)
                } else {
                    v
                }
            })
            .collect();
    }
    (z, pen)
}

/// The float64 reference execution: native `f64`, bias last. Returns the logits and the hidden
/// outputs.
pub fn float64(net: &DenseNet, x: &[f64]) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut z = x.to_vec();
    let mut hidden = Vec::new();
    for (l, layer) in net.layers.iter().enumerate() {
        if l > 0 {
            hidden.push(z.clone());
        }
        z = layer
            .w
            .rows()
            .into_iter()
            .zip(&layer.b)
            .map(|(row, &b)| {
                let s = row.iter().zip(&z).fold(0.0, |acc, (&w, &v)| acc + w * v) + b;
                if layer.act == Activation::Relu {
                    s.max(0.0)
                } else {
                    s
                }
            })
            .collect();
    }
    (z, hidden)
}

pub fn point(net: &DenseNet, k: usize) -> Point {
    let f = net.format;
    let n = net.input_dim();
    let x: Vec<f64> = (0..n)
        .map(|t| f.round(((k * 11 + t * 7 + 5) % 17) as f64 / 8.0 - 1.0 + 0.01 * k as f64))
        .collect();
    let (logits, penultimate) = deployed(net, &x);
    let (hi_logits, hi_hidden) = float64(net, &x);
    let depth = net.layers.len();
    let mut abs_norms = Vec::new();
    let mut abs_last = Vec::new();
    for (l, layer) in net.layers.iter().enumerate() {
        let c = if l == 0 { &x } else { &hi_hidden[l - 1] };
        let u = abs_products(&layer.w, c);
        abs_norms.push(sqrt_up(sum_sq_q(u.iter().cloned())));
        if l + 1 == depth {
            abs_last = u.iter().map(up).collect();
        }
    }
    // the last layer's input: the input itself when there is no hidden layer
    let hi_penultimate = depth.checked_sub(2).map_or(&x, |l| &hi_hidden[l]);
    let gap = sqrt_up(sum_sq_q(
        penultimate
            .iter()
            .zip(hi_penultimate)
            .map(|(&a, &b)| q(a) - q(b)),
    ));
    Point {
        x_norm: sqrt_up(sum_sq(x.iter().copied())),
        hi_norms: hi_hidden
            .iter()
            .map(|h| sqrt_up(sum_sq(h.iter().copied())))
            .collect(),
        x,
        logits,
        penultimate,
        hi_logits,
        hi_hidden,
        gap,
        abs_norms,
        abs_last,
    }
}

impl Point {
    /// What the float64 reference measured at the point, as the certificates read it.
    pub fn hi(&self) -> HiCentre<'_> {
        HiCentre {
            logits: &self.hi_logits,
            gap: self.gap,
            norms: &self.hi_norms,
            abs_norms: &self.abs_norms,
            abs_last: &self.abs_last,
        }
    }
}

pub fn points(net: &DenseNet) -> Vec<Point> {
    (0..5).map(|k| point(net, k)).collect()
}

/// lipfp's verdict at `p` in `mode`, with the test's measurements as the float64 reference and
/// `abs_norms` as the componentwise layer products.
pub fn certify(c: &PCase, p: &Point, mode: Mode, eps: f64, abs_norms: &[f64]) -> PointResult {
    let hi = HiCentre {
        abs_norms,
        ..p.hi()
    };
    let centre = Centre {
        logits: &p.logits,
        x_norm: p.x_norm,
        hi: Some(hi),
        decided: None,
        local: None,
        cover: lipfp::bounds::ball::Cover::L2,
    };
    Certifier {
        fmt: &c.mb,
        hi: Some(&c.hb),
    }
    .certify(mode, &centre, eps)
}
