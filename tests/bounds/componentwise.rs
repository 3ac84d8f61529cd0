//! Componentwise bounds (issue 13, item 1): the componentwise centre and ball errors bound the
//! deployed execution's margins against exact rational arithmetic, they are never looser than
//! the measured ones, and every sound certificate implies the real-arithmetic one.

use std::path::{Path, PathBuf};

use lipfp::arith::format::Format;
use lipfp::arith::sound::{add_up, mul_up};
use lipfp::bounds::certify::componentwise::{chain, pair_error};
use lipfp::bounds::certify::quantities::final_pair_bounds;
use lipfp::bounds::certify::{predicted_class, HiCentre, Mode};
use lipfp::engine::exec::{Executor, Hidden};
use lipfp::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use lipfp::policy::Radius;
use lipfp::progress::Progress;
use ndarray::Array2;
use rug::Rational;

use crate::common::exact::ExactNet;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn digits(file: &str) -> PathBuf {
    root().join("examples/digits").join(file)
}

fn subject(format: Format, dir: &Path) -> Subject {
    let spec = SubjectSpec {
        model: dir.join("model.onnx"),
        format: Some(format),
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: dir.join("x_test.npy"),
        labels: Some(dir.join("y_test.npy")),
        gram_iterations: 12,
        reference: ReferencePlan::Every { products: true },
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    run::prepare(&spec, &Progress::silent()).unwrap()
}

/// The reference measurements of point `i`.
fn hi_centre(s: &Subject, i: usize) -> HiCentre<'_> {
    s.centre(i).hi.expect("a reference pass")
}

/// A deterministic point of the l2 ball of radius `eps` around `x` in `format` (the offset is
/// shrunk until the rounded point is inside, checked exactly), or `None`.
fn ball_point(x: &[f64], eps: f64, seed: u64, format: Format) -> Option<Vec<f64>> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let dir: Vec<f64> = x
        .iter()
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    let norm = dir.iter().map(|d| d * d).sum::<f64>().sqrt();
    let eps_q = Rational::from_f64(eps).unwrap();
    for shrink in [1.0, 0.999, 0.99, 0.9] {
        let p: Vec<f64> = x
            .iter()
            .zip(&dir)
            .map(|(a, d)| format.round(a + eps * shrink * d / norm))
            .collect();
        let mut sq = Rational::new();
        for (a, b) in p.iter().zip(x) {
            let d = Rational::from_f64(*a).unwrap() - Rational::from_f64(*b).unwrap();
            sq += d.clone() * &d;
        }
        if sq <= eps_q.clone() * &eps_q {
            return Some(p);
        }
    }
    None
}

/// The deployed logits of one input (lipfp's centre execution, one covered execution).
fn deployed(exec: &Executor, x: &[f64]) -> Vec<f64> {
    let a = Array2::from_shape_vec((1, x.len()), x.to_vec()).unwrap();
    exec.forward_block(a.view(), Hidden::None)
        .0
        .into_iter()
        .collect()
}

fn margin_error(hat: &[f64], exact: &[Rational], i: usize, j: usize) -> Rational {
    let m_hat = Rational::from_f64(hat[i]).unwrap() - Rational::from_f64(hat[j]).unwrap();
    (m_hat - (exact[i].clone() - &exact[j])).abs()
}

/// At the centre and at points of the ball, `|m_hat_ij - m_ij|` (deployed against exact) stays
/// within the componentwise centre and ball errors, which never exceed the measured ones.
#[test]
fn componentwise_errors_bound_the_deployed_margins_exactly() {
    let eps = 0.25;
    for format in [Format::Float16, Format::Float32] {
        let s = subject(format, &digits(""));
        let fmt = s.bounds.as_ref().unwrap();
        let hb = s.reference.as_ref().unwrap().bounds.as_ref().unwrap();
        let exec = Executor::new(&s.net, &s.execution);
        let exact = ExactNet::new(&s.net);
        let rel_w = fmt.layers.last().unwrap().rounding.unwrap().rel_w;
        let (k, dim) = (s.net.classes(), s.net.input_dim());
        let xs = lipfp::engine::data::load_inputs(&digits("x_test.npy"), &s.net, format).unwrap();
        let mut checked = 0;
        for i in (0..s.n()).step_by(15) {
            let x = &xs.values[i * dim..(i + 1) * dim];
            let h = hi_centre(&s, i);
            let (_, dhi) = hb.deviation_profile(s.x_norms[i]).unwrap();
            let (d, rho) = chain(fmt, s.x_norms[i], &h, &dhi, eps);
            // the measured ball (Lemma "Measured radii") of the same point, for comparison
            let radii: Vec<f64> = (0..dhi.len())
                .map(|l| {
                    let norm = if l == 0 { s.x_norms[i] } else { h.norms[l - 1] };
                    add_up(add_up(norm, mul_up(fmt.lip_prefix[l], eps)), dhi[l])
                })
                .collect();
            let d_meas = fmt.chain_with_radii(&radii).unwrap();
            let r_meas = radii[radii.len() - 1];
            let gap = h.gap;
            let d_ctr = gap + dhi[dhi.len() - 1];
            let logits = &s.logits[i * k..(i + 1) * k];
            let c = predicted_class(logits).unwrap();
            let at_x = exact.logits(x);
            for j in (0..k).filter(|&j| j != c) {
                let p = fmt.pair(c, j);
                let ctr = pair_error(p, rel_w, h.abs_last, (c, j), d_ctr, gap);
                assert!(
                    margin_error(logits, &at_x, c, j) <= ctr,
                    "{format} point {i} centre"
                );
                let ball = pair_error(p, rel_w, h.abs_last, (c, j), d, rho);
                let measured =
                    final_pair_bounds(p.alpha, d_meas, p.kappa_abs, r_meas, p.beta_const);
                assert!(
                    ball <= measured,
                    "{format} point {i}: {ball} > measured {measured}"
                );
                for seed in 0..4u64 {
                    let Some(xp) = ball_point(x, eps, seed + 7 * i as u64, format) else {
                        continue;
                    };
                    let e = margin_error(&deployed(&exec, &xp), &exact.logits(&xp), c, j);
                    assert!(e <= ball, "{format} point {i} pair {j}: {e} > {ball}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 500, "{format}: {checked} margins checked");
    }
}

/// Every point a sound mode certifies is certified by the real-arithmetic check too.
fn sound_implies_real(s: &Subject, eps: &str) {
    let radius = Radius::parse_decimal(eps).unwrap();
    let out = run::certify(s, &radius, &Mode::SOUND).unwrap();
    let real = &out.mode(Mode::Real).unwrap().verdicts;
    for m in &out.modes {
        for (i, (&v, &r)) in m.verdicts.iter().zip(real).enumerate() {
            assert!(!v || r, "{} certifies point {i}, real does not", m.mode);
        }
    }
}

#[test]
fn every_sound_certificate_implies_the_real_one_on_digits() {
    for format in [Format::Float32, Format::Float16] {
        let s = subject(format, &digits(""));
        for eps in ["0.1", "0.3", "0.6"] {
            sound_implies_real(&s, eps);
        }
    }
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "needs ../shared/benchmarks/mnist (the published benchmark)"
)]
fn best_on_mnist_is_at_least_95_68_and_implies_real() {
    let s = subject(Format::Float32, &root().join("../shared/benchmarks/mnist"));
    sound_implies_real(&s, "0.3");
    let radius = Radius::parse_decimal("0.3").unwrap();
    let out = run::certify(&s, &radius, &[Mode::Standard, Mode::Best]).unwrap();
    assert_eq!(out.mode(Mode::Standard).unwrap().certified, 9550);
    assert!(out.mode(Mode::Best).unwrap().certified >= 9568);
}
