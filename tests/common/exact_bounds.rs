//! The exact-rational reference of lipfp's model-level bounds, shared by `tests/bounds/bounds_exact.rs`
//! (model-level constants, chains and the Standard/real slack) and `tests/bounds/pointwise_exact.rs`
//! (the per-point bounds of every sound mode).
//!
//! Everything here is an independent recomputation of the formulas of docs/soundness.md and the
//! paper in rug `Rational`s: the format constants come from their own table (DESIGN.md), not from
//! `Format`; `gamma_n = (1 + u)^n - 1` is expanded exactly; square roots are enclosed at 256 bits,
//! so every reference value is an interval `[lo, hi]` of rationals containing the exact real value.
//! Nothing here calls lipfp's bound computations; lipfp is used only for its types (`DenseNet`,
//! `Format` as a name) and for `Format::round` to build test networks.

#![allow(dead_code)]

use std::path::PathBuf;

use lipfp::arith::format::Format;
use lipfp::bounds::norms::LayerNorms;
use lipfp::onnx::model::{Activation, Dense, DenseNet};
use ndarray::Array2;
use rug::float::Round;
use rug::{Float, Rational};

/// Precision of the square-root enclosures (bits).
pub const PREC: u32 = 256;

// ---------------------------------------------------------------------------------------------
// Exact scalars and intervals
// ---------------------------------------------------------------------------------------------

/// The exact rational value of a finite `f64`.
pub fn q(x: f64) -> Rational {
    Rational::from_f64(x).unwrap_or_else(|| panic!("non-finite value {x}"))
}

pub fn int(n: u64) -> Rational {
    Rational::from(n)
}

/// `2^e` exactly.
pub fn pow2(e: i32) -> Rational {
    Rational::from(1) << e
}

pub fn frac(num: u64, den: u64) -> Rational {
    Rational::from((num, den))
}

/// Relative tightness allowed for upper bounds.
pub fn rel_tol() -> Rational {
    frac(1, 1_000_000_000_000)
}

/// Absolute tightness allowed for upper bounds (sixteen thousand `f64` subnormal steps).
pub fn abs_tol() -> Rational {
    pow2(-1060)
}

/// An enclosure `[lo, hi]` of an exact real value.
#[derive(Clone, Debug)]
pub struct Iv {
    pub lo: Rational,
    pub hi: Rational,
}

impl Iv {
    pub fn exact(v: Rational) -> Iv {
        Iv {
            lo: v.clone(),
            hi: v,
        }
    }

    pub fn of(x: f64) -> Iv {
        Iv::exact(q(x))
    }

    pub fn zero() -> Iv {
        Iv::exact(Rational::new())
    }

    pub fn add(&self, o: &Iv) -> Iv {
        Iv {
            lo: Rational::from(&self.lo + &o.lo),
            hi: Rational::from(&self.hi + &o.hi),
        }
    }

    pub fn sub(&self, o: &Iv) -> Iv {
        Iv {
            lo: Rational::from(&self.lo - &o.hi),
            hi: Rational::from(&self.hi - &o.lo),
        }
    }

    /// Product of two nonnegative enclosures.
    pub fn mul(&self, o: &Iv) -> Iv {
        assert!(
            self.lo >= 0 && o.lo >= 0,
            "mul of a possibly negative enclosure"
        );
        Iv {
            lo: Rational::from(&self.lo * &o.lo),
            hi: Rational::from(&self.hi * &o.hi),
        }
    }

    /// Product with an exact nonnegative rational.
    pub fn scale(&self, k: &Rational) -> Iv {
        assert!(*k >= 0);
        self.mul(&Iv::exact(k.clone()))
    }

    /// Square root of a nonnegative enclosure, enclosed at `PREC` bits.
    pub fn sqrt(&self) -> Iv {
        assert!(self.lo >= 0);
        let root = |v: &Rational, round: Round| -> Rational {
            if *v == 0 {
                return Rational::new();
            }
            let mut f = Float::with_val_round(PREC, v, round).0;
            f.sqrt_round(round);
            f.to_rational().expect("finite square root")
        };
        Iv {
            lo: root(&self.lo, Round::Down),
            hi: root(&self.hi, Round::Up),
        }
    }

    pub fn max(&self, o: &Iv) -> Iv {
        Iv {
            lo: self.lo.clone().max(o.lo.clone()),
            hi: self.hi.clone().max(o.hi.clone()),
        }
    }

    pub fn min(&self, o: &Iv) -> Iv {
        Iv {
            lo: self.lo.clone().min(o.lo.clone()),
            hi: self.hi.clone().min(o.hi.clone()),
        }
    }
}

/// Exact sum of squares of `f64` values.
pub fn sum_sq(v: impl IntoIterator<Item = f64>) -> Rational {
    v.into_iter().fold(Rational::new(), |acc, x| {
        let x = q(x);
        acc + Rational::from(&x * &x)
    })
}

/// `got` is an upper bound of the enclosed value, and a tight one.
#[track_caller]
pub fn check_upper(what: &str, got: f64, exact: &Iv) {
    assert!(got.is_finite(), "{what}: lipfp returned {got}");
    let g = q(got);
    assert!(
        g >= exact.hi,
        "{what}: lipfp {got:e} is below the exact value {:e} (not an upper bound)",
        exact.hi.to_f64()
    );
    let limit = Rational::from(&exact.hi * &(Rational::from(1) + rel_tol())) + abs_tol();
    assert!(
        g <= limit,
        "{what}: lipfp {got:e} is not tight: exact {:e}, relative excess {:e}",
        exact.hi.to_f64(),
        ((g.clone() - &exact.hi) / exact.hi.clone().max(pow2(-1074))).to_f64()
    );
}

/// `got` equals an exact (rational, root-free) value.
#[track_caller]
pub fn check_exact(what: &str, got: f64, exact: &Rational) {
    assert!(
        q(got) == *exact,
        "{what}: lipfp {got:e}, exact {:e}",
        exact.to_f64()
    );
}

/// `got` is a lower bound of the enclosed value, tight to `1e-9` relative (plus `1e-12` of
/// `scale`, the magnitude of the terms the value is a difference of).
#[track_caller]
pub fn check_lower(what: &str, got: f64, exact: &Iv, scale: &Rational) {
    assert!(!got.is_nan(), "{what}: lipfp returned NaN");
    let g = q(got);
    assert!(
        g <= exact.lo,
        "{what}: lipfp {got:e} is above the exact value {:e} (not a lower bound)",
        exact.lo.to_f64()
    );
    let tol = exact.hi.clone().abs() * frac(1, 1_000_000_000)
        + Rational::from(scale * &rel_tol())
        + abs_tol();
    let gap = Rational::from(&exact.hi - &g);
    assert!(
        gap <= tol,
        "{what}: lipfp {got:e} is not tight: exact {:e}, gap {:e}",
        exact.hi.to_f64(),
        gap.to_f64()
    );
}

/// The largest `f64` `a` and smallest `b = next_up(a)` with `!pred(a)` and `pred(b)`, for a
/// predicate monotone on nonnegative `f64` (`!pred(lo)`, `pred(hi)`).
pub fn bisect(lo: f64, hi: f64, mut pred: impl FnMut(f64) -> bool) -> (f64, f64) {
    assert!(lo >= 0.0 && lo < hi);
    assert!(
        !pred(lo) && pred(hi),
        "bisect: bracket [{lo:e}, {hi:e}] is not a sign change"
    );
    let (mut a, mut b) = (lo.to_bits(), hi.to_bits());
    while b - a > 1 {
        let m = a + (b - a) / 2;
        if pred(f64::from_bits(m)) {
            b = m;
        } else {
            a = m;
        }
    }
    (f64::from_bits(a), f64::from_bits(b))
}

// ---------------------------------------------------------------------------------------------
// Format constants, from the table in DESIGN.md
// ---------------------------------------------------------------------------------------------

pub struct Fc {
    pub p: u32,
    pub emin: i32,
    pub u: Rational,
    pub lambda: Rational,
    pub a_mul: Rational,
    pub f_max: Rational,
}

pub fn fc(f: Format) -> Fc {
    let (p, emin, emax): (u32, i32, i32) = match f {
        Format::Float64 => (53, -1022, 1023),
        Format::Float32 => (24, -126, 127),
        Format::Float16 => (11, -14, 15),
        Format::Bfloat16 => (8, -126, 127),
    };
    let u = pow2(-(p as i32));
    let lambda = pow2(emin);
    let a_mul = Rational::from(&u * &lambda);
    let f_max = (Rational::from(2) - pow2(1 - p as i32)) * pow2(emax);
    Fc {
        p,
        emin,
        u,
        lambda,
        a_mul,
        f_max,
    }
}

impl Fc {
    /// `gamma_n = (1 + u)^n - 1`, exactly.
    pub fn gamma(&self, n: u64) -> Rational {
        let base = Rational::from(1) + &self.u;
        let mut acc = Rational::from(1);
        for _ in 0..n {
            acc *= &base;
        }
        acc - 1
    }

    pub fn one_plus_gamma(&self, n: u64) -> Rational {
        self.gamma(n) + 1
    }

    /// `a_acc(n)`: `(1 + gamma_n) n a_mul`, or under FTZ `(1 + gamma_n) 2n lambda` (the `n`
    /// multiplications and the `n` additions of `n` products and one bias may each flush).
    pub fn a_acc(&self, ftz: bool, n: u64) -> Rational {
        if ftz {
            self.one_plus_gamma(n) * int(2 * n) * &self.lambda
        } else {
            self.one_plus_gamma(n) * int(n) * &self.a_mul
        }
    }

    /// `a_dot_fwd(n) = (1 + gamma_{n-1}) n a_mul`. Under FTZ the paper admits two readings
    /// (the table's `a_mul -> lambda`, the text's `a_dot -> a_dot^FTZ`); a sound implementation
    /// must cover both, and the bias addition, so the reference is their maximum with `a_acc`.
    pub fn a_dot_fwd(&self, ftz: bool, n: u64) -> Rational {
        if ftz {
            let table = self.one_plus_gamma(n - 1) * int(n) * &self.lambda;
            table.max(self.a_acc(true, n))
        } else {
            self.one_plus_gamma(n - 1) * int(n) * &self.a_mul
        }
    }

    /// Absolute error of one rounding to this format: `a_mul`, or `lambda` under FTZ.
    pub fn rounding_abs(&self, ftz: bool) -> Rational {
        if ftz {
            self.lambda.clone()
        } else {
            self.a_mul.clone()
        }
    }
}

/// The accumulation formats an execution model covers, from an independent table: a declared
/// one, or the storage format and the next wider one.
pub fn covered_accumulations(storage: Format, accumulate: Option<Format>) -> Vec<Format> {
    match (accumulate, storage) {
        (Some(a), s) if a != s => vec![a],
        (_, Format::Float16) => vec![Format::Float16, Format::Float32],
        (_, Format::Bfloat16) => vec![Format::Bfloat16, Format::Float32],
        (_, Format::Float32) => vec![Format::Float32, Format::Float64],
        (_, Format::Float64) => vec![Format::Float64],
    }
}

/// One sum bound of a layer's overflow checks: `scale_w S + scale_b ||b||_inf + abs < f_max`.
pub struct CheckRef {
    pub scale_w: Rational,
    pub scale_b: Rational,
    pub abs: Rational,
    pub f_max: Rational,
}

pub type Terms = (Rational, Rational, Rational);

/// One more rounding in format `c` of a value within `(rel_w, rel_b, abs)` of the exact output,
/// whose absolute error is at most `unit`: `rel -> (1 + u)(1 + rel) - 1`, `abs -> (1 + u) abs +
/// unit`; with the bound the value must stay below before the rounding.
pub fn step_ref((rw, rb, ab): Terms, c: &Fc, unit: Rational) -> (Terms, CheckRef) {
    let check = CheckRef {
        scale_w: rw.clone() + 1,
        scale_b: rb.clone() + 1,
        abs: ab.clone(),
        f_max: c.f_max.clone(),
    };
    let one_u = Rational::from(1) + &c.u;
    let next = (
        Rational::from(&one_u * &(rw + 1)) - 1,
        Rational::from(&one_u * &(rb + 1)) - 1,
        Rational::from(&one_u * &ab) + unit,
    );
    (next, check)
}

/// A layer's error terms `(rel_w, rel_b, abs)`, maximised over the covered executions, and its
/// overflow checks. Accumulation in `A` with the bias inside the sum gives `rel_w = gamma^A_{n+1}`,
/// `rel_b = gamma^A_n`, `abs = a_acc^A(n)`; when `A` is wider than storage, one rounding to storage
/// follows, and the split execution (products in `A`: `gamma^A_n`, no bias term; rounding to
/// storage; the bias added in storage with absolute error 0, or `lambda` under FTZ) is covered too;
/// each cast is one more rounding (absolute error `a_mul`, or `lambda` under FTZ).
pub fn layer_error_ref(
    storage: Format,
    accumulate: Option<Format>,
    ftz: bool,
    layer: &Dense,
) -> (Terms, Vec<CheckRef>) {
    let (n, casts) = (layer.n() as u64, &layer.casts);
    let separate_add = layer.ops.iter().any(|o| o == "Add");
    let s = fc(storage);
    let mut worst = (Rational::new(), Rational::new(), Rational::new());
    let mut checks = Vec::new();
    for acc in covered_accumulations(storage, accumulate) {
        let a = fc(acc);
        checks.push(CheckRef {
            scale_w: a.one_plus_gamma(n),
            scale_b: a.one_plus_gamma(n),
            abs: a.a_dot_fwd(ftz, n),
            f_max: a.f_max.clone(),
        });
        let mut variants = vec![(a.gamma(n + 1), a.gamma(n), a.a_acc(ftz, n))];
        if acc != storage {
            let (fused, c) = step_ref(variants.pop().unwrap(), &s, s.rounding_abs(ftz));
            checks.push(c);
            variants.push(fused);
        }
        if acc != storage && separate_add {
            // the products alone: their rounding to storage does not involve the bias
            let products = (a.gamma(n), Rational::new(), a.a_acc(ftz, n));
            let ((rw, _, ab), _) = step_ref(products, &s, s.rounding_abs(ftz));
            let rounded = (rw, Rational::new(), ab);
            let add_unit = if ftz {
                s.lambda.clone()
            } else {
                Rational::new()
            };
            let (split, c) = step_ref(rounded, &s, add_unit);
            checks.push(c);
            variants.push(split);
        }
        for mut terms in variants {
            for &cast in casts.iter() {
                let c = fc(cast);
                let (next, check) = step_ref(terms, &c, c.rounding_abs(ftz));
                checks.push(check);
                terms = next;
            }
            worst = (
                worst.0.max(terms.0),
                worst.1.max(terms.1),
                worst.2.max(terms.2),
            );
        }
    }
    (worst, checks)
}

// ---------------------------------------------------------------------------------------------
// Small networks
// ---------------------------------------------------------------------------------------------

/// `m x n` weights `scale * (k - 14) / 7` for a pseudo-random `k` in `0..29`, rounded to `f`.
pub fn weights(f: Format, m: usize, n: usize, seed: usize, scale: f64) -> Array2<f64> {
    Array2::from_shape_fn((m, n), |(r, c)| {
        let k = ((r * n + c) * 37 + seed * 11 + 5) % 29;
        f.round(scale * (k as f64 - 14.0) / 7.0)
    })
}

pub fn rounded(f: Format, v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| f.round(x)).collect()
}

pub fn net(f: Format, ws: Vec<Array2<f64>>, bs: Vec<Vec<f64>>) -> DenseNet {
    let depth = ws.len();
    let layers = ws
        .into_iter()
        .zip(bs)
        .enumerate()
        .map(|(l, (w, b))| {
            assert_eq!(w.nrows(), b.len());
            Dense {
                w,
                b,
                act: if l + 1 < depth {
                    Activation::Relu
                } else {
                    Activation::Identity
                },
                nodes: vec![format!("gemm{l}")],
                ops: vec!["Gemm".into()],
                casts: Vec::new(),
                affine: None,
            }
        })
        .collect::<Vec<_>>();
    DenseNet {
        input_shape: vec![layers[0].n()],
        layers,
        input_name: "x".into(),
        head: Vec::new(),
        format: f,
        converted_changed: 0,
        path: PathBuf::from("bounds_exact.onnx"),
    }
}

/// A generated net with the given widths, per-layer weight scales and biases.
pub fn generated(f: Format, widths: &[usize], scales: &[f64], biases: &[&[f64]]) -> DenseNet {
    let ws = (0..widths.len() - 1)
        .map(|l| weights(f, widths[l + 1], widths[l], l + widths.len(), scales[l]))
        .collect();
    let bs = biases.iter().map(|b| rounded(f, b)).collect();
    net(f, ws, bs)
}

/// Net A: 3 -> 4 -> 2.
pub fn net_a(f: Format) -> DenseNet {
    generated(
        f,
        &[3, 4, 2],
        &[1.0, 1.0],
        &[&[0.5, -0.25, 0.1, 0.3], &[0.2, -0.7]],
    )
}

/// Net B: 4 -> 5 -> 5 -> 3.
pub fn net_b(f: Format) -> DenseNet {
    generated(
        f,
        &[4, 5, 5, 3],
        &[0.5, 0.75, 1.0],
        &[
            &[0.1, -0.2, 0.3, 0.05, -0.15],
            &[0.01, 0.02, -0.03, 0.5, 0.25],
            &[0.125, -0.0625, 0.3],
        ],
    )
}

/// Net C: 2 -> 3 -> 3 with edge cases: a zero hidden bias (exact-zero shortcuts), a zero weight,
/// final rows that share entries (zero entrywise differences) and a zero output bias.
pub fn net_c(f: Format) -> DenseNet {
    let w1 = Array2::from_shape_vec((3, 2), vec![1.5, -0.75, 0.0, 2.0, -1.25, 0.5]).unwrap();
    let w2 = Array2::from_shape_vec(
        (3, 3),
        vec![1.0, 0.5, -0.25, 1.0, -0.5, -0.25, 0.0, 0.0, 0.75],
    )
    .unwrap();
    net(
        f,
        vec![w1.mapv(|x| f.round(x)), w2.mapv(|x| f.round(x))],
        vec![vec![0.0; 3], rounded(f, &[0.1, 0.0, -0.375])],
    )
}

/// Net D: 5 -> 3, no hidden layer (the only layer is both first and last).
pub fn net_d(f: Format) -> DenseNet {
    generated(f, &[5, 3], &[1.0], &[&[0.25, -0.5, 0.125]])
}

/// Net E: 3 -> 1 -> 2, a hidden layer of width 1.
pub fn net_e(f: Format) -> DenseNet {
    generated(f, &[3, 1, 2], &[1.0, 1.0], &[&[0.3], &[0.1, -0.2]])
}

/// Net F: 3 -> 3 -> 2 whose hidden layer copies its input (identity weights, zero bias).
pub fn net_f(f: Format) -> DenseNet {
    let eye = Array2::from_shape_fn((3, 3), |(r, c)| f64::from(u8::from(r == c)));
    let w2 = weights(f, 2, 3, 11, 1.0);
    net(
        f,
        vec![eye, w2],
        vec![vec![0.0; 3], rounded(f, &[0.2, -0.1])],
    )
}

/// Net G: 4 -> 3 -> 2 with biases far larger than the weights (a hidden layer always on, output
/// biases near 1000).
pub fn net_g(f: Format) -> DenseNet {
    generated(
        f,
        &[4, 3, 2],
        &[0.5, 0.5],
        &[&[64.0, 48.0, 80.0], &[1000.0, 999.5]],
    )
}

/// Net H: 3 -> 4 -> 2 whose hidden layer is dead (every ReLU off: biases -64).
pub fn net_h(f: Format) -> DenseNet {
    generated(
        f,
        &[3, 4, 2],
        &[0.5, 1.0],
        &[&[-64.0, -64.0, -64.0, -64.0], &[0.3, -0.2]],
    )
}

/// Frobenius norm (round to nearest; only used to choose valid norm bounds with some room).
pub fn frob(w: &Array2<f64>) -> f64 {
    w.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Norm bounds: small dyadic numbers (`dyadic`) or arbitrary binary fractions above the
/// Frobenius norm, with `|||W||| > ||W||`.
pub fn norms_for(net: &DenseNet, dyadic: bool) -> Vec<LayerNorms> {
    net.layers
        .iter()
        .map(|l| {
            let fr = frob(&l.w);
            if dyadic {
                let s = (fr * 4.0).ceil() / 4.0 + 0.25;
                LayerNorms {
                    spectral: s,
                    abs_spectral: s + 0.5,
                }
            } else {
                LayerNorms {
                    spectral: fr * 1.03,
                    abs_spectral: fr * 1.0571,
                }
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The exact reference: the paper's definitions in rationals
// ---------------------------------------------------------------------------------------------

pub struct LayerRef {
    /// The componentwise error terms `(rel_w, rel_b, abs)`.
    pub rounding: [Rational; 3],
    pub spectral: Iv,
    pub alpha: Iv,
    pub kappa_abs: Iv,
    pub beta_const: Iv,
    pub bias_l2: Iv,
    pub row_l2_max: Iv,
    pub row_inf_max: Rational,
    pub bias_inf: Rational,
    pub product_f_max: Rational,
    pub checks: Vec<CheckRef>,
}

pub struct PairRef {
    pub alpha: Iv,
    pub kappa_abs: Iv,
    pub beta_const: Iv,
    pub lip: Iv,
}

pub struct NetRef {
    pub layers: Vec<LayerRef>,
    /// Row-major `(i, j)`, `None` on the diagonal.
    pub pairs: Vec<Option<PairRef>>,
    pub classes: usize,
    pub lip_prefix: Vec<Iv>,
    pub d0: Iv,
}

pub fn reference(
    net: &DenseNet,
    norms: &[LayerNorms],
    format: Format,
    accumulate: Option<Format>,
    ftz: bool,
) -> NetRef {
    let mut layers = Vec::new();
    let mut last_err = None;
    for (layer, nrm) in net.layers.iter().zip(norms) {
        let m = layer.m() as u64;
        let ((rel_w, rel_b, abs), checks) = layer_error_ref(format, accumulate, ftz, layer);
        let spectral = Iv::of(nrm.spectral);
        // alpha_l = ||W|| + rel_w |||W|||, beta_l(r) = rel_w |||W||| r + beta_const
        let kappa_abs = Iv::of(nrm.abs_spectral).scale(&rel_w);
        let alpha = spectral.add(&kappa_abs);
        let bias_l2 = Iv::exact(sum_sq(layer.b.iter().copied())).sqrt();
        let sqrt_m = Iv::exact(int(m)).sqrt();
        let beta_const = bias_l2.scale(&rel_b).add(&sqrt_m.scale(&abs));
        let row_l2_max = layer
            .w
            .rows()
            .into_iter()
            .map(|r| Iv::exact(sum_sq(r.iter().copied())).sqrt())
            .reduce(|a, b| a.max(&b))
            .unwrap();
        let row_inf_max = layer
            .w
            .iter()
            .map(|&x| q(x).abs())
            .fold(Rational::new(), Rational::max);
        let bias_inf = layer
            .b
            .iter()
            .map(|&x| q(x).abs())
            .fold(Rational::new(), Rational::max);
        let product_f_max = covered_accumulations(format, accumulate)
            .into_iter()
            .map(|a| fc(a).f_max)
            .reduce(Rational::min)
            .unwrap();
        layers.push(LayerRef {
            rounding: [rel_w.clone(), rel_b.clone(), abs.clone()],
            spectral,
            alpha,
            kappa_abs,
            beta_const,
            bias_l2,
            row_l2_max,
            row_inf_max,
            bias_inf,
            product_f_max,
            checks,
        });
        last_err = Some((rel_w, rel_b, abs));
    }
    let (rel_w, rel_b, abs) = last_err.unwrap();

    let depth = net.layers.len();
    let mut lip_prefix = vec![Iv::exact(Rational::from(1))];
    for nrm in &norms[..depth - 1] {
        let next = lip_prefix.last().unwrap().scale(&q(nrm.spectral));
        lip_prefix.push(next);
    }
    let last = &net.layers[depth - 1];
    let classes = last.m();
    let pair_const = Rational::from(2) * &abs;
    let mut pairs = Vec::new();
    for i in 0..classes {
        for j in 0..classes {
            if i == j {
                pairs.push(None);
                continue;
            }
            let (wi, wj) = (last.w.row(i), last.w.row(j));
            let mut diff = Rational::new();
            let mut sum = Rational::new();
            for (&a, &b) in wi.iter().zip(wj.iter()) {
                let d = q(a) - q(b);
                diff += Rational::from(&d * &d);
                let s = q(a).abs() + q(b).abs();
                sum += Rational::from(&s * &s);
            }
            let diff = Iv::exact(diff).sqrt();
            let kappa_abs = Iv::exact(sum).sqrt().scale(&rel_w);
            let bias = q(last.b[i]).abs() + q(last.b[j]).abs();
            pairs.push(Some(PairRef {
                alpha: diff.add(&kappa_abs),
                kappa_abs,
                beta_const: Iv::exact(Rational::from(&rel_b * &bias) + &pair_const),
                lip: diff.mul(lip_prefix.last().unwrap()),
            }));
        }
    }
    // D_0 = lambda sqrt(n_1) with the largest lambda of the formats involved
    let lambda = covered_accumulations(format, accumulate)
        .into_iter()
        .map(|a| fc(a).lambda)
        .fold(fc(format).lambda, Rational::max);
    let d0 = if ftz {
        Iv::exact(int(net.input_dim() as u64)).sqrt().scale(&lambda)
    } else {
        Iv::zero()
    };
    NetRef {
        layers,
        pairs,
        classes,
        lip_prefix,
        d0,
    }
}

impl NetRef {
    pub fn pair(&self, i: usize, j: usize) -> &PairRef {
        self.pairs[i * self.classes + j].as_ref().unwrap()
    }

    /// Theorem "Layerwise overflow-freedom" at layer `l` (0-based) for `||z_hat_{l-1}|| <= r + D`,
    /// extended to the execution model: `M < F_max` for the products and every
    /// `scale_w S + scale_b ||b||_inf + abs < F_max`, decided exactly.
    pub fn overflow_free(&self, l: usize, r: &Iv, d: &Iv) -> bool {
        let lb = &self.layers[l];
        let radius = r.add(d);
        let s = lb.row_l2_max.mul(&radius);
        let m = radius.scale(&lb.row_inf_max);
        let mut decided = vec![(m, lb.product_f_max.clone())];
        for c in &lb.checks {
            let lhs = s.scale(&c.scale_w).add(&Iv::exact(
                Rational::from(&lb.bias_inf * &c.scale_b) + &c.abs,
            ));
            decided.push((lhs, c.f_max.clone()));
        }
        if decided.iter().all(|(v, f)| v.hi < *f) {
            true
        } else if decided.iter().any(|(v, f)| v.lo >= *f) {
            false
        } else {
            panic!(
                "overflow condition at layer {} undecided at {PREC} bits",
                l + 1
            )
        }
    }

    /// The interleaved forward induction from `r0`: radii `r_0..r_{L-1}` and deviations
    /// `D_0..D_{L-1}`, or the 1-based layer whose overflow condition fails.
    #[allow(clippy::type_complexity)]
    pub fn chain(&self, r0: &Iv) -> Result<(Vec<Iv>, Vec<Iv>), usize> {
        let depth = self.layers.len();
        let (mut r, mut d) = (r0.clone(), self.d0.clone());
        let (mut radii, mut devs) = (Vec::new(), Vec::new());
        for (l, lb) in self.layers.iter().enumerate() {
            radii.push(r.clone());
            devs.push(d.clone());
            if !self.overflow_free(l, &r, &d) {
                return Err(l + 1);
            }
            if l + 1 < depth {
                // D_l = alpha_l D_{l-1} + beta_l(r_{l-1}); r_l = ||W_l|| r_{l-1} + ||b_l||
                d = lb
                    .alpha
                    .mul(&d)
                    .add(&lb.kappa_abs.mul(&r))
                    .add(&lb.beta_const);
                r = lb.spectral.mul(&r).add(&lb.bias_l2);
            }
        }
        Ok((radii, devs))
    }

    /// The deviation recursion driven by given radii; returns `D_{L-1}`.
    pub fn chain_with_radii(&self, radii: &[Iv]) -> Result<Iv, usize> {
        let mut d = self.d0.clone();
        for (l, (lb, r)) in self.layers.iter().zip(radii).enumerate() {
            if !self.overflow_free(l, r, &d) {
                return Err(l + 1);
            }
            if l + 1 < self.layers.len() {
                d = lb
                    .alpha
                    .mul(&d)
                    .add(&lb.kappa_abs.mul(r))
                    .add(&lb.beta_const);
            }
        }
        Ok(d)
    }
}

/// Index of the largest logit, the first on ties (the deployed class).
pub fn argmax(logits: &[f64]) -> usize {
    let mut best = 0;
    for (k, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = k;
        }
    }
    best
}
