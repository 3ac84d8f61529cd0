//! Exact-rational pins of the composed certificate bounds.
//!
//! Every bound lipfp computes with `f64` operations and one `next_up`/`next_down` step is
//! compared against an independent recomputation of the formulas in exact rational arithmetic
//! (rug `Rational`), on small networks, for every format, with and without flush-to-zero, with
//! the default and a declared float32 accumulation, and with a narrowing cast between layers.
//! The formulas are the paper's, generalised to the execution model of docs/soundness.md (the
//! bias at any position of the sum, wider accumulation with one rounding to the storage format,
//! casts as further roundings). The format constants are taken from an independent table (DESIGN.md), not from
//! `Format`; `gamma_n = (1 + u)^n - 1` is expanded exactly.
//!
//! Square roots are enclosed at 256 bits (`Round::Down` / `Round::Up`), so every reference value
//! is an interval `[lo, hi]` of rationals that contains the exact real value. Then:
//!
//! * an upper bound `got` is accepted when `got >= hi` (hence `got >=` the exact value) and
//!   `got <= hi (1 + 1e-12) + 2^-1060` (it is tight; the absolute term only matters for the
//!   float64 `a_mul = 2^-1075` terms, which live in the subnormal range of `f64`);
//! * a lower bound (a slack) is accepted when `got <= lo` (hence `<=` the exact value) and it is
//!   within `1e-9` relative of the exact slack plus `1e-12` of the scale of the terms it is the
//!   difference of;
//! * an overflow condition is decided exactly (`hi < F_max` passes, `lo >= F_max` fails).
//!
//! The norm bounds are inputs of the certificate formulas, so the tests pass chosen values
//! (valid upper bounds: at least the Frobenius norm) and check only the arithmetic built on them.

use std::path::PathBuf;

use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::bounds::certify::quantities::{a_acc, a_dot_fwd, gamma_n};
use lipfp::bounds::certify::{Centre, Certifier, Mode, ModelBounds, PointResult, Refusal};
use lipfp::bounds::norms::LayerNorms;
use lipfp::onnx::model::{Activation, Dense, DenseNet};
use ndarray::Array2;
use rug::float::Round;
use rug::{Float, Rational};

/// Precision of the square-root enclosures (bits).
const PREC: u32 = 256;

// ---------------------------------------------------------------------------------------------
// Exact scalars and intervals
// ---------------------------------------------------------------------------------------------

/// The exact rational value of a finite `f64`.
fn q(x: f64) -> Rational {
    Rational::from_f64(x).unwrap_or_else(|| panic!("non-finite value {x}"))
}

fn int(n: u64) -> Rational {
    Rational::from(n)
}

/// `2^e` exactly.
fn pow2(e: i32) -> Rational {
    Rational::from(1) << e
}

fn frac(num: u64, den: u64) -> Rational {
    Rational::from((num, den))
}

/// Relative tightness allowed for upper bounds.
fn rel_tol() -> Rational {
    frac(1, 1_000_000_000_000)
}

/// Absolute tightness allowed for upper bounds (sixteen thousand `f64` subnormal steps).
fn abs_tol() -> Rational {
    pow2(-1060)
}

/// An enclosure `[lo, hi]` of an exact real value.
#[derive(Clone, Debug)]
struct Iv {
    lo: Rational,
    hi: Rational,
}

impl Iv {
    fn exact(v: Rational) -> Iv {
        Iv {
            lo: v.clone(),
            hi: v,
        }
    }

    fn of(x: f64) -> Iv {
        Iv::exact(q(x))
    }

    fn zero() -> Iv {
        Iv::exact(Rational::new())
    }

    fn add(&self, o: &Iv) -> Iv {
        Iv {
            lo: Rational::from(&self.lo + &o.lo),
            hi: Rational::from(&self.hi + &o.hi),
        }
    }

    fn sub(&self, o: &Iv) -> Iv {
        Iv {
            lo: Rational::from(&self.lo - &o.hi),
            hi: Rational::from(&self.hi - &o.lo),
        }
    }

    /// Product of two nonnegative enclosures.
    fn mul(&self, o: &Iv) -> Iv {
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
    fn scale(&self, k: &Rational) -> Iv {
        assert!(*k >= 0);
        self.mul(&Iv::exact(k.clone()))
    }

    /// Square root of a nonnegative enclosure, enclosed at `PREC` bits.
    fn sqrt(&self) -> Iv {
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

    fn max(&self, o: &Iv) -> Iv {
        Iv {
            lo: self.lo.clone().max(o.lo.clone()),
            hi: self.hi.clone().max(o.hi.clone()),
        }
    }

    fn min(&self, o: &Iv) -> Iv {
        Iv {
            lo: self.lo.clone().min(o.lo.clone()),
            hi: self.hi.clone().min(o.hi.clone()),
        }
    }
}

/// Exact sum of squares of `f64` values.
fn sum_sq(v: impl IntoIterator<Item = f64>) -> Rational {
    v.into_iter().fold(Rational::new(), |acc, x| {
        let x = q(x);
        acc + Rational::from(&x * &x)
    })
}

/// `got` is an upper bound of the enclosed value, and a tight one.
#[track_caller]
fn check_upper(what: &str, got: f64, exact: &Iv) {
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
fn check_exact(what: &str, got: f64, exact: &Rational) {
    assert!(
        q(got) == *exact,
        "{what}: lipfp {got:e}, exact {:e}",
        exact.to_f64()
    );
}

/// `got` is a lower bound of the enclosed value, tight to `1e-9` relative (plus `1e-12` of
/// `scale`, the magnitude of the terms the value is a difference of).
#[track_caller]
fn check_lower(what: &str, got: f64, exact: &Iv, scale: &Rational) {
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
fn bisect(lo: f64, hi: f64, mut pred: impl FnMut(f64) -> bool) -> (f64, f64) {
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

struct Fc {
    p: u32,
    emin: i32,
    u: Rational,
    lambda: Rational,
    a_mul: Rational,
    f_max: Rational,
}

fn fc(f: Format) -> Fc {
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
    fn gamma(&self, n: u64) -> Rational {
        let base = Rational::from(1) + &self.u;
        let mut acc = Rational::from(1);
        for _ in 0..n {
            acc *= &base;
        }
        acc - 1
    }

    fn one_plus_gamma(&self, n: u64) -> Rational {
        self.gamma(n) + 1
    }

    /// `a_acc(n)`: `(1 + gamma_n) n a_mul`, or under FTZ `(1 + gamma_n) 2n lambda` (the `n`
    /// multiplications and the `n` additions of `n` products and one bias may each flush).
    fn a_acc(&self, ftz: bool, n: u64) -> Rational {
        if ftz {
            self.one_plus_gamma(n) * int(2 * n) * &self.lambda
        } else {
            self.one_plus_gamma(n) * int(n) * &self.a_mul
        }
    }

    /// `a_dot_fwd(n) = (1 + gamma_{n-1}) n a_mul`. Under FTZ the paper admits two readings
    /// (the table's `a_mul -> lambda`, the text's `a_dot -> a_dot^FTZ`); a sound implementation
    /// must cover both, and the bias addition, so the reference is their maximum with `a_acc`.
    fn a_dot_fwd(&self, ftz: bool, n: u64) -> Rational {
        if ftz {
            let table = self.one_plus_gamma(n - 1) * int(n) * &self.lambda;
            table.max(self.a_acc(true, n))
        } else {
            self.one_plus_gamma(n - 1) * int(n) * &self.a_mul
        }
    }

    /// Absolute error of one rounding to this format: `a_mul`, or `lambda` under FTZ.
    fn rounding_abs(&self, ftz: bool) -> Rational {
        if ftz {
            self.lambda.clone()
        } else {
            self.a_mul.clone()
        }
    }
}

/// The accumulation formats an execution model covers, from an independent table: a declared
/// one, or the storage format and the next wider one.
fn covered_accumulations(storage: Format, accumulate: Option<Format>) -> Vec<Format> {
    match (accumulate, storage) {
        (Some(a), s) if a != s => vec![a],
        (_, Format::Float16) => vec![Format::Float16, Format::Float32],
        (_, Format::Bfloat16) => vec![Format::Bfloat16, Format::Float32],
        (_, Format::Float32) => vec![Format::Float32, Format::Float64],
        (_, Format::Float64) => vec![Format::Float64],
    }
}

/// One sum bound of a layer's overflow checks: `scale_w S + scale_b ||b||_inf + abs < f_max`.
struct CheckRef {
    scale_w: Rational,
    scale_b: Rational,
    abs: Rational,
    f_max: Rational,
}

type Terms = (Rational, Rational, Rational);

/// One more rounding in format `c` of a value within `(rel_w, rel_b, abs)` of the exact output,
/// whose absolute error is at most `unit`: `rel -> (1 + u)(1 + rel) - 1`, `abs -> (1 + u) abs +
/// unit`; with the bound the value must stay below before the rounding.
fn step_ref((rw, rb, ab): Terms, c: &Fc, unit: Rational) -> (Terms, CheckRef) {
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
fn layer_error_ref(
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
fn weights(f: Format, m: usize, n: usize, seed: usize, scale: f64) -> Array2<f64> {
    Array2::from_shape_fn((m, n), |(r, c)| {
        let k = ((r * n + c) * 37 + seed * 11 + 5) % 29;
        f.round(scale * (k as f64 - 14.0) / 7.0)
    })
}

fn rounded(f: Format, v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| f.round(x)).collect()
}

fn net(f: Format, ws: Vec<Array2<f64>>, bs: Vec<Vec<f64>>) -> DenseNet {
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
fn generated(f: Format, widths: &[usize], scales: &[f64], biases: &[&[f64]]) -> DenseNet {
    let ws = (0..widths.len() - 1)
        .map(|l| weights(f, widths[l + 1], widths[l], l + widths.len(), scales[l]))
        .collect();
    let bs = biases.iter().map(|b| rounded(f, b)).collect();
    net(f, ws, bs)
}

/// Net A: 3 -> 4 -> 2.
fn net_a(f: Format) -> DenseNet {
    generated(
        f,
        &[3, 4, 2],
        &[1.0, 1.0],
        &[&[0.5, -0.25, 0.1, 0.3], &[0.2, -0.7]],
    )
}

/// Net B: 4 -> 5 -> 5 -> 3.
fn net_b(f: Format) -> DenseNet {
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
fn net_c(f: Format) -> DenseNet {
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

/// Frobenius norm (round to nearest; only used to choose valid norm bounds with some room).
fn frob(w: &Array2<f64>) -> f64 {
    w.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Norm bounds: small dyadic numbers (`dyadic`) or arbitrary binary fractions above the
/// Frobenius norm, with `|||W||| > ||W||`.
fn norms_for(net: &DenseNet, dyadic: bool) -> Vec<LayerNorms> {
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

struct Case {
    label: String,
    format: Format,
    accumulate: Option<Format>,
    ftz: bool,
    net: DenseNet,
    norms: Vec<LayerNorms>,
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for format in [
        Format::Float32,
        Format::Float16,
        Format::Float64,
        Format::Bfloat16,
    ] {
        for ftz in [false, true] {
            for (name, net, dyadic) in [
                ("A 3-4-2", net_a(format), true),
                ("B 4-5-5-3", net_b(format), false),
                ("C 2-3-3", net_c(format), false),
            ] {
                let norms = norms_for(&net, dyadic);
                cases.push(Case {
                    label: format!("{format} ftz={ftz} net {name}"),
                    format,
                    accumulate: None,
                    ftz,
                    net,
                    norms,
                });
            }
            // declared float32 accumulation, and a float32 net with a float16 cast round trip
            // after its first layer
            let (declared, casted) = match format {
                Format::Float16 | Format::Bfloat16 => (Some(Format::Float32), None),
                Format::Float32 => (None, Some(Format::Float16)),
                Format::Float64 => (None, Some(Format::Float32)),
            };
            let mut net = net_b(format);
            net.layers[0].casts.extend(casted);
            // tf2onnx-style layers: a MatMul and a separate bias Add (a runtime may round
            // between them when it accumulates in a wider format)
            for l in &mut net.layers {
                l.ops = vec!["MatMul".into(), "Add".into()];
            }
            let norms = norms_for(&net, false);
            cases.push(Case {
                label: format!("{format} ftz={ftz} net B accumulate={declared:?} casts={casted:?}"),
                format,
                accumulate: declared,
                ftz,
                net,
                norms,
            });
        }
    }
    cases
}

impl Case {
    /// lipfp's bounds for the case.
    fn bounds(&self) -> ModelBounds {
        let exec = ExecutionModel::deployed(self.format, self.accumulate, self.ftz).unwrap();
        ModelBounds::new(&self.net, &self.norms, &exec)
    }

    /// The exact reference for the case.
    fn reference(&self) -> NetRef {
        reference(
            &self.net,
            &self.norms,
            self.format,
            self.accumulate,
            self.ftz,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The exact reference: the paper's definitions in rationals
// ---------------------------------------------------------------------------------------------

struct LayerRef {
    spectral: Iv,
    alpha: Iv,
    kappa_abs: Iv,
    beta_const: Iv,
    bias_l2: Iv,
    row_l2_max: Iv,
    row_inf_max: Rational,
    bias_inf: Rational,
    product_f_max: Rational,
    checks: Vec<CheckRef>,
}

struct PairRef {
    alpha: Iv,
    kappa_abs: Iv,
    beta_const: Iv,
    lip: Iv,
}

struct NetRef {
    layers: Vec<LayerRef>,
    /// Row-major `(i, j)`, `None` on the diagonal.
    pairs: Vec<Option<PairRef>>,
    classes: usize,
    lip_prefix: Vec<Iv>,
    d0: Iv,
}

/// One Standard/real certificate recomputed exactly.
struct SlackRef {
    /// `min_j` of the per-class slack.
    slack: Iv,
    /// `max_j (|m_ij| + L_ij eps + E_ctr + E_ball)`: the magnitude of the terms.
    scale: Rational,
    /// `sum_j (E_ctr + E_ball)`.
    degradation: Iv,
    /// `sum_j L_ij eps`.
    leps: Iv,
}

fn reference(
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
    fn pair(&self, i: usize, j: usize) -> &PairRef {
        self.pairs[i * self.classes + j].as_ref().unwrap()
    }

    /// Theorem "Layerwise overflow-freedom" at layer `l` (0-based) for `||z_hat_{l-1}|| <= r + D`,
    /// extended to the execution model: `M < F_max` for the products and every
    /// `scale_w S + scale_b ||b||_inf + abs < F_max`, decided exactly.
    fn overflow_free(&self, l: usize, r: &Iv, d: &Iv) -> bool {
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
    fn chain(&self, r0: &Iv) -> Result<(Vec<Iv>, Vec<Iv>), usize> {
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
    fn chain_with_radii(&self, radii: &[Iv]) -> Result<Iv, usize> {
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

    /// Theorem "Floating-point robustness certificate":
    /// `min_j (m_ij(x) - L_ij eps - E_ctr - E_ball)`, with `E` from Lemma "Final-layer pairwise
    /// deviation" on the deterministic chains from `||x||` and `||x|| + eps`.
    fn standard(&self, logits: &[f64], x_norm: f64, eps: f64) -> Result<SlackRef, usize> {
        let r0_ball = Iv::exact(q(x_norm) + q(eps));
        let (rb, db) = self.chain(&r0_ball)?;
        let (rc, dc) = self.chain(&Iv::of(x_norm))?;
        let top = self.layers.len() - 1;
        let e = |p: &PairRef, d: &Iv, r: &Iv| {
            p.alpha.mul(d).add(&p.kappa_abs.mul(r)).add(&p.beta_const)
        };
        Ok(self.fold_pairs(logits, eps, |p| {
            e(p, &dc[top], &rc[top]).add(&e(p, &db[top], &rb[top]))
        }))
    }

    /// The classical check `min_j (m_ij(x) - L_ij eps)`.
    fn real(&self, logits: &[f64], eps: f64) -> SlackRef {
        self.fold_pairs(logits, eps, |_| Iv::zero())
    }

    fn fold_pairs(&self, logits: &[f64], eps: f64, err: impl Fn(&PairRef) -> Iv) -> SlackRef {
        let i = argmax(logits);
        let mut out: Option<SlackRef> = None;
        for j in (0..self.classes).filter(|&j| j != i) {
            let p = self.pair(i, j);
            let m = Iv::exact(q(logits[i]) - q(logits[j]));
            let leps = p.lip.scale(&q(eps));
            let e = err(p);
            let s = m.sub(&leps).sub(&e);
            let scale = m.hi.clone().abs() + &leps.hi + &e.hi;
            out = Some(match out {
                None => SlackRef {
                    slack: s,
                    scale,
                    degradation: e,
                    leps,
                },
                Some(acc) => SlackRef {
                    slack: acc.slack.min(&s),
                    scale: acc.scale.max(scale),
                    degradation: acc.degradation.add(&e),
                    leps: acc.leps.add(&leps),
                },
            });
        }
        out.unwrap()
    }
}

/// Index of the largest logit, the first on ties (the deployed class).
fn argmax(logits: &[f64]) -> usize {
    let mut best = 0;
    for (k, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = k;
        }
    }
    best
}

fn certify(mb: &ModelBounds, mode: Mode, logits: &[f64], x_norm: f64, eps: f64) -> PointResult {
    Certifier { fmt: mb, hi: None }.certify(
        mode,
        &Centre {
            logits,
            x_norm,
            hi: None,
            decided: None,
        },
        eps,
    )
}

/// Centre logits (exact format values) whose margin clears the Standard error terms at
/// `eps = 0` comfortably, so that a positive-slack range of `eps` exists.
fn logits_for(case: &Case, nr: &NetRef, x_norm: f64) -> Vec<f64> {
    let f = case.format;
    let others = [0.25, -0.5, 0.75];
    let classes = nr.classes;
    let winner = classes / 2;
    let mut logits: Vec<f64> = (0..classes).map(|k| f.round(others[k % 3])).collect();
    let top_other = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    logits[winner] = f.round(top_other + 1.0);
    let e = nr
        .standard(&logits, x_norm, 0.0)
        .unwrap()
        .degradation
        .hi
        .to_f64();
    logits[winner] = f.round(top_other + 2.0 * e + 1.0);
    assert_eq!(argmax(&logits), winner);
    logits
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn format_constants_match_the_independent_table() {
    for f in Format::ALL {
        let c = fc(f);
        assert_eq!(f.precision(), c.p, "{f}");
        assert_eq!(f.emin(), c.emin, "{f}");
        check_exact(&format!("{f} u"), f.unit_roundoff(), &c.u);
        check_exact(&format!("{f} lambda"), f.lambda(), &c.lambda);
        check_exact(&format!("{f} F_max"), f.f_max(), &c.f_max);
        assert_eq!(pow2(f.a_mul_exponent()), c.a_mul, "{f} a_mul");
    }
}

#[test]
fn scalar_quantities_match_exact_rationals() {
    for f in Format::ALL {
        let c = fc(f);
        for n in [1u64, 2, 3, 4, 5, 8, 100, 784] {
            let w = format!("{f} n={n}");
            check_upper(&format!("gamma {w}"), gamma_n(f, n), &Iv::exact(c.gamma(n)));
            for ftz in [false, true] {
                check_upper(
                    &format!("a_acc {w} ftz={ftz}"),
                    a_acc(f, ftz, n),
                    &Iv::exact(c.a_acc(ftz, n)),
                );
                check_upper(
                    &format!("a_dot_fwd {w} ftz={ftz}"),
                    a_dot_fwd(f, ftz, n),
                    &Iv::exact(c.a_dot_fwd(ftz, n)),
                );
            }
        }
    }
}

#[test]
fn model_bounds_are_tight_upper_bounds_of_the_exact_constants() {
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let w = &case.label;
        assert!(mb.vacuous.is_none(), "{w}: {:?}", mb.vacuous);
        assert_eq!(mb.format, case.format);
        assert_eq!(mb.ftz, case.ftz);
        assert_eq!(mb.classes, nr.classes, "{w}");
        assert_eq!(mb.layers.len(), nr.layers.len(), "{w}");
        for (l, (got, ex)) in mb.layers.iter().zip(&nr.layers).enumerate() {
            let w = format!("{w} layer {}", l + 1);
            check_upper(&format!("{w} spectral"), got.spectral, &ex.spectral);
            check_upper(&format!("{w} kappa_abs"), got.kappa_abs, &ex.kappa_abs);
            check_upper(&format!("{w} alpha"), got.alpha, &ex.alpha);
            check_upper(&format!("{w} bias_l2"), got.bias_l2, &ex.bias_l2);
            check_upper(&format!("{w} beta_const"), got.beta_const, &ex.beta_const);
            let o = &got.overflow;
            check_upper(&format!("{w} row_l2_max"), o.row_l2_max, &ex.row_l2_max);
            check_exact(&format!("{w} row_inf_max"), o.row_inf_max, &ex.row_inf_max);
            check_exact(&format!("{w} bias_inf"), o.bias_inf, &ex.bias_inf);
            check_exact(
                &format!("{w} product f_max"),
                o.product_f_max,
                &ex.product_f_max,
            );
            // the same checks, in any order: each reference check has exactly one lipfp check
            // with the same F_max that is a tight upper bound of it
            assert_eq!(o.checks.len(), ex.checks.len(), "{w}: overflow checks");
            let mut unmatched: Vec<_> = o.checks.iter().collect();
            for (k, e) in ex.checks.iter().enumerate() {
                let close = |x: f64, v: &Rational| {
                    q(x) >= *v
                        && q(x) <= Rational::from(v * &(Rational::from(1) + rel_tol())) + abs_tol()
                };
                let found = unmatched.iter().position(|g| {
                    q(g.f_max) == e.f_max
                        && close(g.scale_w, &e.scale_w)
                        && close(g.scale_b, &e.scale_b)
                        && close(g.abs, &e.abs)
                });
                let Some(i) = found else {
                    panic!("{w}: no lipfp overflow check matches reference check {k}")
                };
                unmatched.remove(i);
            }
        }
        assert_eq!(mb.lip_prefix.len(), nr.lip_prefix.len(), "{w}");
        for (l, (got, ex)) in mb.lip_prefix.iter().zip(&nr.lip_prefix).enumerate() {
            check_upper(&format!("{w} lip_prefix[{l}]"), *got, ex);
        }
        check_upper(&format!("{w} d0"), mb.d0, &nr.d0);
        assert_eq!(mb.pairs.len(), nr.classes * nr.classes, "{w}");
        for i in 0..nr.classes {
            for j in (0..nr.classes).filter(|&j| j != i) {
                let (got, ex) = (mb.pair(i, j), nr.pair(i, j));
                let w = format!("{w} pair ({i},{j})");
                check_upper(&format!("{w} alpha"), got.alpha, &ex.alpha);
                check_upper(&format!("{w} kappa_abs"), got.kappa_abs, &ex.kappa_abs);
                check_upper(&format!("{w} beta_const"), got.beta_const, &ex.beta_const);
                check_upper(&format!("{w} lip"), got.lip, &ex.lip);
            }
        }
    }
}

#[test]
fn deviation_chain_and_radii_are_tight_upper_bounds() {
    let mut overflowed = 0;
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let depth = nr.layers.len();
        let top = depth - 1;
        for r0 in [0.0, 0.375, 1.25, 3.1, 17.0, 2.5e3, 4e4] {
            let w = format!("{} r0={r0}", case.label);
            let (rs, ds) = match nr.chain(&Iv::of(r0)) {
                Ok(v) => v,
                Err(l) => {
                    // far from the boundary: lipfp refuses at the same layer
                    assert_eq!(mb.hidden_chain(r0), Err(Refusal::Overflow(l)), "{w}");
                    assert_eq!(mb.deviation_profile(r0).err(), Some(Refusal::Overflow(l)));
                    overflowed += 1;
                    continue;
                }
            };
            let (r, d) = mb.hidden_chain(r0).unwrap_or_else(|e| panic!("{w}: {e}"));
            check_upper(&format!("{w} r_(L-1)"), r, &rs[top]);
            check_upper(&format!("{w} D_(L-1)"), d, &ds[top]);
            let (radii, devs) = mb.deviation_profile(r0).unwrap();
            assert_eq!((radii.len(), devs.len()), (depth, depth), "{w}");
            for l in 0..depth {
                check_upper(&format!("{w} r_{l}"), radii[l], &rs[l]);
                check_upper(&format!("{w} D_{l}"), devs[l], &ds[l]);
            }
            assert_eq!(
                (radii[top], devs[top]),
                (r, d),
                "{w}: profile and chain differ"
            );
            // the recursion driven by arbitrary (measured-style) radii
            let given: Vec<f64> = (0..depth).map(|l| r0 + 0.7 * (l as f64) + 0.1).collect();
            let got = mb.chain_with_radii(&given).unwrap();
            let given_iv: Vec<Iv> = given.iter().map(|&x| Iv::of(x)).collect();
            let ex = nr.chain_with_radii(&given_iv).unwrap();
            check_upper(&format!("{w} chain_with_radii"), got, &ex);
        }
    }
    // the float16 cases at the largest radii overflow; the comparison above covers them
    assert!(overflowed > 0);
}

#[test]
fn standard_slack_is_a_tight_lower_bound_and_the_verdict_flips_at_the_exact_boundary() {
    let x_norm = 1.25;
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let logits = logits_for(&case, &nr, x_norm);
        let exact = |eps: f64| nr.standard(&logits, x_norm, eps).unwrap();
        let check = |eps: f64, what: &str| -> PointResult {
            let w = format!("{} standard eps={eps:e} ({what})", case.label);
            let ex = exact(eps);
            let got = certify(&mb, Mode::Standard, &logits, x_norm, eps);
            let slack = got
                .slack
                .unwrap_or_else(|| panic!("{w}: {:?}", got.verdict));
            check_lower(&w, slack, &ex.slack, &ex.scale);
            assert_eq!(got.verdict.is_ok(), slack > 0.0, "{w}");
            // the reported statistics: sum_j (E_ctr + E_ball) and sum_j L_ij eps
            let (deg, leps) = got.degradation.unwrap();
            let close = |a: f64, b: &Iv| {
                let tol = Rational::from(&b.hi * &rel_tol())
                    + Rational::from(&ex.scale * &rel_tol()) * int(nr.classes as u64);
                (q(a) - &b.hi).abs() <= tol
            };
            assert!(close(deg, &ex.degradation), "{w}: degradation {deg:e}");
            assert!(close(leps, &ex.leps), "{w}: sum L eps {leps:e}");
            got
        };
        for eps in [0.0, 1e-3, 0.01, 0.05] {
            if exact(eps).slack.lo > 0 {
                check(eps, "fixed");
            }
        }
        assert!(exact(0.0).slack.lo > 0, "{}: no positive slack", case.label);
        let mut hi = 0.125;
        while exact(hi).slack.lo > 0 {
            hi *= 2.0;
        }
        // adjacent f64 radii around the exact boundary: slack(lo) > 0 >= slack(hi)
        let (e_pos, e_neg) = bisect(0.0, hi, |e| exact(e).slack.lo <= 0);
        let w = &case.label;
        // a sweep from 0 to 1.4x the boundary: every slack is a tight lower bound
        for k in 1..=40 {
            check(e_pos * k as f64 / 29.0, "sweep");
        }
        // at the first eps whose exact slack is not positive, lipfp must refuse
        assert_eq!(
            check(e_neg, "first non-positive exact slack").verdict,
            Err(Refusal::Margin),
            "{w}"
        );
        check(e_pos, "last positive exact slack");
        // slightly positive / slightly negative, beyond the rounding tolerance: the verdicts agree
        let (slightly_in, slightly_out) = (e_pos * (1.0 - 1e-6), e_neg * (1.0 + 1e-6));
        let tol = |ex: &SlackRef| Rational::from(&ex.scale * &rel_tol()) * 1000;
        let ex_in = exact(slightly_in);
        assert!(ex_in.slack.lo > tol(&ex_in), "{w}: slack too close to 0");
        assert_eq!(
            check(slightly_in, "slightly positive").verdict,
            Ok(()),
            "{w}"
        );
        let ex_out = exact(slightly_out);
        assert!(Rational::from(-&ex_out.slack.hi) > tol(&ex_out), "{w}");
        assert_eq!(
            check(slightly_out, "slightly negative").verdict,
            Err(Refusal::Margin),
            "{w}"
        );
        // lipfp's own boundary: never past the exact one, and close to it
        let refuses = |e: f64| {
            certify(&mb, Mode::Standard, &logits, x_norm, e)
                .verdict
                .is_err()
        };
        let (l_ok, _) = bisect(0.0, e_neg, refuses);
        assert!(
            l_ok <= e_pos,
            "{w}: lipfp certifies past the exact boundary"
        );
        assert!(
            l_ok >= e_pos * (1.0 - 1e-9),
            "{w}: lipfp boundary {l_ok:e} vs exact {e_pos:e}"
        );
    }
}

#[test]
fn real_slack_is_a_tight_lower_bound_and_the_verdict_flips_at_the_exact_boundary() {
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let logits = logits_for(&case, &nr, 1.25);
        let w = &case.label;
        let check = |eps: f64| -> PointResult {
            let ex = nr.real(&logits, eps);
            let got = certify(&mb, Mode::Real, &logits, 1.25, eps);
            let slack = got.slack.unwrap();
            check_lower(
                &format!("{w} real eps={eps:e}"),
                slack,
                &ex.slack,
                &ex.scale,
            );
            assert_eq!(got.verdict.is_ok(), slack > 0.0, "{w}");
            assert_eq!(got.degradation.unwrap().0, 0.0);
            got
        };
        for eps in [0.0, 1e-3, 0.1] {
            check(eps);
        }
        let mut hi = 0.125;
        while nr.real(&logits, hi).slack.lo > 0 {
            hi *= 2.0;
        }
        let (e_pos, e_neg) = bisect(0.0, hi, |e| nr.real(&logits, e).slack.lo <= 0);
        for k in 1..=40 {
            check(e_pos * k as f64 / 29.0);
        }
        assert_eq!(check(e_neg).verdict, Err(Refusal::Margin), "{w}");
        check(e_pos);
        assert_eq!(check(e_pos * (1.0 - 1e-9)).verdict, Ok(()), "{w}");
        assert_eq!(
            check(e_neg * (1.0 + 1e-9)).verdict,
            Err(Refusal::Margin),
            "{w}"
        );
    }
}

/// Nets whose overflow condition binds first at layer 1, 2 and 3 respectively.
fn overflow_nets(f: Format) -> Vec<(DenseNet, usize)> {
    let b3: &[&[f64]] = &[&[0.5, -0.25, 0.1, 0.3], &[0.2, -0.7]];
    let b4: &[&[f64]] = &[
        &[0.1, -0.2, 0.3, 0.05, -0.15],
        &[0.01, 0.02, -0.03, 0.5, 0.25],
        &[0.125, -0.0625, 0.3],
    ];
    vec![
        (generated(f, &[3, 4, 2], &[4.0, 0.0625], b3), 1),
        (generated(f, &[4, 5, 5, 3], &[1.0, 4.0, 0.0625], b4), 2),
        (generated(f, &[4, 5, 5, 3], &[1.0, 1.0, 4.0], b4), 3),
        (net_c(f), 2),
    ]
}

#[test]
fn overflow_refusal_matches_the_exact_condition_at_the_boundary() {
    for format in Format::ALL {
        for ftz in [false, true] {
            for (k, (net, layer)) in overflow_nets(format).into_iter().enumerate() {
                let w = format!("{format} ftz={ftz} overflow net {k}");
                let norms = norms_for(&net, false);
                let mb = ModelBounds::new(
                    &net,
                    &norms,
                    &ExecutionModel::deployed(format, None, ftz).unwrap(),
                );
                let nr = reference(&net, &norms, format, None, ftz);
                let exact_fails = |r: f64| nr.chain(&Iv::of(r)).is_err();
                let mut hi = 1.0;
                while !exact_fails(hi) {
                    assert!(hi < f64::MAX, "{w}: no overflow below f64::MAX");
                    hi = (hi * 16.0).min(f64::MAX);
                }
                // adjacent f64 input radii: the exact conditions hold at r_ok and fail at r_fail
                let (r_ok, r_fail) = bisect(0.0, hi, exact_fails);
                assert_eq!(nr.chain(&Iv::of(r_fail)).err(), Some(layer), "{w}");
                assert!(nr.chain(&Iv::of(r_ok)).is_ok());
                // lipfp refuses where the exact condition fails, at the same layer
                assert_eq!(
                    mb.hidden_chain(r_fail),
                    Err(Refusal::Overflow(layer)),
                    "{w}"
                );
                assert_eq!(
                    mb.deviation_profile(r_fail).err(),
                    Some(Refusal::Overflow(layer)),
                    "{w}"
                );
                // lipfp's boundary: wherever lipfp passes, the exact condition holds
                let (l_ok, l_fail) = bisect(0.0, r_fail, |r| mb.hidden_chain(r).is_err());
                assert!(!exact_fails(l_ok), "{w}: lipfp passes at {l_ok:e}");
                assert!(l_ok <= r_ok);
                let refused_at = mb.hidden_chain(l_fail).unwrap_err();
                let tight = l_ok >= r_ok * (1.0 - 1e-12);
                if format == Format::Float64 && !tight {
                    // Near F_max = f64::MAX an exact radius past f64::MAX rounds to +inf in
                    // lipfp's f64 steps, which refuses (conservatively) at the next layer.
                    // Pin that this is the only reason: at lipfp's first refused radius the
                    // exact conditions all hold and the exact `r + D` entering the refusing
                    // layer is within a rounding step of f64::MAX.
                    let Refusal::Overflow(l) = refused_at else {
                        panic!("{w}: {refused_at:?}")
                    };
                    assert!(l > layer, "{w}: {refused_at:?}");
                    let (rs, ds) = nr.chain(&Iv::of(l_fail)).unwrap();
                    let entering = rs[l - 1].add(&ds[l - 1]);
                    let near_max = q(f64::MAX) * (Rational::from(1) - rel_tol());
                    assert!(
                        entering.hi >= near_max,
                        "{w}: conservative for another reason"
                    );
                    continue;
                }
                assert_eq!(refused_at, Refusal::Overflow(layer), "{w}");
                assert!(tight, "{w}: lipfp boundary {l_ok:e}, exact {r_ok:e}");
            }
        }
    }
}

#[test]
fn standard_refuses_with_the_exact_overflow_layer_at_the_centre_and_over_the_ball() {
    for ftz in [false, true] {
        for (k, (net, layer)) in overflow_nets(Format::Float16).into_iter().enumerate() {
            let w = format!("float16 ftz={ftz} overflow net {k}");
            let norms = norms_for(&net, true);
            let mb = ModelBounds::new(
                &net,
                &norms,
                &ExecutionModel::deployed(Format::Float16, None, ftz).unwrap(),
            );
            let nr = reference(&net, &norms, Format::Float16, None, ftz);
            let exact_fails = |r: f64| nr.chain(&Iv::of(r)).is_err();
            let (r_ok, r_fail) = bisect(0.0, 65504.0, exact_fails);
            // float16 values
            let mut logits = vec![1.0; nr.classes];
            logits[0] = 30000.0;
            // the centre itself is past the boundary
            assert_eq!(nr.standard(&logits, r_fail, 0.0).err(), Some(layer), "{w}");
            let got = certify(&mb, Mode::Standard, &logits, r_fail, 0.0);
            assert_eq!(got.verdict, Err(Refusal::Overflow(layer)), "{w} centre");
            assert_eq!(got.slack, None);
            // the centre is inside, the ball reaches past the boundary
            let x_norm = r_ok / 2.0;
            let eps = r_fail - x_norm;
            assert!(q(x_norm) + q(eps) >= q(r_fail));
            assert_eq!(nr.standard(&logits, x_norm, eps).err(), Some(layer), "{w}");
            let got = certify(&mb, Mode::Standard, &logits, x_norm, eps);
            assert_eq!(got.verdict, Err(Refusal::Overflow(layer)), "{w} ball");
            // the real mode checks no overflow
            assert!(certify(&mb, Mode::Real, &logits, x_norm, eps)
                .slack
                .is_some());
        }
    }
}

/// The directed `f64` steps every bound above is composed of (`lipfp::arith::sound`), one by one
/// against exact rationals: upward steps are upper bounds, downward steps lower bounds, each
/// within two rounding steps (relative `2^-51`, or two subnormal steps near zero). The composed
/// tests above can miss a missing step when a neighbouring step happens to cover it.
#[test]
fn directed_steps_round_toward_the_safe_side() {
    use lipfp::arith::sound::{add_up, l2_norm_up, mul_up, sqrt_up, sub_down};
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut vals = vec![
        0.0,
        1.0,
        2.0,
        3.0,
        0.1,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::from_bits(3),
        2f64.powi(-600),
    ];
    for _ in 0..3000 {
        let r = next();
        let e = (r % 200) as i32 - 100;
        let m = 1.0 + (r >> 11) as f64 / (1u64 << 53) as f64;
        vals.push(m * 2f64.powi(e));
    }
    vals.extend((2..=2000).map(|k| k as f64));
    let step = pow2(-51);
    // in the subnormal range: half a step of rounding plus the full `next_up` step
    let tiny = pow2(-1073);
    let within_up = |got: f64, exact: &Rational| {
        let g = q(got);
        assert!(
            g >= *exact,
            "not an upper bound: {got:e} < {:e}",
            exact.to_f64()
        );
        g <= exact.clone().abs() * &step + exact + &tiny
    };
    for w in vals.windows(2) {
        let (a, b) = (w[0], w[1]);
        let (qa, qb) = (q(a), q(b));
        let sum = Rational::from(&qa + &qb);
        assert!(within_up(add_up(a, b), &sum), "add_up({a:e}, {b:e})");
        let prod = Rational::from(&qa * &qb);
        assert!(within_up(mul_up(a, b), &prod), "mul_up({a:e}, {b:e})");
        // a lower bound of a - b is minus an upper bound of b - a
        let diff = Rational::from(&qb - &qa);
        assert!(within_up(-sub_down(a, b), &diff), "sub_down({a:e}, {b:e})");
        // sqrt_up(a)^2 >= a, and two steps down it is below sqrt(a)
        let s = sqrt_up(a);
        assert!(Rational::from(q(s).square_ref()) >= qa, "sqrt_up({a:e})");
        if a > 0.0 {
            let below = s.next_down().next_down();
            assert!(
                Rational::from(q(below).square_ref()) < qa,
                "sqrt_up({a:e}) loose"
            );
        }
    }
    // l2_norm_up on short vectors of format values, against the exact enclosure
    for (k, f) in Format::ALL.into_iter().cycle().take(400).enumerate() {
        let len = 1 + k % 8;
        let v: Vec<f64> = (0..len)
            .map(|_| {
                let r = next();
                let x = (r >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
                f.round(x * 2f64.powi((r % 7) as i32 - 3))
            })
            .collect();
        let exact = Iv::exact(sum_sq(v.iter().copied())).sqrt();
        check_upper(
            &format!("l2_norm_up {v:?}"),
            l2_norm_up(v.iter().copied()),
            &exact,
        );
    }
}
