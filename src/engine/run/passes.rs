//! The centre forward passes over a subject's points: deployment logits and `||x||`, and with
//! the float64 reference execution its logits, hidden-layer norms and penultimate gap; the test
//! set's hash is computed beside them.

use std::time::Instant;

use ndarray::{Array2, ArrayView2, Axis};

use super::reference::{AtPoint, ReferenceData, Selection};
use super::subject::{InputsInfo, Rows, Subject, STREAM_ROWS};
use crate::arith::execution::ExecutionModel;
use crate::arith::sound::l2_norm_up;
use crate::bounds::ball::InputRange;
use crate::bounds::certify::componentwise::AbsWeights;
use crate::bounds::certify::Decided;
use crate::bounds::certify::ModelBounds;
use crate::bounds::norms::NetworkNorms;
use crate::engine::digest::TestSetHasher;
use crate::engine::exec::{map_blocks, Executor, Hidden};
use crate::error::LipfpError;
use crate::onnx::model::DenseNet;
use crate::progress::{Progress, Task};

/// The float64 reference pass.
struct HiPass<'a> {
    /// The float64 reference executor.
    exec: Executor,
    /// The absolute weights its componentwise products use, when they are measured.
    abs: Option<AbsWeights>,
    /// The points it runs on.
    selection: &'a Selection<'a>,
}

/// Per-point results of the forward passes over a block of rows.
#[derive(Default)]
pub(super) struct PassOut {
    pub(super) logits: Vec<f64>,
    pub(super) x_norms: Vec<f64>,
    /// The points (indices into the subject) the float64 reference ran on, in order.
    hi_points: Vec<usize>,
    /// Per point, `best`'s verdict where the reference was skipped (when decided then).
    decided: Vec<Option<Decided>>,
    hi_logits: Vec<f64>,
    hi_norms: Vec<f64>,
    gaps: Vec<f64>,
    abs_norms: Vec<f64>,
    abs_last: Vec<f64>,
    /// CPU seconds of the deployment and the float64 passes.
    seconds: (f64, f64),
}

impl PassOut {
    fn extend(&mut self, o: PassOut) {
        self.logits.extend(o.logits);
        self.x_norms.extend(o.x_norms);
        self.hi_points.extend(o.hi_points);
        self.decided.extend(o.decided);
        self.hi_logits.extend(o.hi_logits);
        self.hi_norms.extend(o.hi_norms);
        self.gaps.extend(o.gaps);
        self.abs_norms.extend(o.abs_norms);
        self.abs_last.extend(o.abs_last);
        self.seconds.0 += o.seconds.0;
        self.seconds.1 += o.seconds.1;
    }
}

/// A subject's converted input rows kept in memory, in the blocks of [`STREAM_ROWS`] rows the
/// passes read (moved, not copied).
#[derive(Clone, Debug)]
pub struct KeptRows {
    blocks: Vec<Vec<f64>>,
    dim: usize,
}

impl KeptRows {
    /// Row `i` of the subject.
    pub fn row(&self, i: usize) -> Option<&[f64]> {
        let block = self.blocks.get(i / STREAM_ROWS)?;
        let at = (i % STREAM_ROWS) * self.dim;
        block.get(at..at + self.dim)
    }
}

/// The forward passes over all of a subject's points.
pub(super) struct Passes {
    /// Per-point results.
    pub(super) out: PassOut,
    /// See [`Subject::test_set_hash`](super::Subject::test_set_hash).
    pub(super) test_set_hash: String,
    /// The converted input rows, when asked to keep them.
    pub(super) rows: Option<KeptRows>,
    /// Wall seconds of the passes (deployment and float64 together).
    seconds: f64,
}

impl Passes {
    /// The wall time of the passes attributed to the deployment and the float64 passes by
    /// their CPU time.
    pub(super) fn split_seconds(&self) -> (f64, f64) {
        let passes_s = self.seconds;
        let (dep_cpu, hi_cpu) = self.out.seconds;
        let hi_share = if dep_cpu + hi_cpu > 0.0 {
            hi_cpu / (dep_cpu + hi_cpu)
        } else {
            0.0
        };
        (passes_s * (1.0 - hi_share), passes_s * hi_share)
    }

    /// The float64 reference execution's measurements (taken out of the passes), with model
    /// bounds on float64 constants when the norms could be computed.
    pub(super) fn take_reference(
        &mut self,
        net: &DenseNet,
        norms: &Result<NetworkNorms, String>,
        seconds: f64,
    ) -> ReferenceData {
        let n = self.out.x_norms.len();
        self.out.reference_data(n, (net, norms), seconds)
    }
}

impl PassOut {
    /// Its reference measurements (taken out) over a subject of `n` points.
    fn reference_data(
        &mut self,
        n: usize,
        (net, norms): (&DenseNet, &Result<NetworkNorms, String>),
        seconds: f64,
    ) -> ReferenceData {
        let mut slot = vec![None; n];
        for (k, &i) in self.hi_points.iter().enumerate() {
            slot[i] = Some(k);
        }
        let mut decided = std::mem::take(&mut self.decided);
        decided.resize(n, None);
        ReferenceData {
            slot,
            decided,
            logits: std::mem::take(&mut self.hi_logits),
            norms: std::mem::take(&mut self.hi_norms),
            gaps: std::mem::take(&mut self.gaps),
            abs_norms: std::mem::take(&mut self.abs_norms),
            abs_last: std::mem::take(&mut self.abs_last),
            bounds: norms.as_ref().ok().map(|n| {
                let mut b = ModelBounds::new(net, &n.layers, &ExecutionModel::float64_reference());
                b.use_merged_norms(&n.merged);
                b
            }),
            seconds,
        }
    }
}

/// The float64 reference, with the componentwise products, at `points` of `subject` (ascending),
/// streamed from its inputs: what the forward passes measure at the points they select, over
/// the subject's points (a robustness curve's automatic grid asks for them after the passes).
pub(super) fn reference_at(
    subject: &Subject,
    points: &[usize],
) -> Result<ReferenceData, LipfpError> {
    let t = Instant::now();
    let net = &subject.net;
    let exec = Executor::new(net, &subject.execution);
    let every = Selection::Every(true);
    let hi = HiPass {
        exec: Executor::new(net, &ExecutionModel::float64_reference()),
        abs: Some(AbsWeights::new(net, &subject.execution)),
        selection: &every,
    };
    let dim = subject.inputs.dim;
    let mut out = PassOut::default();
    subject.visit_rows(points, |chosen, rows| {
        let blocks = map_blocks(rows, dim, |at, view| {
            let (_, dep) = exec.forward_block(view, Hidden::Penultimate);
            let all: Vec<usize> = (0..view.nrows()).collect();
            let mut block = reference_rows(&hi, view, dep.first(), &all);
            block.hi_points = chosen[at..at + view.nrows()].to_vec();
            block
        });
        blocks.into_iter().for_each(|b| out.extend(b));
        Ok(())
    })?;
    let seconds = t.elapsed().as_secs_f64();
    Ok(out.reference_data(subject.n(), (net, &subject.norms), seconds))
}

/// Every value of the rows `values` (`dim` features each, the first being point `first` of the
/// file) lies in the declared input `range`: a set around a point outside it would not contain
/// the point, and the clipped box would be empty.
fn check_range(
    range: Option<InputRange>,
    values: &[f64],
    (dim, first): (usize, usize),
    path: &std::path::Path,
) -> Result<(), LipfpError> {
    let Some(r) = range else { return Ok(()) };
    match values.iter().position(|v| !r.contains(*v)) {
        None => Ok(()),
        Some(k) => Err(LipfpError::data(
            path,
            format!(
                "input {} feature {} is {}, outside input_range {r}",
                first + k / dim.max(1),
                k % dim.max(1),
                values[k]
            ),
        )),
    }
}

/// Stream `rows` through the deployment execution (and, at the points `reference` selects, the
/// float64 one) in parallel blocks, hashing the inputs and `labels` beside them, and with `keep`
/// keeping the converted rows; for streamed rows, `info.converted_changed` is set from the
/// stream. Every value must lie in `range`, when one is declared.
pub(super) fn forward_passes(
    net: &DenseNet,
    execution: &ExecutionModel,
    reference: Option<&Selection<'_>>,
    (rows, keep, range): (Rows<'_>, bool, Option<InputRange>),
    info: &mut InputsInfo,
    labels: Option<&[usize]>,
    progress: &Progress,
) -> Result<Passes, LipfpError> {
    progress.stage(&format!(
        "forward pass{}: {} points in {}",
        if reference.is_some() {
            "es (and float64 reference where needed)"
        } else {
            ""
        },
        info.n,
        net.format
    ));
    let t = Instant::now();
    let exec = Executor::new(net, execution);
    let hi_exec = reference.map(|selection| HiPass {
        exec: Executor::new(net, &ExecutionModel::float64_reference()),
        abs: selection
            .products()
            .then(|| AbsWeights::new(net, execution)),
        selection,
    });
    let task = progress.task("forward passes", info.n as u64);
    let mut out = PassOut::default();
    let mut hasher = TestSetHasher::new(net.format, info.n, info.dim);
    let mut kept = keep.then(|| KeptRows {
        blocks: Vec::new(),
        dim: info.dim,
    });
    match rows {
        Rows::Memory(values) => {
            // rows already in memory were given by the caller: not kept twice
            kept = None;
            check_range(range, values, (info.dim, 0), &info.path)?;
            // the (sequential) hash runs beside the (parallel) forward passes
            let ((), o) = rayon::join(
                || hasher.inputs(values),
                || pass_rows(&exec, hi_exec.as_ref(), (values, 0), info.dim, &task),
            );
            out = o;
        }
        Rows::Stream(mut stream) => {
            let start = stream.position();
            let end = start + info.n;
            while stream.position() < end {
                let at = stream.position() - start;
                let first = stream.position();
                let block = stream.next_rows(STREAM_ROWS.min(end - stream.position()))?;
                check_range(range, &block, (info.dim, first), &info.path)?;
                let ((), o) = rayon::join(
                    || hasher.inputs(&block),
                    || pass_rows(&exec, hi_exec.as_ref(), (&block, at), info.dim, &task),
                );
                out.extend(o);
                if let Some(k) = kept.as_mut() {
                    k.blocks.push(block);
                }
            }
            info.converted_changed = stream.converted_changed;
        }
    }
    let test_set_hash = hasher.finish(labels);
    task.finish();
    Ok(Passes {
        out,
        test_set_hash,
        rows: kept,
        seconds: t.elapsed().as_secs_f64(),
    })
}

/// The forward passes of one block of rows, the first of which is point `row0` of the
/// subject: deployment logits and `||x||`, and with a float64 executor its measurements at the
/// rows it selects ([`reference_rows`]).
fn pass_block(
    exec: &Executor,
    hi_exec: Option<&HiPass>,
    view: ArrayView2<f64>,
    row0: usize,
) -> PassOut {
    let t = Instant::now();
    // the reference's gap reads the deployment's penultimate activations
    let keep = if hi_exec.is_some() {
        Hidden::Penultimate
    } else {
        Hidden::None
    };
    let (logits, dep_penultimate) = exec.forward_block(view, keep);
    let classes = logits.ncols();
    let logits: Vec<f64> = logits.into_iter().collect();
    let x_norms: Vec<f64> = view
        .rows()
        .into_iter()
        .map(|r| l2_norm_up(r.iter().copied()))
        .collect();
    let dep_s = t.elapsed().as_secs_f64();
    let mut out = match hi_exec {
        Some(hi) => {
            let t = Instant::now();
            let mut rows = Vec::new();
            let mut decided = Vec::with_capacity(view.nrows());
            for r in 0..view.nrows() {
                let row = &logits[r * classes..(r + 1) * classes];
                match hi.selection.at(row0 + r, row, x_norms[r]) {
                    AtPoint::Run => {
                        rows.push(r);
                        decided.push(None);
                    }
                    AtPoint::Skip(d) => decided.push(d),
                }
            }
            let mut out = reference_rows(hi, view, dep_penultimate.first(), &rows);
            out.hi_points = rows.iter().map(|r| row0 + r).collect();
            out.decided = decided;
            out.seconds.1 = t.elapsed().as_secs_f64();
            out
        }
        None => PassOut::default(),
    };
    out.logits = logits;
    out.x_norms = x_norms;
    out.seconds.0 = dep_s;
    out
}

/// The float64 reference's measurements at `rows` of a block `view`: its logits, hidden-layer
/// norms and componentwise products, and the gap between the deployment penultimate
/// activations `dep_last` (the block's) and its own (from the same executions as the logits).
fn reference_rows(
    hi: &HiPass,
    view: ArrayView2<f64>,
    dep_last: Option<&Array2<f64>>,
    rows: &[usize],
) -> PassOut {
    let mut out = PassOut::default();
    if rows.is_empty() {
        return out;
    }
    let points = view.select(Axis(0), rows);
    let (hi_logits, hi_hidden) = hi.exec.forward_block(points.view(), Hidden::All);
    if let Some(abs) = &hi.abs {
        let products = abs.measure(points.view(), &hi_hidden);
        out.abs_norms = products.norms;
        out.abs_last = products.last;
    }
    for (k, &r) in rows.iter().enumerate() {
        for h in &hi_hidden {
            out.hi_norms.push(l2_norm_up(h.row(k).iter().copied()));
        }
        let gap = match (dep_last, hi_hidden.last()) {
            (Some(a), Some(b)) => l2_norm_up(a.row(r).iter().zip(b.row(k).iter()).map(|(x, y)| {
                if x == y {
                    0.0
                } else {
                    (x - y).abs().next_up()
                }
            })),
            // a single-layer network: the penultimate activation is the exact input
            _ => 0.0,
        };
        out.gaps.push(gap);
    }
    out.hi_logits = hi_logits.into_iter().collect();
    out
}

/// Run the passes over `values` (`[rows, dim]`, the first row point `row0` of the subject) in
/// parallel blocks, in order.
fn pass_rows(
    exec: &Executor,
    hi_exec: Option<&HiPass>,
    (values, row0): (&[f64], usize),
    dim: usize,
    task: &Task,
) -> PassOut {
    let blocks = map_blocks(values, dim, |at, view| {
        let out = pass_block(exec, hi_exec, view, row0 + at);
        task.add(view.nrows() as u64);
        out
    });
    let mut out = PassOut::default();
    for b in blocks {
        out.extend(b);
    }
    out
}
