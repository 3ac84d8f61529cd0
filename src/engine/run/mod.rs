//! The engine: model + data -> norms (computed every run) -> centre logits -> per-instance
//! certificates (parallel) -> per-mode figures. Reporters consume [`CertifyOutcome`]; they never
//! compute.

mod best_curve;
mod best_local;
mod certify;
mod curve;
mod local;
mod local_curve;
mod passes;
mod reference;
mod threshold;

use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;

use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::runtime::{self as runtimes, RuntimeChoice};
use crate::bounds::ball::{BallSpec, Cover};
use crate::bounds::certify::{predicted_class, ModelBounds};
use crate::bounds::norms::{self, NetworkNorms};
use crate::engine::data::{self, InputStream, Inputs};
use crate::error::LipfpError;
use crate::onnx::model::{self, DenseNet, HeadOp};
use crate::policy::Decision;
use crate::policy::Target;
use crate::progress::Progress;

/// What to load for a run.
#[derive(Clone, Debug)]
pub struct SubjectSpec {
    /// ONNX model.
    pub model: PathBuf,
    /// Deployment (storage) format; `None`: the format the model's weights are stored in.
    pub format: Option<Format>,
    /// Declared accumulation format (`None`: the storage format or the next wider one).
    pub accumulate: Option<Format>,
    /// Flush-to-zero execution.
    pub ftz: bool,
    /// The declared runtime (`None`: the IEEE model alone).
    pub runtime: Option<RuntimeChoice>,
    /// Test inputs `.npy`.
    pub inputs: PathBuf,
    /// Labels `.npy`.
    pub labels: Option<PathBuf>,
    /// Gram iterations.
    pub gram_iterations: u32,
    /// Where to run the float64 reference execution (read by the pre-deployment modes).
    pub reference: ReferencePlan,
    /// Certify only this slice of the test set.
    pub shard: Option<Shard>,
    /// How the model's outputs are read: the class of the largest (`argmax`) or the smallest.
    pub decision: Decision,
    /// The label column of a CSV test set (`None`: every column is a feature).
    pub label_column: Option<String>,
    /// The set a radius stands for around each point (the norm, and the valid input range every
    /// point must lie in).
    pub ball: BallSpec,
}

impl SubjectSpec {
    /// What to load for a policy target (`reference`: where its gates need the float64
    /// reference execution).
    pub fn for_target(t: &Target, reference: ReferencePlan, shard: Option<Shard>) -> SubjectSpec {
        SubjectSpec {
            model: t.model.clone(),
            format: t.format,
            accumulate: t.accumulate,
            ftz: t.ftz,
            runtime: t.runtime,
            inputs: t.inputs.clone(),
            labels: t.labels.clone(),
            gram_iterations: t.gram_iterations,
            reference,
            shard,
            decision: t.decision,
            label_column: t.label_column.clone(),
            ball: t.ball,
        }
    }
}

/// Shard `index` (0-based) of `count` contiguous slices of the test set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based shard index.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Parse `K/N` (1-based `K`, as CI matrices count).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}`: write the shard as K/N, e.g. 2/4"))?;
        let k: usize = k
            .trim()
            .parse()
            .map_err(|_| format!("`{text}`: K is not a number"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("`{text}`: N is not a number"))?;
        if n == 0 || k == 0 || k > n {
            return Err(format!("`{text}`: need 1 <= K <= N"));
        }
        Ok(Shard {
            index: k - 1,
            count: n,
        })
    }

    /// The slice `[first, first + len)` of a test set of `total` points (exact for any `K/N`:
    /// the products are formed in 128 bits, where they cannot overflow).
    pub fn range(self, total: usize) -> (usize, usize) {
        // total * k / count <= total for k <= count, so the quotient fits back in usize
        let at = |k: usize| (total as u128 * k as u128 / self.count.max(1) as u128) as usize;
        let first = at(self.index);
        let end = at(self.index.saturating_add(1).min(self.count));
        (first, end - first)
    }
}

/// Where a subject's inputs came from (the values themselves are not kept: they are streamed
/// through the forward passes).
#[derive(Clone, Debug)]
pub struct InputsInfo {
    /// The `.npy`, `.npz` or `.csv` file.
    pub path: PathBuf,
    /// The label column of a CSV file (not a feature).
    pub label_column: Option<String>,
    /// Points in this subject (the shard's, when sharded).
    pub n: usize,
    /// Features per point.
    pub dim: usize,
    /// dtype of the file.
    pub dtype: String,
    /// Values changed by the conversion to the deployment format.
    pub converted_changed: usize,
}

/// A model and test set ready to certify at any radius: everything that does not depend on
/// the radius is computed once here.
pub struct Subject {
    /// The converted network.
    pub net: DenseNet,
    /// The inputs.
    pub inputs: InputsInfo,
    /// Labels, when given.
    pub labels: Option<Vec<usize>>,
    /// Centre logits in the deployment format, row-major `[n, classes]`.
    pub logits: Vec<f64>,
    /// Predicted class per point (`None` when the logits are not finite).
    pub predictions: Vec<Option<usize>>,
    /// Upper bounds on `||x||_2` per point.
    pub x_norms: Vec<f64>,
    /// Norms, or why they could not be computed.
    pub norms: Result<NetworkNorms, String>,
    /// Model-level bounds, or why no instance can be certified.
    pub bounds: Result<ModelBounds, String>,
    /// Seconds spent on the norms.
    pub norms_s: f64,
    /// Seconds spent on the deployment-format forward pass.
    pub forward_s: f64,
    /// The float64 reference execution, when asked for.
    pub reference: Option<ReferenceData>,
    /// Notes for the report (conversions, execution model, vacuity).
    pub notes: Vec<String>,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
    /// The execution model the certificates cover.
    pub execution: ExecutionModel,
    /// Global index of the first point (non-zero for a shard).
    pub first: usize,
    /// Size of the whole test set (larger than `n()` for a shard).
    pub total: usize,
    /// SHA-256 of the points certified: the inputs converted to the format (float64 bits)
    /// and the labels (see [`TestSetHasher`](crate::engine::digest::TestSetHasher)).
    pub test_set_hash: String,
    /// The converted input rows of the subject's points, row-major, when they fit in
    /// [`KEEP_ROWS_BYTES`] (else later passes stream them from the file again).
    pub rows: Option<KeptRows>,
    /// The set a radius stands for around each point.
    pub ball: BallSpec,
}

impl Subject {
    /// Number of test points.
    pub fn n(&self) -> usize {
        self.inputs.n
    }

    /// Points flagged in `ok` that are also correctly classified (VRA), when labels are
    /// present.
    pub fn count_correct(&self, ok: &[bool]) -> Option<usize> {
        let labels = self.labels.as_ref()?;
        Some(
            ok.iter()
                .zip(&self.predictions)
                .zip(labels)
                .filter(|((c, p), y)| **c && **p == Some(**y))
                .count(),
        )
    }

    /// How the Lipschitz certificates cover the set of a radius ([`BallSpec::cover`]).
    pub fn cover(&self) -> Cover {
        self.ball.cover(self.inputs.dim)
    }

    /// What the forward passes measured at point `i` (the input of every certificate).
    pub fn centre(&self, i: usize) -> crate::bounds::certify::Centre<'_> {
        certify::centre_of(self, i)
    }

    /// Correctly classified points, when labels are present.
    pub fn correct(&self) -> Option<usize> {
        let labels = self.labels.as_ref()?;
        Some(
            self.predictions
                .iter()
                .zip(labels)
                .filter(|(p, y)| **p == Some(**y))
                .count(),
        )
    }
}

pub use certify::{
    certify, certify_points, certify_with_options, certify_with_progress, conservatism_ratio,
    tally_classes, CertifyOptions, CertifyOutcome, ClassCount, ModeOutcome,
};
pub use curve::{certify_curve, decimal_text, CurveOutcome, CurvePoint, ModeCurve};
pub use local::{
    box_lower_bounds, box_norm_up, local_pass, with_bounded_net, BoundedNet, LocalPass,
};
pub use passes::KeptRows;
pub use reference::{ReferenceData, ReferencePlan};

/// Rows read per step when streaming inputs from a file: memory stays bounded by this many
/// rows of inputs plus the per-point results.
pub const STREAM_ROWS: usize = 16_384;

/// A subject keeps its converted input rows in memory after the forward passes when they take
/// at most this many bytes (later passes over chosen points then read no file); larger test sets
/// stream again.
pub const KEEP_ROWS_BYTES: usize = 256 << 20;

/// Where input rows come from.
enum Rows<'a> {
    /// Read from the `.npy` file, positioned at the subject's first point.
    Stream(Box<InputStream>),
    /// Already in memory (the subject's points only).
    Memory(&'a [f64]),
}

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
