//! onnxruntime on elementwise affine steps (default and disabled graph optimisations, so its
//! folds are exercised): each step's own outputs at the adversarial inputs of
//! `tests/oracles/affine_steps.rs` are within lipfp's per-feature bound and bitwise one of the emulated
//! executions; on small networks with steps the logits' margins stay within
//! `ModelBounds::margin_deviation` of the exact network's, and lipfp's class equals
//! onnxruntime's wherever Standard certifies at `eps = 0`. Needs a Python with onnxruntime
//! (`$LIPFP_PYTHON`, see `build.rs`).

use std::path::Path;

use crate::common::affine::*;
use crate::common::affine_nets::*;
use crate::common::runtime::{argmax, ort_logits, python};
use lipfp::arith::format::Format;
use lipfp::arith::sound::l2_norm_up;
use lipfp::bounds::certify::affine::step_bounds;
use lipfp::bounds::certify::{predicted_class, Centre, Certifier, Mode};
use rug::Rational;

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_conforms_on_networks_with_steps() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    for kind in NETS {
        let (model, p) = prepare(kind, Format::Float32, dir.path());
        let rows = p.x.len() / p.n;
        let cert = Certifier {
            fmt: &p.mb,
            hi: None,
        };
        let mut runs: Vec<Vec<f64>> = Vec::new();
        for opt in ["default", "disable"] {
            let y = ort_logits(&py, &model, rows, p.n, &p.x, &["--opt", opt]);
            runs.push(y.clone());
            let (mut worst, mut count, mut certified) = (0.0f64, 0, 0);
            for (k, row) in p.x.chunks(p.n).enumerate() {
                let ex = exact_logits(&p.net, row);
                let x_norm = l2_norm_up(row.iter().copied());
                let yk = &y[k * 4..(k + 1) * 4];
                let (w, c) = check_margins(kind, opt, &p.mb, x_norm, yk, &ex);
                worst = worst.max(w);
                count += c;
                let ours = &p.logits[k * 4..(k + 1) * 4];
                let centre = Centre {
                    logits: ours,
                    x_norm,
                    hi: None,
                    decided: None,
                    local: None,
                    cover: lipfp::bounds::ball::Cover::L2,
                };
                if cert.certify(Mode::Standard, &centre, 0.0).verdict.is_ok() {
                    certified += 1;
                    assert_eq!(
                        Some(argmax(yk)),
                        predicted_class(ours),
                        "{kind} {opt} row {k}"
                    );
                }
            }
            println!(
                "{kind} --opt {opt}: {rows} rows, {certified} certified at eps 0, {count} pairs, \
                 max |dev| / bound = {worst:.3e}"
            );
            assert!(count > 0 && certified > 0, "{kind} {opt}: nothing checked");
        }
        let differ = |a: &[f64], b: &[f64]| a.iter().zip(b).filter(|(u, v)| u != v).count();
        println!(
            "{kind}: logits differing, default vs disable {}, default vs lipfp {}",
            differ(&runs[0], &runs[1]),
            differ(&runs[0], &p.logits)
        );
    }
}

/// onnxruntime's own execution of each step (the step's output is the graph output) at the
/// adversarial inputs: within the per-feature bound, and bitwise one of the emulated executions.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_step_outputs_are_within_the_step_bounds() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    for kind in KINDS {
        ort_step_check(&py, dir.path(), kind);
    }
}

/// The check of [`onnxruntime_step_outputs_are_within_the_step_bounds`] for one kind.
fn ort_step_check(py: &Path, dir: &Path, kind: &str) {
    let f = Format::Float32;
    {
        let step = loaded_step(kind, f, dir);
        let model = step_model_with(kind, dir, true);
        let per: Vec<Vec<f64>> = (0..W).map(|i| inputs(&step, i, f, i as u64 + 11)).collect();
        let rows = per.iter().map(Vec::len).max().unwrap();
        let x: Vec<f64> = (0..rows)
            .flat_map(|r| per.iter().map(move |p| p[r % p.len()]))
            .collect();
        let y = ort_logits(py, &model, rows, W, &x, &["--opt", "default"]);
        let (mut worst, mut count, mut unmatched) = (0.0f64, 0, 0);
        for i in 0..W {
            let sb = step_bounds(&feature_step(&step, i), f);
            for r in 0..rows {
                let (xv, yv) = (x[r * W + i], y[r * W + i]);
                if !yv.is_finite() {
                    continue;
                }
                let matched = variants(f)
                    .into_iter()
                    .any(|v| emulate(&step, i, xv, f, v) == yv);
                unmatched += usize::from(!matched);
                let exact = exact_step(&step, i, Iv::pt(q(xv)));
                let bound = q(sb.error_rel) * q(xv.abs()) + q(sb.error_const);
                let dev = exact.dev(&q(yv));
                assert!(dev <= bound, "{kind} feature {i} x = {xv:e}: ORT {yv:e}");
                count += 1;
                if bound > 0 {
                    worst = worst.max(Rational::from(&dev / &bound).to_f64());
                }
            }
        }
        println!(
            "onnxruntime {kind}: {count} outputs, {unmatched} not bitwise an emulated execution, \
             max |error| / bound = {worst:.3e}"
        );
        assert_eq!(
            unmatched, 0,
            "{kind}: onnxruntime computes outside the emulated executions"
        );
    }
}

/// onnxruntime on the float32 `tiny` BatchNorm (subnormal slope) stays within the step bound
/// (it was 10x over before the slope's absolute error was in it).
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "no Python with onnxruntime, onnx and numpy (set LIPFP_PYTHON; .ci/run makes one)"
)]
fn onnxruntime_batchnorm_with_a_subnormal_slope() {
    let dir = tempfile::tempdir().unwrap();
    ort_step_check(&python(), dir.path(), "tiny");
}
