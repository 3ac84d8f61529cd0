//! The engine: model + data -> norms (computed every run) -> centre logits -> per-instance
//! certificates (parallel) -> per-mode figures. Reporters consume [`CertifyOutcome`]; they never
//! compute.

mod best_curve;
mod best_local;
mod certify;
mod curve;
mod local_curve;
mod local_pass;
mod passes;
mod reference;
mod subject;
mod threshold;

use std::path::Path;
use std::time::Instant;

use rayon::prelude::*;

use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::runtime as runtimes;
use crate::bounds::certify::{predicted_class, ModelBounds};
use crate::bounds::norms::{self, NetworkNorms};
use crate::engine::data::{self, InputStream, Inputs};
use crate::error::LipfpError;
use crate::onnx::model::{self, DenseNet, HeadOp};
use crate::policy::Decision;
use crate::progress::Progress;

pub use certify::{
    certify, certify_points, certify_with_options, certify_with_progress, conservatism_ratio,
    tally_classes, CertifyOutcome, ClassCount, ModeOutcome,
};
pub use curve::{certify_curve, decimal_text, CurveOutcome, CurvePoint, ModeCurve};
pub use local_pass::{
    box_lower_bounds, box_norm_up, local_pass, with_bounded_net, BoundedNet, LocalPass,
};
pub use passes::KeptRows;
pub use reference::{ReferenceData, ReferencePlan};
use subject::Rows;
pub use subject::{
    CertifyOptions, InputsInfo, Shard, Subject, SubjectSpec, KEEP_ROWS_BYTES, STREAM_ROWS,
};

/// Load model and data, compute (or read) the norms, and stream the inputs through the centre
/// forward passes.
pub fn prepare(spec: &SubjectSpec, progress: &Progress) -> Result<Subject, LipfpError> {
    let (format, mut notes) = resolve_format(&spec.model, spec.format)?;
    let net = model::load(&spec.model, format, spec.ftz)?;
    notes.extend(weight_notes(&net, format));
    let mut stream = InputStream::open(&spec.inputs, spec.label_column.as_deref(), &net, format)?;
    let total = stream.n;
    if total == 0 {
        return Err(LipfpError::data(&spec.inputs, "the test set is empty"));
    }
    let mut labels = match &spec.labels {
        Some(p) => Some(data::load_labels(
            p,
            spec.label_column.as_deref(),
            total,
            net.label_classes(),
        )?),
        None => None,
    };
    let (first, count) = spec.shard.map(|s| s.range(total)).unwrap_or((0, total));
    if let Some(s) = spec.shard {
        if count == 0 {
            return Err(LipfpError::Usage(format!(
                "shard {}/{} of {total} points is empty",
                s.index + 1,
                s.count
            )));
        }
        if let Some(l) = labels.as_mut() {
            l.truncate(first + count);
            l.drain(..first);
        }
        notes.push(format!(
            "shard {}/{}: points {first}..{} of {total}; merge the shards' certificate files with `lipfp report` for the whole set",
            s.index + 1,
            s.count,
            first + count
        ));
        stream.skip(first)?;
    }
    let info = InputsInfo {
        path: spec.inputs.clone(),
        label_column: spec.label_column.clone(),
        n: count,
        dim: stream.dim,
        dtype: stream.dtype.clone(),
        converted_changed: 0,
    };
    let loaded = Loaded {
        net,
        rows: Rows::Stream(Box::new(stream)),
        info,
        labels,
        notes,
        span: (first, total),
    };
    compute(spec, loaded, progress)
}

/// [`prepare`] for a network and inputs already in memory (`spec.model`, `spec.inputs`,
/// `spec.labels` and `spec.shard` are not read). `span` is the global index of the first point
/// and the size of the whole test set.
pub fn prepare_loaded(
    spec: &SubjectSpec,
    net: DenseNet,
    inputs: &Inputs,
    labels: Option<Vec<usize>>,
    notes: Vec<String>,
    span: (usize, usize),
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let mut notes = notes;
    notes.extend(weight_notes(&net, net.format));
    let info = InputsInfo {
        path: inputs.path.clone(),
        label_column: spec.label_column.clone(),
        n: inputs.n,
        dim: inputs.dim,
        dtype: inputs.dtype.clone(),
        converted_changed: inputs.converted_changed,
    };
    let loaded = Loaded {
        net,
        rows: Rows::Memory(&inputs.values),
        info,
        labels,
        notes,
        span,
    };
    compute(spec, loaded, progress)
}

/// The deployment format: the declared one, or the one the model's layers compute in, with a
/// note saying which and, when a declared format differs from the model's, that too.
pub fn resolve_format(
    model_path: &Path,
    declared: Option<Format>,
) -> Result<(Format, Vec<String>), LipfpError> {
    let stored = model::stored_format(model_path)?;
    Ok(match declared {
        None => (
            stored,
            vec![format!(
                "deployment format {stored}: read from the model (its layers compute in {stored}); set format to override"
            )],
        ),
        Some(f) if f != stored => (
            f,
            vec![format!(
                "declared format {f} differs from the format the model computes in ({stored}); the weights are converted to {f} as declared"
            )],
        ),
        Some(f) => (f, Vec::new()),
    })
}

fn weight_notes(net: &DenseNet, format: Format) -> Vec<String> {
    if net.converted_changed > 0 {
        vec![format!(
            "{} weight/bias values changed when converted to {format} (round-to-nearest-even); the converted network is certified",
            net.converted_changed
        )]
    } else {
        Vec::new()
    }
}

/// The report's note on the classifier head: what it is and the logit margin it costs.
fn head_note(net: &DenseNet, bounds: &ModelBounds) -> Option<String> {
    if net.head.is_empty() {
        return None;
    }
    if net.head == [HeadOp::Relu] {
        return Some(
            "the output layer has a ReLU: lipfp certifies the class ranked first among the outputs \
             and a zero floor, read as one more class that is never certified (a point whose \
             outputs are all <= 0 is refused; docs/soundness.md \"Classifier heads\")"
                .into(),
        );
    }
    let ops: Vec<&str> = net.head.iter().map(|h| h.name()).collect();
    Some(format!(
        "classifier head {}: the certified class is the one it ranks first; every sound mode \
         requires a logit margin above {:.3e} so that the runtime's head cannot tie or swap \
         classes (exp and log within relative {:.1e}; docs/soundness.md \"Classifier heads\")",
        ops.join(", "),
        bounds.head_margin,
        crate::bounds::certify::head::transcendental_accuracy(net.format)
    ))
}

/// A network and its points as loaded, before the norms and the forward passes.
struct Loaded<'a> {
    net: DenseNet,
    rows: Rows<'a>,
    info: InputsInfo,
    labels: Option<Vec<usize>>,
    notes: Vec<String>,
    /// Global index of the first point and size of the whole test set.
    span: (usize, usize),
}

/// Everything in a [`Subject`] that does not depend on the radius: norms and model bounds,
/// then the forward passes over the points.
fn compute(
    spec: &SubjectSpec,
    loaded: Loaded<'_>,
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let Loaded {
        net,
        rows,
        mut info,
        labels,
        mut notes,
        span: (first, total),
    } = loaded;
    let mut net = net;
    if spec.decision == Decision::Argmin {
        net.read_as_argmin()
            .map_err(|m| LipfpError::model(&spec.model, m))?;
        notes.push(
            "decision rule: argmin (the certified class is the smallest output; lipfp certifies the \
             largest of the negated outputs, which floating point computes exactly as the negated \
             outputs, docs/soundness.md \"Decision rules\")"
                .into(),
        );
    }
    let execution = deployment(spec, net.format, &mut notes)?;
    notes.push(format!("execution model: {execution}"));
    notes.extend(spec.ball.cover_note(info.dim));
    let (norms, bounds, norms_s) = norms_and_bounds(spec, &net, &execution, &mut notes, progress);
    let selection = spec.reference.runs().then(|| {
        reference::Selection::new(
            &spec.reference,
            (bounds.as_ref().ok(), spec.ball.cover(info.dim)),
            (first, info.n, total),
        )
    });
    let keep_rows = (info.n.checked_mul(info.dim))
        .and_then(|v| v.checked_mul(std::mem::size_of::<f64>()))
        .is_some_and(|bytes| bytes <= KEEP_ROWS_BYTES);
    let mut passes = passes::forward_passes(
        &net,
        &execution,
        selection.as_ref(),
        (rows, keep_rows, spec.ball.range),
        &mut info,
        labels.as_deref(),
        progress,
    )?;
    if info.converted_changed > 0 {
        notes.push(format!(
            "{} input values changed when converted from {} to {}; balls are centred at the converted inputs",
            info.converted_changed, info.dtype, net.format
        ));
    }
    let predictions = predictions(&net, &passes.out.logits, &mut notes);
    let (forward_s, reference_s) = passes.split_seconds();
    let reference = selection.map(|_| passes.take_reference(&net, &norms, reference_s));
    let lazy = matches!(spec.reference, ReferencePlan::Undecided(_))
        && bounds.as_ref().is_ok_and(|b| b.vacuous.is_none());
    if let Some(r) = reference.as_ref().filter(|r| lazy && r.points() < info.n) {
        notes.push(format!(
            "float64 reference pass: {} of {} points; best is decided without it at the others (certified or refuted by the standard certificate, or non-finite logits), so best's slack and fp degradation are not computed there (docs/soundness.md \"Lazy float64 reference\")",
            r.points(),
            info.n
        ));
    }
    Ok(Subject {
        net,
        inputs: info,
        labels,
        logits: passes.out.logits,
        predictions,
        x_norms: passes.out.x_norms,
        norms,
        bounds,
        norms_s,
        forward_s,
        reference,
        notes,
        ftz: spec.ftz,
        execution,
        first,
        total,
        test_set_hash: passes.test_set_hash,
        rows: passes.rows,
        ball: spec.ball,
    })
}

/// The network's norms (with the seconds they took) and the model-level bounds they give in
/// `execution`, noting in `notes` when the sound modes certify nothing and the classifier
/// head's margin.
fn norms_and_bounds(
    spec: &SubjectSpec,
    net: &DenseNet,
    execution: &ExecutionModel,
    notes: &mut Vec<String>,
    progress: &Progress,
) -> (
    Result<NetworkNorms, String>,
    Result<ModelBounds, String>,
    f64,
) {
    progress.stage(&format!(
        "norms: {} layers, {} Gram iterations",
        net.layers.len(),
        spec.gram_iterations
    ));
    let t = Instant::now();
    let norms = norms::network_norms(net, spec.gram_iterations);
    let norms_s = t.elapsed().as_secs_f64();
    let norms = norms.map_err(|e| format!("spectral norms could not be bounded: {e}"));
    let bounds = match &norms {
        Ok(n) => {
            let mut b = ModelBounds::new(net, &n.layers, execution);
            b.use_merged_norms(&n.merged);
            if let Some(v) = &b.vacuous {
                notes.push(format!("sound modes certify nothing: {v}"));
            }
            if let Some(h) = head_note(net, &b) {
                notes.push(h);
            }
            Ok(b)
        }
        Err(e) => Err(e.clone()),
    };
    (norms, bounds, norms_s)
}

/// The predicted class per point of the centre `logits` (row-major `[n, classes]`), noting in
/// `notes` how many points have non-finite logits.
fn predictions(net: &DenseNet, logits: &[f64], notes: &mut Vec<String>) -> Vec<Option<usize>> {
    let predictions: Vec<Option<usize>> = logits
        .par_chunks(net.classes())
        .map(predicted_class)
        .collect();
    let nonfinite = predictions.iter().filter(|p| p.is_none()).count();
    if nonfinite > 0 {
        notes.push(format!(
            "{nonfinite} points have non-finite logits in {} and are not certified",
            net.format
        ));
    }
    predictions
}

/// The execution model of `spec`'s runtime (or the IEEE model) for storage `format`, with a note
/// naming the runtime and each setting the certificate depends on, or what the IEEE model does
/// not cover.
fn deployment(
    spec: &SubjectSpec,
    format: Format,
    notes: &mut Vec<String>,
) -> Result<ExecutionModel, LipfpError> {
    match spec.runtime {
        None => {
            notes.push(runtimes::default_coverage_note(format));
            ExecutionModel::deployed(format, spec.accumulate, spec.ftz)
                .map_err(|m| LipfpError::Usage(format!("accumulate: {m}")))
        }
        Some(choice) => {
            let d = choice
                .deployment(format, spec.accumulate, spec.ftz)
                .map_err(|m| LipfpError::Usage(format!("runtime {}: {m}", choice.runtime)))?;
            let settings = if d.depends_on.is_empty() {
                "covers this runtime with its defaults".to_string()
            } else {
                d.depends_on.join("; ")
            };
            notes.push(format!(
                "runtime {} ({format}): the certificate {settings}",
                choice.runtime
            ));
            Ok(d.execution)
        }
    }
}
