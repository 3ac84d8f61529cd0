//! `lipfp verify`: one VNN-LIB property of one model, or a benchmark's list of instances, decided
//! by [`crate::engine::verify`] and written in VNN-COMP's result format.
//!
//! Exit codes (docs/commands.md "lipfp verify"): 0 holds (`unsat`), 1 violated (`sat`), 2 error,
//! 3 unknown, 4 timeout; with `--instances`, 0 once every instance ran.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::arith::format::Format;
use crate::arith::runtime::RuntimeChoice;
use crate::engine::data::Inputs;
use crate::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use crate::engine::verify::{self, bounded_box, Verdict, VerifyOptions, VerifyOutcome};
use crate::error::LipfpError;
use crate::files::{self, Artifact};
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
    let outcome = verify::verify(&subject, &property, left, req.options);
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

/// What branch and bound did, for the line printed per instance: `; branch and bound: N
/// subdomains (K infeasible), depth D, queue Q` summed over the boxes searched, and why it
/// decided nothing where it did not; empty when it did not run.
pub fn search_note(o: &VerifyOutcome) -> String {
    if o.searches.is_empty() {
        return String::new();
    }
    let sum = |f: fn(&verify::SearchSummary) -> usize| o.searches.iter().map(f).sum::<usize>();
    let depth = o.searches.iter().map(|s| s.depth).max().unwrap_or(0);
    let peak = o.searches.iter().map(|s| s.peak_queue).max().unwrap_or(0);
    let why: Vec<&str> = o
        .searches
        .iter()
        .filter_map(|s| s.unknown.as_deref())
        .collect();
    format!(
        "; branch and bound: {} subdomains ({} infeasible), depth {depth}, queue {peak}{}",
        sum(|s| s.bounded),
        sum(|s| s.infeasible),
        if why.is_empty() {
            String::new()
        } else {
            format!(", {}", why.join("; "))
        }
    )
}

/// VNN-COMP's result file: the verdict word, and for `sat` the counterexample
/// `((X_0 v) ... (Y_0 v) ...)` with every value written exactly (shortest round-trip decimal).
pub fn result_text(outcome: &VerifyOutcome) -> String {
    let mut out = format!("{}\n", outcome.verdict.word());
    if let Verdict::Violated(cx) = &outcome.verdict {
        out.push('(');
        for (i, v) in cx.input.iter().enumerate() {
            let _ = writeln!(out, "(X_{i} {v:e})");
        }
        for (j, v) in cx.outputs.iter().enumerate() {
            let _ = writeln!(out, "(Y_{j} {v:e})");
        }
        out.push_str(")\n");
    }
    out
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

/// Run every instance of `list` (`scale` times its timeouts), printing a line per instance;
/// returns the results and the table as CSV (`onnx,vnnlib,result,seconds`).
pub fn instances(
    req: &VerifyRequest,
    list: &Path,
    scale: f64,
    progress: &Progress,
) -> Result<(Vec<InstanceResult>, String), LipfpError> {
    let mut results = Vec::new();
    let mut csv = String::from("onnx,vnnlib,result,seconds\n");
    for (model_path, prop, timeout) in read_instances(list)? {
        let r = instance(req, (&model_path, &prop), timeout * scale, progress)?;
        let name = |p: &Path| {
            p.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        println!(
            "{:<36} {:<24} {:<8} {:>8.2} s  ({}/{} disjuncts excluded by bounds{})",
            name(&r.model),
            name(&r.property),
            r.outcome.verdict.word(),
            r.seconds,
            r.outcome.excluded,
            r.outcome.disjuncts,
            search_note(&r.outcome)
        );
        let _ = writeln!(
            csv,
            "{},{},{},{:.3}",
            name(&r.model),
            name(&r.property),
            r.outcome.verdict.word(),
            r.seconds
        );
        results.push(r);
    }
    Ok((results, csv))
}

/// Write `text` to `path` all-or-nothing.
pub fn write_result(path: &Path, text: String) -> Result<(), LipfpError> {
    files::stage(&[Artifact::new(path, text.into_bytes(), "result file")])?.commit()
}
