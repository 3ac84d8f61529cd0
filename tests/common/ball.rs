//! Checks shared by the conformance tests: what a case measured, points of a certified ball
//! (a first-order attack towards the runner-up class and random directions, each rounded to the
//! input format and checked to lie in the ball), and a runtime's margin deviation against
//! lipfp's per-point bound, checked exactly.

#![allow(dead_code)]

use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::arith::sound::l2_norm_up;
use lipfp::bounds::certify::ModelBounds;
use lipfp::engine::exec::{Executor, Hidden};
use lipfp::engine::run::Subject;
use lipfp::onnx::model::DenseNet;
use ndarray::ArrayView2;
use rug::Rational;

use super::onnx_builder::Lcg;

/// What a case measured.
#[derive(Debug, Default)]
pub struct Figures {
    pub points: usize,
    pub certified: usize,
    pub ball_samples: usize,
    /// Certified points or ball samples where a runtime returned another class.
    pub mismatches: usize,
    /// Largest `|m_runtime - m_exact| / E_ctr` over checked points and pairs.
    pub max_ratio: f64,
    /// Pairs where the ratio exceeded 1 (checked exactly).
    pub violations: usize,
    pub checked_pairs: usize,
}

/// lipfp's view of a case: the subject, per-point certification in any sound mode, and the
/// converted inputs.
/// The gradient of the margin `y_i - y_j` at `x` in the linear region of the float64 execution.
pub fn margin_gradient(net: &DenseNet, x: &[f64], i: usize, j: usize) -> Vec<f64> {
    let exec = Executor::new(net, &ExecutionModel::float64_reference());
    let view = ArrayView2::from_shape((1, x.len()), x).unwrap();
    let (_, hidden) = exec.forward_block(view, Hidden::All);
    let last = &net.layers[net.layers.len() - 1];
    let mut v: Vec<f64> = (0..last.n())
        .map(|k| last.w[[i, k]] - last.w[[j, k]])
        .collect();
    for l in (0..net.layers.len() - 1).rev() {
        let layer = &net.layers[l];
        let active: Vec<bool> = hidden[l].row(0).iter().map(|&z| z > 0.0).collect();
        let mut g = vec![0.0; layer.n()];
        for (r, row) in layer.w.rows().into_iter().enumerate() {
            if active[r] && v[r] != 0.0 {
                for (gk, &w) in g.iter_mut().zip(row.iter()) {
                    *gk += w * v[r];
                }
            }
        }
        v = g;
    }
    v
}

/// `x + t eps d / ||d||` rounded to `format`, shrinking `t` until it provably lies in the ball.
pub fn point_in_ball(x: &[f64], d: &[f64], eps: f64, format: Format) -> Option<Vec<f64>> {
    let norm = d.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm.is_nan() || norm <= 0.0 {
        return None;
    }
    let mut t = 0.999;
    for _ in 0..200 {
        let p: Vec<f64> = x
            .iter()
            .zip(d)
            .map(|(&a, &b)| format.round(a + t * eps * b / norm))
            .collect();
        let dist = l2_norm_up(p.iter().zip(x).map(|(&a, &b)| (a - b).abs().next_up()));
        if dist <= eps.next_down() {
            return Some(p);
        }
        t *= 0.98;
    }
    None
}

/// `x + t eps sign(d)` clipped to `[lo, hi]` and rounded to `format`, shrinking `t` until every
/// coordinate provably lies within `eps` of `x` (and in the range): a vertex of the clipped l_inf
/// box, the exact minimiser of a linear margin over it when `d` is minus the margin's gradient.
pub fn vertex_in_box(
    x: &[f64],
    d: &[f64],
    eps: f64,
    (lo, hi): (f64, f64),
    format: Format,
) -> Option<Vec<f64>> {
    let mut t = 0.999;
    for _ in 0..200 {
        let p: Vec<f64> = (x.iter().zip(d))
            .map(|(&a, &b)| {
                format.round((a + t * eps * b.signum() * f64::from(b != 0.0)).clamp(lo, hi))
            })
            .collect();
        let inside = (p.iter().zip(x))
            .all(|(&a, &b)| (a - b).abs().next_up() <= eps.next_down() && lo <= a && a <= hi);
        if inside {
            return Some(p);
        }
        t *= 0.98;
    }
    None
}

/// Three random vertices of the clipped l_inf box around `x` (deterministic per `seed`).
pub fn random_vertices(
    x: &[f64],
    eps: f64,
    range: (f64, f64),
    format: Format,
    seed: u64,
) -> Vec<Vec<f64>> {
    let mut rng = Lcg::new(seed);
    (0..3)
        .filter_map(|_| {
            let d: Vec<f64> = (0..x.len()).map(|_| rng.sym_f64()).collect();
            vertex_in_box(x, &d, eps, range, format)
        })
        .collect()
}

/// Three samples of the ball around `x` in random directions (deterministic per `seed`).
pub fn random_samples(x: &[f64], eps: f64, format: Format, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = Lcg::new(seed);
    (0..3)
        .filter_map(|_| {
            let d: Vec<f64> = (0..x.len()).map(|_| rng.sym_f64()).collect();
            point_in_ball(x, &d, eps, format)
        })
        .collect()
}

/// The first-order attack sample towards the runner-up class of point `k`.
pub fn attack_sample(subject: &Subject, k: usize, x: &[f64], eps: f64) -> Option<Vec<f64>> {
    let classes = subject.net.classes();
    let y = &subject.logits[k * classes..(k + 1) * classes];
    let i = subject.predictions[k]?;
    let j = (0..classes)
        .filter(|&j| j != i)
        .max_by(|&a, &b| y[a].total_cmp(&y[b]))?;
    let g = margin_gradient(&subject.net, x, i, j);
    let down: Vec<f64> = g.iter().map(|v| -v).collect();
    point_in_ball(x, &down, eps, subject.net.format)
}

/// Check (b) for one runtime's logits at point `k`; updates the figures.
pub fn check_deviation(
    bounds: &ModelBounds,
    x_norm: f64,
    exact: &[Rational],
    runtime: &[f64],
    fig: &mut Figures,
) {
    let classes = exact.len();
    for i in 0..classes {
        for j in (0..classes).filter(|&j| j != i) {
            let Ok(e) = bounds.margin_deviation(x_norm, i, j) else {
                continue; // overflow not excluded: lipfp claims nothing here
            };
            let (Some(a), Some(b)) = (
                Rational::from_f64(runtime[i]),
                Rational::from_f64(runtime[j]),
            ) else {
                // a non-finite logit where lipfp bounds the deviation
                fig.violations += 1;
                continue;
            };
            let got = a - b;
            let exact_m = Rational::from(&exact[i] - &exact[j]);
            let dev = (got - exact_m).abs();
            let bound = Rational::from_f64(e).unwrap();
            fig.checked_pairs += 1;
            if dev > bound {
                fig.violations += 1;
            }
            if e > 0.0 {
                fig.max_ratio = fig.max_ratio.max(dev.to_f64() / e);
            }
        }
    }
}

/// lipfp's certificate for `spec` (whose `inputs` is replaced by `rows` of `inputs`, written as
/// `<name>-x.npy` in `dir` in the model's input shape) at radius `epsilon` in every sound mode
/// (with `local` too when `local` is set):
/// the subject, whether any sound mode certifies each point, and the inputs as storage values.
pub fn certify_any_sound(
    dir: &std::path::Path,
    name: &str,
    (inputs, rows): (&[f64], usize),
    mut spec: lipfp::engine::run::SubjectSpec,
    (epsilon, local): (&str, bool),
) -> (Subject, Vec<bool>, Vec<f64>) {
    use lipfp::bounds::certify::Mode;
    use lipfp::engine::run;
    let stored = lipfp::onnx::model::stored_format(&spec.model).unwrap_or_else(|e| panic!("{e}"));
    let shape = lipfp::onnx::model::load(&spec.model, stored, false)
        .unwrap_or_else(|e| panic!("{e}"))
        .input_shape;
    let x = dir.join(format!("{name}-x.npy"));
    super::runtime::write_f64_npy(&x, rows, &shape, inputs);
    spec.inputs = x.clone();
    let progress = lipfp::progress::Progress::silent();
    let subject = run::prepare(&spec, &progress).unwrap_or_else(|e| panic!("{e}"));
    let radius = lipfp::policy::Radius::parse_decimal(epsilon).unwrap();
    let extra = local.then_some(Mode::Local);
    let modes: Vec<Mode> = Mode::SOUND.into_iter().chain(extra).collect();
    let outcome = run::certify(&subject, &radius, &modes).unwrap();
    let mut any = vec![false; subject.n()];
    for m in outcome.modes.iter().filter(|m| m.mode.is_sound()) {
        for (a, &v) in any.iter_mut().zip(&m.verdicts) {
            *a |= v;
        }
    }
    let converted = lipfp::engine::data::load_inputs(&x, &subject.net, subject.net.format)
        .unwrap()
        .values;
    (subject, any, converted)
}
