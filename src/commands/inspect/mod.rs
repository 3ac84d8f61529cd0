//! `lipfp inspect`: how a model is read — the recognised chain of layers with the ONNX nodes
//! behind each, sound norm bounds, `n*u` per format with vacuity warnings, the largest biases
//! and the model hash.

mod runtimes;

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::runtime::RuntimeChoice;
use crate::bounds::norms::{self, LayerNorms};
use crate::error::LipfpError;
use crate::onnx::model::{self, Activation, Dense};
use crate::progress::Progress;
use runtimes::{render_runtimes, runtime_terms, RuntimeTerms};

/// One layer as read.
#[derive(Clone, Debug, Serialize)]
pub struct LayerInfo {
    /// 1-based layer index.
    pub layer: usize,
    /// ONNX nodes (name and op type) that make up the layer.
    pub nodes: Vec<(String, String)>,
    /// Input dimension `n_l`.
    pub inputs: usize,
    /// Output dimension `m_l`.
    pub outputs: usize,
    /// `relu` or `identity`.
    pub activation: &'static str,
    /// `dense`, or `affine` for an elementwise affine step (`diag(a) x + c`).
    pub kind: &'static str,
    /// Upper bound on `||W||_2`.
    pub spectral: f64,
    /// Upper bound on `|| |W| ||_2`.
    pub abs_spectral: f64,
    /// `|| |W| || / ||W||`: how much sign cancellation the rounding bounds lose.
    pub abs_ratio: f64,
    /// Largest bias magnitude and its index.
    pub largest_bias: (usize, f64),
    /// `n_l * u` per format.
    pub n_u: Vec<(Format, f64)>,
}

/// What `inspect` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// Model file.
    pub model: String,
    /// SHA-256 of the network converted to `format`.
    pub model_hash: String,
    /// Format the weights were converted to.
    pub format: Format,
    /// The format the model's layers compute in (see [`model::stored_format`]).
    pub stored_format: Format,
    /// The default execution model certificates for this format cover.
    pub execution: String,
    /// Casts the graph applies between layers: `(layer, format)`, each one more rounding.
    pub casts: Vec<(usize, Format)>,
    /// Graph input name and per-example shape.
    pub input: (String, Vec<usize>),
    /// Weight/bias values changed by the conversion to `format`.
    pub converted_changed: usize,
    /// Gram iterations of the norms.
    pub gram_iterations: u32,
    /// Product of the layer norms: a Lipschitz bound of the whole network.
    pub lipschitz_bound: f64,
    /// The layers.
    pub layers: Vec<LayerInfo>,
    /// The classifier head's ops after the logits (empty when the graph outputs the logits).
    pub head: Vec<&'static str>,
    /// Formats in which some layer has `n*u >= 1` (certificates there are vacuous).
    pub vacuous_formats: Vec<Format>,
    /// Each deployment target's error terms for the model.
    pub runtimes: Vec<RuntimeTerms>,
}

/// What `inspect` shows of layer `k` (0-based) with norms `n`.
fn layer_info(k: usize, l: &Dense, n: &LayerNorms) -> LayerInfo {
    let largest_bias = l.b.iter().enumerate().fold((0, 0.0f64), |best, (i, &b)| {
        if b.abs() > best.1.abs() {
            (i, b)
        } else {
            best
        }
    });
    LayerInfo {
        layer: k + 1,
        nodes: l.nodes.iter().cloned().zip(l.ops.iter().cloned()).collect(),
        inputs: l.n(),
        outputs: l.m(),
        activation: match l.act {
            Activation::Relu => "relu",
            Activation::Identity => "identity",
        },
        kind: if l.affine.is_some() {
            "affine"
        } else {
            "dense"
        },
        spectral: n.spectral,
        abs_spectral: n.abs_spectral,
        abs_ratio: if n.spectral > 0.0 {
            n.abs_spectral / n.spectral
        } else {
            1.0
        },
        largest_bias,
        n_u: Format::ALL
            .iter()
            .map(|&f| (f, l.n() as f64 * f.unit_roundoff()))
            .collect(),
    }
}

/// Read `path` as lipfp reads it for `format` (default: the stored format) and bound its norms.
pub fn inspect(
    path: &Path,
    format: Option<Format>,
    iterations: u32,
    runtimes: &[RuntimeChoice],
    progress: &Progress,
) -> Result<Inspection, LipfpError> {
    let stored_format = model::stored_format(path)?;
    let format = format.unwrap_or(stored_format);
    let execution = ExecutionModel::deployed(format, None, false)
        .map_err(LipfpError::Usage)?
        .to_string();
    let net = model::load(path, format, false)?;
    let casts = net
        .layers
        .iter()
        .enumerate()
        .flat_map(|(k, l)| l.casts.iter().map(move |&c| (k + 1, c)))
        .collect();
    progress.stage(&format!(
        "norms: {} layers, {iterations} Gram iterations",
        net.layers.len()
    ));
    let norms = norms::network_norms(&net, iterations).map_err(|e| {
        LipfpError::model(path, format!("spectral norms could not be bounded: {e}"))
    })?;
    let layers: Vec<LayerInfo> = net
        .layers
        .iter()
        .zip(&norms.layers)
        .enumerate()
        .map(|(k, (l, n))| layer_info(k, l, n))
        .collect();
    let vacuous_formats = Format::ALL
        .into_iter()
        .filter(|f| {
            layers
                .iter()
                .any(|l| l.kind == "dense" && l.inputs as f64 * f.unit_roundoff() >= 1.0)
        })
        .collect();
    Ok(Inspection {
        model: path.display().to_string(),
        model_hash: net.hash(),
        format,
        stored_format,
        execution,
        casts,
        input: (net.input_name.clone(), net.input_shape.clone()),
        converted_changed: net.converted_changed,
        gram_iterations: iterations,
        lipschitz_bound: norms.layers.iter().map(|n| n.spectral).product(),
        layers,
        head: net.head.iter().map(|h| h.name()).collect(),
        vacuous_formats,
        runtimes: runtime_terms(&net, &norms.layers, format, runtimes),
    })
}

/// The layer table of an inspection.
fn render_layers(out: &mut String, layers: &[LayerInfo]) {
    let _ = writeln!(
        out,
        "\n{:>5}  {:>11}  {:<9}  {:>12}  {:>12}  {:>7}  {:>12}  nodes",
        "layer", "shape", "act", "||W||", "|||W|||", "ratio", "max |b|"
    );
    for l in layers {
        let nodes: Vec<String> = l
            .nodes
            .iter()
            .map(|(n, op)| format!("{n} ({op})"))
            .collect();
        let _ = writeln!(
            out,
            "{:>5}  {:>11}  {:<9}  {:>12.6}  {:>12.6}  {:>7.3}  {:>12.4e}  {}",
            l.layer,
            if l.kind == "affine" {
                format!("diag {}", l.inputs)
            } else {
                format!("{}x{}", l.outputs, l.inputs)
            },
            l.activation,
            l.spectral,
            l.abs_spectral,
            l.abs_ratio,
            l.largest_bias.1.abs(),
            nodes.join(", ")
        );
    }
}

/// The largest `n*u` per format, with the vacuity warnings.
fn render_n_u(out: &mut String, i: &Inspection) {
    let widest = i
        .layers
        .iter()
        .filter(|l| l.kind == "dense")
        .map(|l| l.inputs)
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "\nmax n*u per format (widest layer input: {widest}):");
    for f in Format::ALL {
        let nu = widest as f64 * f.unit_roundoff();
        let warn = if i.vacuous_formats.contains(&f) {
            "  VACUOUS: n*u >= 1, nothing can be certified"
        } else if nu >= 0.1 {
            "  warning: n*u is large; certificates will be very conservative"
        } else {
            ""
        };
        let _ = writeln!(out, "  {:<9} {nu:.3e}{warn}", f.name());
    }
}

/// The inspection as a table.
pub fn render(i: &Inspection) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "model   {}", i.model);
    let _ = writeln!(out, "hash    {} ({} weights)", i.model_hash, i.format);
    if i.stored_format != i.format {
        let _ = writeln!(
            out,
            "note    the model computes in {}; its weights are converted to {}",
            i.stored_format, i.format
        );
    }
    let _ = writeln!(out, "exec    {}", i.execution);
    for (layer, f) in &i.casts {
        let _ = writeln!(
            out,
            "cast    layer {layer} output rounded to {f} (a Cast node)"
        );
    }
    let _ = writeln!(out, "input   `{}` {:?} per example", i.input.0, i.input.1);
    if i.converted_changed > 0 {
        let _ = writeln!(
            out,
            "note    {} weight/bias values change when converted to {}",
            i.converted_changed, i.format
        );
    }
    render_layers(&mut out, &i.layers);
    let _ = writeln!(
        out,
        "\nLipschitz bound (product of ||W||): {:.6}   norms: {} Gram iterations",
        i.lipschitz_bound, i.gram_iterations
    );
    if !i.head.is_empty() {
        let _ = writeln!(
            out,
            "head    {} after the logits (certificates require the head's logit margin)",
            i.head.join(", ")
        );
    }
    render_n_u(&mut out, i);
    render_runtimes(&mut out, &i.runtimes);
    out
}
