//! One verification instance as `lipfp verify` (and `lipfp bench`) runs it: a model and a
//! VNN-LIB property read under the declared deployment, the box's centre as the one point, and
//! [`super::verify`]'s decision within the instance's timeout; and the instances of a
//! benchmark list.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::property::{bounded_box, verify, VerifyOptions, VerifyOutcome};
use crate::arith::format::Format;
use crate::arith::runtime::RuntimeChoice;
use crate::engine::data::Inputs;
use crate::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use crate::error::LipfpError;
use crate::files;
use crate::onnx::model;
use crate::policy::vnnlib::{self, Property};
use crate::policy::Decision;
use crate::progress::Progress;

/// What `lipfp verify` runs, its flags already parsed.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    /// The declared deployment: format, accumulation, flush-to-zero, runtime.
    pub format: Option<Format>,
    /// Accumulation format.
    pub accumulate: Option<Format>,
    /// Flush-to-zero execution.
    pub ftz: bool,
    /// The runtime the model is served on.
    pub runtime: Option<RuntimeChoice>,
    /// Gram iterations for the spectral norms.
    pub gram_iterations: u32,
    /// Seconds per instance (a list's own timeouts take precedence).
    pub timeout_s: f64,
    /// Branch and bound and its limits.
    pub options: VerifyOptions,
}

/// One instance's result.
#[derive(Debug, Clone)]
pub struct InstanceResult {
    /// The model.
    pub model: PathBuf,
    /// The property.
    pub property: PathBuf,
    /// What it came to.
    pub outcome: VerifyOutcome,
    /// Wall seconds, loading included.
    pub seconds: f64,
}

/// Decide `property` for `model`.
pub fn instance(
    req: &VerifyRequest,
    (model_path, property_path): (&Path, &Path),
    timeout_s: f64,
    progress: &Progress,
) -> Result<InstanceResult, LipfpError> {
    let start = Instant::now();
    let property = read_property(property_path)?;
    let subject = subject(req, model_path, property_path, &property, progress)?;
    let left = (timeout_s - start.elapsed().as_secs_f64()).max(0.0);
    let outcome = verify(&subject, &property, left, req.options);
    Ok(InstanceResult {
        model: model_path.to_path_buf(),
        property: property_path.to_path_buf(),
        outcome,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The property file, read within [`vnnlib::MAX_BYTES`] and parsed; a refusal names the line.
pub fn read_property(path: &Path) -> Result<Property, LipfpError> {
    let bytes = files::read_limited(path, "property", vnnlib::MAX_BYTES as u64)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| LipfpError::data(path, format!("not UTF-8 text: {e}")))?;
    vnnlib::parse(&text).map_err(|e| LipfpError::data(path, e.to_string()))
}

/// The model under the declared deployment, with the box's centre as its one point.
fn subject(
    req: &VerifyRequest,
    model_path: &Path,
    property_path: &Path,
    p: &Property,
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let (format, notes) = run::resolve_format(model_path, req.format)?;
    let net = model::load(model_path, format, req.ftz)?;
    if p.inputs != net.input_dim() || p.outputs != net.classes() {
        return Err(LipfpError::data(
            property_path,
            format!(
                "declares {} inputs and {} outputs; the model {} has {} and {}",
                p.inputs,
                p.outputs,
                model_path.display(),
                net.input_dim(),
                net.classes()
            ),
        ));
    }
    let (lo, hi) = bounded_box(&p.boxes[0], format);
    let centre: Vec<f64> = (lo.iter().zip(&hi))
        .map(|(l, h)| format.round(0.5 * l + 0.5 * h))
        .collect();
    let spec = SubjectSpec {
        model: model_path.to_path_buf(),
        format: Some(format),
        accumulate: req.accumulate,
        ftz: req.ftz,
        runtime: req.runtime,
        inputs: property_path.to_path_buf(),
        labels: None,
        gram_iterations: req.gram_iterations,
        reference: ReferencePlan::None,
        shard: None,
        decision: Decision::Argmax,
        label_column: None,
        ball: crate::bounds::ball::BallSpec::default(),
    };
    let inputs = Inputs {
        path: property_path.to_path_buf(),
        n: 1,
        dim: centre.len(),
        values: centre,
        converted_changed: 0,
        dtype: "the property's box centre".into(),
    };
    run::prepare_loaded(&spec, net, &inputs, None, notes, (0, 1), progress)
}

/// The instances of a benchmark list (`onnx,vnnlib,timeout` per line, paths relative to the
/// list's folder), each with its timeout.
pub fn read_instances(path: &Path) -> Result<Vec<(PathBuf, PathBuf, f64)>, LipfpError> {
    let bytes = files::read_limited(path, "instances list", 16 << 20)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| LipfpError::data(path, format!("not UTF-8 text: {e}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (k, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [onnx, prop, timeout] = fields.as_slice() else {
            return Err(LipfpError::data(
                path,
                format!("line {}: expected `onnx,vnnlib,timeout`", k + 1),
            ));
        };
        let t: f64 = timeout
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t > 0.0)
            .ok_or_else(|| {
                LipfpError::data(
                    path,
                    format!(
                        "line {}: timeout `{timeout}` is not a positive number",
                        k + 1
                    ),
                )
            })?;
        out.push((dir.join(onnx), dir.join(prop), t));
    }
    Ok(out)
}
