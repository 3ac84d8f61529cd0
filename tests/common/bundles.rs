//! Bundles: a network and rows as `.npy` files for the Python emulators
//! (`tests/conformance/emulate_bundle.py`) and, with classes, exact margins and lipfp's bounds,
//! for the GPU script (`tests/gpu/gpu_conformance.py`, format in tests/gpu/README.md). Shared by
//! `tests/oracles/runtime_conformance.rs` and `tests/oracles/shapes.rs`.

#![allow(dead_code)]

use std::path::Path;

use super::exact::ExactNet;
use super::runtime::write_npy;
use lipfp::arith::format::Format;
use lipfp::arith::runtime::{Runtime, RuntimeChoice};
use lipfp::arith::sound::l2_norm_up;
use lipfp::engine::run::Subject;
use lipfp::onnx::model::DenseNet;
use rug::Rational;
use serde_json::{json, Value};

/// Write the network and `rows` (storage values) as a bundle directory.
pub fn write_bundle(dir: &Path, net: &DenseNet, rows: &[f64]) {
    std::fs::create_dir_all(dir).unwrap();
    assert!(
        net.layers.iter().all(|l| l.affine.is_none()),
        "the emulators run dense chains only"
    );
    for (l, layer) in net.layers.iter().enumerate() {
        let (m, n) = (layer.m() as u64, layer.n() as u64);
        write_npy(
            &dir.join(format!("W{l}.npy")),
            &[m, n],
            &layer.w.iter().copied().collect::<Vec<_>>(),
        );
        write_npy(&dir.join(format!("b{l}.npy")), &[m], &layer.b);
    }
    let dim = net.input_dim();
    write_npy(
        &dir.join("x.npy"),
        &[(rows.len() / dim) as u64, dim as u64],
        rows,
    );
    let meta = json!({"layers": net.layers.len(), "storage": net.format.name()});
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
}

/// A bundle for the GPU script: the rows, their classes, the exact margins `m_{c j}` (nearest
/// `f64`) and lipfp's bounds on `|m_hat_{cj} - m_{cj}|` (`-1` where lipfp claims nothing).
pub fn gpu_bundle(
    dir: &Path,
    (name, subject): (&str, &Subject),
    rows: &[f64],
    cls: &[usize],
    runtime: &RuntimeChoice,
) {
    write_bundle(dir, &subject.net, rows);
    let bounds = subject.bounds.as_ref().unwrap();
    let (dim, classes) = (subject.net.input_dim(), subject.net.classes());
    let exact = ExactNet::new(&subject.net);
    let (mut margin, mut bound) = (Vec::new(), Vec::new());
    for (r, &c) in cls.iter().enumerate() {
        let p = &rows[r * dim..(r + 1) * dim];
        let ex = exact.logits(p);
        let norm = l2_norm_up(p.iter().copied());
        for j in 0..classes {
            margin.push(Rational::from(&ex[c] - &ex[j]).to_f64());
            bound.push(if j == c {
                0.0
            } else {
                bounds.margin_deviation(norm, c, j).unwrap_or(-1.0)
            });
        }
    }
    let shape = [cls.len() as u64, classes as u64];
    write_npy(&dir.join("margin.npy"), &shape, &margin);
    write_npy(&dir.join("bound.npy"), &shape, &bound);
    let c: Vec<i64> = cls.iter().map(|&c| c as i64).collect();
    write_npy(&dir.join("cls.npy"), &[c.len() as u64], &c);
    let settings = torch_settings(runtime, subject.net.format);
    let meta = json!({"name": name, "layers": subject.net.layers.len(),
        "storage": subject.net.format.name(), "runtime": runtime.runtime.name(),
        "torch_settings": settings});
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
}

/// The PyTorch settings a certificate for `r` covers (the GPU script runs each).
pub fn torch_settings(r: &RuntimeChoice, storage: Format) -> Vec<Value> {
    let tf32_on = storage == Format::Float32 && r.tf32.unwrap_or(r.runtime != Runtime::PytorchCuda);
    let rpr_on = r.reduced_precision_reduction.unwrap_or(true);
    let mut out = Vec::new();
    for tf32 in [false, true].into_iter().filter(|&t| !t || tf32_on) {
        for rpr in [false, true].into_iter().filter(|&p| !p || rpr_on) {
            for bias in ["addmm", "matmul_add"] {
                out.push(json!({"name": format!("tf32={tf32} rpr={rpr} {bias}"), "tf32": tf32,
                    "fp16_reduced_precision_reduction": rpr, "bf16_reduced_precision_reduction": rpr,
                    "bias": bias}));
            }
        }
    }
    out
}

/// Most rows a GPU bundle holds (the first candidates).
const GPU_BUNDLE_ROWS: usize = 1000;

/// With `LIPFP_GPU_BUNDLES=DIR`, the `candidates` (rows and the class each must keep) of a case
/// under `runtime` as a bundle for `tests/gpu/gpu_conformance.py` named after `case`, when the
/// GPU script can run it (an H100 runtime).
pub fn write_gpu_bundle(
    case: &str,
    runtime: Option<RuntimeChoice>,
    subject: &Subject,
    candidates: &[(&[f64], usize)],
) {
    let (Some(out), Some(runtime)) = (std::env::var_os("LIPFP_GPU_BUNDLES"), runtime) else {
        return;
    };
    let h100 = matches!(runtime.gpu, None | Some(lipfp::arith::execution::Gpu::H100));
    let gpu = !matches!(
        runtime.runtime,
        Runtime::OnnxruntimeCpu | Runtime::OpenvinoCpu
    );
    if !(h100 && gpu) {
        return;
    }
    let chosen = &candidates[..candidates.len().min(GPU_BUNDLE_ROWS)];
    let rows: Vec<f64> = chosen.iter().flat_map(|c| c.0.to_vec()).collect();
    let cls: Vec<usize> = chosen.iter().map(|c| c.1).collect();
    let name: String = (case.chars())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = Path::new(&out).join(&name);
    gpu_bundle(&dir, (&name, subject), &rows, &cls, &runtime);
}
