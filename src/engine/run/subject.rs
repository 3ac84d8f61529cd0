//! What a run certifies: the subject (network, norms, bounds, the centre execution's logits and
//! predictions, the inputs' source) prepared once per target, how to load it, the shard of the
//! test set, and the options of a certification. The run's passes read it; none of them
//! changes it.

use std::path::PathBuf;

use super::passes::KeptRows;
use super::reference::{ReferenceData, ReferencePlan};
use crate::arith::execution::ExecutionModel;
use crate::arith::format::Format;
use crate::arith::runtime::RuntimeChoice;
use crate::bounds::ball::{BallSpec, Cover};
use crate::bounds::certify::{Centre, ModelBounds};
use crate::bounds::norms::NetworkNorms;
use crate::engine::data::InputStream;
use crate::onnx::model::DenseNet;
use crate::policy::{Decision, Target};

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
    pub fn centre(&self, i: usize) -> Centre<'_> {
        let classes = self.net.classes();
        let depth = self.net.layers.len();
        Centre {
            logits: &self.logits[i * classes..(i + 1) * classes],
            x_norm: self.x_norms[i],
            hi: self
                .reference
                .as_ref()
                .and_then(|r| r.at(i, classes, depth)),
            decided: self
                .reference
                .as_ref()
                .and_then(|r| r.decided.get(i).copied().flatten()),
            local: None,
            cover: self.cover(),
        }
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

/// Rows read per step when streaming inputs from a file: memory stays bounded by this many
/// rows of inputs plus the per-point results.
pub const STREAM_ROWS: usize = 16_384;

/// A subject keeps its converted input rows in memory after the forward passes when they take
/// at most this many bytes (later passes over chosen points then read no file); larger test sets
/// stream again.
pub const KEEP_ROWS_BYTES: usize = 256 << 20;

/// Where input rows come from.
pub(super) enum Rows<'a> {
    /// Read from the `.npy` file, positioned at the subject's first point.
    Stream(Box<InputStream>),
    /// Already in memory (the subject's points only).
    Memory(&'a [f64]),
}

/// How a certification runs beyond its modes.
#[derive(Clone, Copy, Debug, Default)]
pub struct CertifyOptions {
    /// Seconds the local bounds may take (`None`: no limit).
    pub local_budget_s: Option<f64>,
    /// Let `best` consult local bounds at the points it does not otherwise certify (lazily:
    /// where a first-order estimate says they can help), when `local` is not computed anyway.
    pub best_local: bool,
}
