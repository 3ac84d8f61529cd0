//! Elementwise affine steps (Sub/Add/Mul/Div by a constant, BatchNormalization, Scaler): the
//! error terms of `lipfp::bounds::certify::affine` are upper bounds of every execution lipfp covers.
//!
//! * Exact rationals, per op kind and format: each step is read by the real loader from a small
//!   ONNX model; at adversarial inputs (zero, subnormals, the largest finite values, values next
//!   to the step's root where the output cancels, random values over many binades) every
//!   emulated execution — each op rounded to storage, computed in the next wider format then
//!   rounded, a division as a multiplication by the rounded reciprocal, BatchNormalization as
//!   written or precomputed as onnxruntime does (`x * a_hat + b_hat`, with and without FMA) —
//!   is compared with the exact value `a x_hat + c` (square roots enclosed at 256 bits):
//!   per feature `|y_hat - (a x_hat + c)| <= e |x_hat| + f`, and the aggregate statement of
//!   `step_bounds`; `scale_max >= max |a|`, `shift_l2 >= ||c||`.
//! * Model level: lipfp's centre logits of small networks with steps stay within
//!   `ModelBounds::margin_deviation` of the exact network's margins.
//!
//! onnxruntime against the same bounds is in `tests/oracles/affine_steps_runtime.rs`; the enclosures,
//! emulations and models both use are in `tests/common/affine.rs`.

use crate::common::affine::*;
use crate::common::affine_nets::*;
use crate::common::onnx_builder::*;
use lipfp::arith::format::Format;
use lipfp::arith::sound::l2_norm_up;
use lipfp::bounds::certify::affine::step_bounds;
use lipfp::onnx::model::{AffineStep, ElementOp};
use rug::float::Round;
use rug::{Float, Rational};

// ---------------------------------------------------------------------------------------------
// Steps read by the loader, against exact rationals
// ---------------------------------------------------------------------------------------------

/// Per feature and variant: `|y_hat - exact| <= e_i |x_hat| + f_i`; returns the largest ratio
/// and the number of finite comparisons.
fn check_per_feature(kind: &str, step: &AffineStep, f: Format) -> (f64, usize) {
    let (mut worst, mut count) = (0.0f64, 0);
    for i in 0..step.width {
        let sb = step_bounds(&feature_step(step, i), f);
        for x in inputs(step, i, f, i as u64 + 11) {
            let exact = exact_step(step, i, Iv::pt(q(x)));
            let bound = q(sb.error_rel) * q(x.abs()) + q(sb.error_const);
            for v in variants(f) {
                let y = emulate(step, i, x, f, v);
                if !y.is_finite() {
                    continue; // overflow: the step's overflow checks refuse such inputs
                }
                count += 1;
                let dev = exact.dev(&q(y));
                assert!(
                    dev <= bound,
                    "{kind} {f} feature {i} x = {x:e} {v:?}: y_hat = {y:e}, exact ~ {:e}, \
                     |error| = {:e} > bound {:e} (e = {:e}, f = {:e})",
                    exact.lo.to_f64(),
                    dev.to_f64(),
                    bound.to_f64(),
                    sb.error_rel,
                    sb.error_const
                );
                if bound > 0 {
                    worst = worst.max(Rational::from(&dev / &bound).to_f64());
                }
            }
        }
    }
    (worst, count)
}

/// The aggregate statement of `step_bounds` on whole vectors, and its magnitude bounds.
fn check_aggregate(kind: &str, step: &AffineStep, f: Format) {
    let sb = step_bounds(step, f);
    let mut c_sq = Rational::new();
    for i in 0..step.width {
        let a = exact_slope(step, i);
        assert!(
            q(sb.scale_max) >= a.mag(),
            "{kind} {f}: scale_max < |a_{i}|"
        );
        c_sq += exact_step(step, i, Iv::pt(Rational::new())).mag().square();
    }
    assert!(
        q(sb.shift_l2).square() >= c_sq,
        "{kind} {f}: shift_l2 < ||c||"
    );
    let per: Vec<Vec<f64>> = (0..step.width).map(|i| inputs(step, i, f, 3)).collect();
    let mut rng = Lcg::new(17);
    for _ in 0..200 {
        let x: Vec<f64> = per
            .iter()
            .map(|p| p[(rng.next_u64() % p.len() as u64) as usize])
            .collect();
        let x_sq: Rational = x.iter().map(|&v| q(v).square()).sum();
        let mut x_norm = Float::with_val_round(256, &x_sq, Round::Down).0;
        x_norm.sqrt_round(Round::Down);
        let rhs = q(sb.error_rel) * x_norm.to_rational().unwrap() + q(sb.error_const);
        for v in variants(f) {
            let y: Vec<f64> = (0..step.width)
                .map(|i| emulate(step, i, x[i], f, v))
                .collect();
            if y.iter().any(|t| !t.is_finite()) {
                continue;
            }
            let lhs: Rational = (0..step.width)
                .map(|i| exact_step(step, i, Iv::pt(q(x[i]))).dev(&q(y[i])).square())
                .sum();
            assert!(lhs <= rhs.clone().square(), "{kind} {f} {v:?} at {x:?}");
        }
    }
}

#[test]
fn step_errors_are_upper_bounds_against_exact_rationals() {
    let dir = tempfile::tempdir().unwrap();
    for f in [Format::Float64, Format::Float32, Format::Float16] {
        for kind in KINDS {
            let step = loaded_step(kind, f, dir.path());
            let (worst, count) = check_per_feature(kind, &step, f);
            check_aggregate(kind, &step, f);
            println!("{f} {kind}: {count} comparisons, max |error| / bound = {worst:.3e}");
            assert!(count > 100, "{kind} {f}: too few finite comparisons");
        }
    }
}

/// BatchNormalization precomputed as onnxruntime does (`a_hat = fl(fl(1/root) * scale)`) with a
/// slope `a` in the subnormal range of the format the precomputation rounds to: `a_hat` then has
/// an absolute error up to half the smallest subnormal, relative error far above `(1+rho)^8-1`,
/// and `x_hat * a_hat` at large `|x_hat|` exceeded `e |x_hat| + f` before the bound had the
/// slope's absolute error (float32: scale 1e-40, var 3, x = F_max, 10x; float16: scale 1e-4,
/// var 1e4, x = 65504, 1.7x); likewise division by a huge constant as a multiplication by a
/// subnormal reciprocal (`div_huge`).
#[test]
fn precomputed_batchnorm_with_a_subnormal_slope() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, f) in [
        ("div_huge", Format::Float32),
        ("tiny", Format::Float32),
        ("tiny", Format::Float16),
    ] {
        let step = loaded_step(kind, f, dir.path());
        let (worst, count) = check_per_feature(kind, &step, f);
        println!("{f} {kind}: {count} comparisons, max |error| / bound = {worst:.3e}");
    }
}

#[test]
fn the_loader_reads_each_kind_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let names = |s: &AffineStep| s.ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(",");
    let expect = [
        ("add", "add"),
        ("sub", "add"),
        ("neg_sub", "neg,add"),
        ("mul", "mul"),
        ("div", "div"),
        ("div_scalar", "div"),
        ("batchnorm", "batchnorm"),
        ("scaler", "add,mul"),
        ("sub_div", "add,div"),
        ("sub_mul", "add,mul"),
        ("sub_bn_mul", "add,batchnorm,mul"),
    ];
    for (kind, ops) in expect {
        let step = loaded_step(kind, Format::Float32, dir.path());
        assert_eq!(names(&step), ops, "{kind}");
        assert_eq!(step.width, W);
    }
    let sub = loaded_step("sub", Format::Float32, dir.path());
    let negated = [-1.5f32, 0.3, -1.0e4, 7.1e-3, -3.0e-7].map(f64::from);
    assert_eq!(sub.ops[0], ElementOp::Add(negated.to_vec()));
}

/// Constants broadcast over an image activation `[batch, C=2, H=3, W=2]` (per channel
/// `[2, 1, 1]` and `[1, 2, 1, 1]`, per row `[3, 1]`, BatchNorm parameters `[2]` along axis 1)
/// are spread over the features in `Flatten`'s order `(c * 3 + h) * 2 + w`.
#[test]
fn per_channel_constants_are_spread_in_flatten_order() {
    let dir = tempfile::tempdir().unwrap();
    let (model, n) = net_model("channels", dir.path());
    let net = lipfp::onnx::model::load(&model, Format::Float32, false).unwrap();
    let step = net.layers[0].affine.clone().expect("the image steps");
    assert_eq!((step.width, n), (12, 12));
    let at = |f: usize| (f / 6, (f / 2) % 3);
    let spread = |by: &dyn Fn(usize, usize) -> f32| -> Vec<f64> {
        (0..12)
            .map(|f| {
                let (c, h) = at(f);
                f64::from(by(c, h))
            })
            .collect()
    };
    let mean = [0.4f32, -1.5];
    let std = [0.25f32, 3.0];
    let off = [0.5f32, -0.125, 2.0];
    assert_eq!(step.ops[0], ElementOp::Add(spread(&|c, _| -mean[c])));
    assert_eq!(step.ops[1], ElementOp::Div(spread(&|c, _| std[c])));
    assert_eq!(step.ops[2], ElementOp::Add(spread(&|_, h| off[h])));
    let ElementOp::BatchNorm {
        scale,
        bias,
        mean: m,
        var,
        ..
    } = &step.ops[3]
    else {
        panic!("a BatchNorm, got {:?}", step.ops[3]);
    };
    assert_eq!(*scale, spread(&|c, _| [1.5f32, -0.5][c]));
    assert_eq!(*bias, spread(&|c, _| [0.1f32, 0.3][c]));
    assert_eq!(*m, spread(&|c, _| [-0.2f32, 0.7][c]));
    assert_eq!(*var, spread(&|c, _| [0.5f32, 2.0][c]));
}

// ---------------------------------------------------------------------------------------------
// Networks with steps: lipfp's centre against the exact network
// ---------------------------------------------------------------------------------------------

#[test]
fn lipfp_centre_logits_stay_within_the_margin_deviation_bound() {
    let dir = tempfile::tempdir().unwrap();
    for f in [Format::Float32, Format::Float16] {
        for kind in NETS {
            let (_, p) = prepare(kind, f, dir.path());
            let (mut worst, mut count) = (0.0f64, 0);
            for (k, row) in p.x.chunks(p.n).enumerate() {
                let ex = exact_logits(&p.net, row);
                let x_norm = l2_norm_up(row.iter().copied());
                let y = &p.logits[k * 4..(k + 1) * 4];
                let (w, c) = check_margins(kind, "lipfp", &p.mb, x_norm, y, &ex);
                worst = worst.max(w);
                count += c;
            }
            println!("{f} {kind}: lipfp centre, {count} pairs, max |dev| / bound = {worst:.3e}");
            assert!(count > 0, "{kind} {f}: nothing checked");
        }
    }
}
