//! The engine: model + data -> norms (once, cached) -> centre logits -> per-instance
//! certificates (parallel) -> per-mode figures. Reporters consume [`CertifyOutcome`]; they never
//! compute.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::ArrayView2;
use rayon::prelude::*;

use crate::certify::{
    predicted_class, Centre, Certifier, HiCentre, Mode, ModelBounds, PointResult, Refusal,
};
use crate::data::{self, Inputs};
use crate::error::LipfpError;
use crate::exec::{Executor, CHUNK_ROWS};
use crate::format::Format;
use crate::model::{self, DenseNet};
use crate::norms::{self, NetworkNorms};
use crate::policy::Radius;
use crate::progress::{Progress, Task};
use crate::sound::l2_norm_up;

/// What to load for a run.
#[derive(Clone, Debug)]
pub struct SubjectSpec {
    /// ONNX model.
    pub model: PathBuf,
    /// Deployment format.
    pub format: Format,
    /// Flush-to-zero execution.
    pub ftz: bool,
    /// Test inputs `.npy`.
    pub inputs: PathBuf,
    /// Labels `.npy`.
    pub labels: Option<PathBuf>,
    /// Gram iterations.
    pub gram_iterations: u32,
    /// Norm cache directory (`None` disables the cache).
    pub cache_dir: Option<PathBuf>,
    /// Run the float64 reference execution (needed by the pre-deployment modes).
    pub reference: bool,
    /// Certify only this slice of the test set.
    pub shard: Option<Shard>,
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

    /// The slice `[first, first + len)` of a test set of `total` points.
    pub fn range(self, total: usize) -> (usize, usize) {
        let first = total * self.index / self.count;
        let end = total * (self.index + 1) / self.count;
        (first, end - first)
    }
}

/// Per-point measurements of the float64 reference execution.
#[derive(Clone, Debug)]
pub struct ReferenceData {
    /// Float64 logits, row-major `[n, classes]`.
    pub logits: Vec<f64>,
    /// Upper bounds on `||z_hi_l||_2`, row-major `[n, L-1]`.
    pub norms: Vec<f64>,
    /// Upper bounds on `||z_hat_{L-1} - z_hi_{L-1}||_2` per point.
    pub gaps: Vec<f64>,
    /// Model bounds with float64 constants.
    pub bounds: Option<ModelBounds>,
    /// Seconds spent on the reference pass.
    pub seconds: f64,
}

/// A model and test set ready to certify at any radius: everything that does not depend on
/// the radius is computed once here.
pub struct Subject {
    /// The converted network.
    pub net: DenseNet,
    /// The converted inputs.
    pub inputs: Inputs,
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
    /// Seconds spent on the norms (0 when cached).
    pub norms_s: f64,
    /// Seconds spent on the centre forward pass.
    pub forward_s: f64,
    /// The float64 reference execution, when asked for.
    pub reference: Option<ReferenceData>,
    /// Notes for the report (conversions, cache warnings, vacuity).
    pub notes: Vec<String>,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
    /// Global index of the first point (non-zero for a shard).
    pub first: usize,
    /// Size of the whole test set (larger than `n()` for a shard).
    pub total: usize,
}

impl Subject {
    /// Number of test points.
    pub fn n(&self) -> usize {
        self.inputs.n
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

/// Load model and data, compute (or read) the norms, run the centre forward pass.
pub fn prepare(spec: &SubjectSpec, progress: &Progress) -> Result<Subject, LipfpError> {
    let net = model::load(&spec.model, spec.format, spec.ftz)?;
    let mut notes = Vec::new();
    if net.converted_changed > 0 {
        notes.push(format!(
            "{} weight/bias values changed when converted to {} (round-to-nearest-even); the converted network is certified",
            net.converted_changed, spec.format
        ));
    }
    let mut inputs = data::load_inputs(&spec.inputs, &net, spec.format)?;
    let total = inputs.n;
    if inputs.converted_changed > 0 {
        notes.push(format!(
            "{} input values changed when converted from {} to {}; balls are centred at the converted inputs",
            inputs.converted_changed, inputs.dtype, spec.format
        ));
    }
    if inputs.n == 0 {
        return Err(LipfpError::data(&spec.inputs, "the test set is empty"));
    }
    let mut labels = match &spec.labels {
        Some(p) => Some(data::load_labels(p, inputs.n, net.classes())?),
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
        inputs.values.truncate((first + count) * inputs.dim);
        inputs.values.drain(..first * inputs.dim);
        inputs.n = count;
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
    }

    prepare_loaded(spec, net, inputs, labels, notes, (first, total), progress)
}

/// The part of [`prepare`] after loading: norms, centre forward pass and (when
/// `spec.reference`) the float64 reference pass, for a network and inputs already in memory
/// (`spec.model`, `spec.inputs`, `spec.labels` and `spec.shard` are not read). `span` is the
/// global index of the first point and the size of the whole test set.
pub fn prepare_loaded(
    spec: &SubjectSpec,
    net: DenseNet,
    inputs: Inputs,
    labels: Option<Vec<usize>>,
    mut notes: Vec<String>,
    span: (usize, usize),
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let (first, total) = span;
    progress.stage(&format!(
        "norms: {} layers, {} Gram iterations",
        net.layers.len(),
        spec.gram_iterations
    ));
    let t = Instant::now();
    let norms = norms::norms_cached(&net, spec.gram_iterations, spec.cache_dir.as_deref());
    let norms_s = t.elapsed().as_secs_f64();
    let norms = match norms {
        Ok((n, warning)) => {
            notes.extend(warning);
            Ok(n)
        }
        Err(e) => Err(format!("spectral norms could not be bounded: {e}")),
    };
    let bounds = match &norms {
        Ok(n) => {
            let b = ModelBounds::new(&net, &n.layers, spec.format, spec.ftz);
            if let Some(v) = &b.vacuous {
                notes.push(format!("sound modes certify nothing: {v}"));
            }
            Ok(b)
        }
        Err(e) => Err(e.clone()),
    };

    progress.stage(&format!(
        "forward pass: {} points in {}",
        inputs.n, spec.format
    ));
    let t = Instant::now();
    let exec = Executor::new(&net);
    let task = progress.task("forward pass", inputs.n as u64);
    let logits = exec.logits_counted(&inputs.values, inputs.dim, Some(&task));
    task.finish();
    let classes = net.classes();
    let predictions: Vec<Option<usize>> = logits.par_chunks(classes).map(predicted_class).collect();
    let x_norms: Vec<f64> = (0..inputs.n)
        .into_par_iter()
        .map(|i| l2_norm_up(inputs.row(i).iter().copied()))
        .collect();
    let forward_s = t.elapsed().as_secs_f64();
    let nonfinite = predictions.iter().filter(|p| p.is_none()).count();
    if nonfinite > 0 {
        notes.push(format!(
            "{nonfinite} points have non-finite logits in {} and are not certified",
            spec.format
        ));
    }
    let reference = if spec.reference {
        progress.stage(&format!("float64 reference pass: {} points", inputs.n));
        let t = Instant::now();
        let task = progress.task("float64 reference pass", inputs.n as u64);
        let mut r = reference_pass(&net, &exec, &inputs, &task);
        task.finish();
        r.bounds = norms
            .as_ref()
            .ok()
            .map(|n| ModelBounds::new(&net, &n.layers, Format::Float64, false));
        r.seconds = t.elapsed().as_secs_f64();
        Some(r)
    } else {
        None
    };
    Ok(Subject {
        net,
        inputs,
        labels,
        logits,
        predictions,
        x_norms,
        norms,
        bounds,
        norms_s,
        forward_s,
        reference,
        notes,
        ftz: spec.ftz,
        first,
        total,
    })
}

/// The float64 reference execution of the converted network and the deployment execution's
/// penultimate activations, reduced per point to what the pre-deployment modes read.
fn reference_pass(net: &DenseNet, exec: &Executor, inputs: &Inputs, task: &Task) -> ReferenceData {
    let hi_exec = Executor::with_format(net, Format::Float64);
    let dim = inputs.dim;
    let rows = inputs.n;
    let hidden_layers = net.layers.len() - 1;
    let blocks: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = (0..rows.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|c| {
            let lo = c * CHUNK_ROWS;
            let hi = (lo + CHUNK_ROWS).min(rows);
            let view = ArrayView2::from_shape((hi - lo, dim), &inputs.values[lo * dim..hi * dim])
                .expect("block shape matches the slice");
            let (_, dep_hidden) = exec.forward_block(view, true);
            let (hi_logits, hi_hidden) = hi_exec.forward_block(view, true);
            let mut norms = Vec::with_capacity((hi - lo) * hidden_layers);
            let mut gaps = Vec::with_capacity(hi - lo);
            for r in 0..hi - lo {
                for h in &hi_hidden {
                    norms.push(l2_norm_up(h.row(r).iter().copied()));
                }
                let gap = match (dep_hidden.last(), hi_hidden.last()) {
                    (Some(a), Some(b)) => {
                        l2_norm_up(a.row(r).iter().zip(b.row(r).iter()).map(|(x, y)| {
                            if x == y {
                                0.0
                            } else {
                                (x - y).abs().next_up()
                            }
                        }))
                    }
                    // a single-layer network: the penultimate activation is the exact input
                    _ => 0.0,
                };
                gaps.push(gap);
            }
            task.add((hi - lo) as u64);
            (hi_logits.into_iter().collect(), norms, gaps)
        })
        .collect();
    let mut out = ReferenceData {
        logits: Vec::with_capacity(rows * net.classes()),
        norms: Vec::with_capacity(rows * hidden_layers),
        gaps: Vec::with_capacity(rows),
        bounds: None,
        seconds: 0.0,
    };
    for (l, n, g) in blocks {
        out.logits.extend(l);
        out.norms.extend(n);
        out.gaps.extend(g);
    }
    out
}

/// Figures of one mode over the whole test set.
#[derive(Clone, Debug)]
pub struct ModeOutcome {
    /// The mode.
    pub mode: Mode,
    /// Points certified robust.
    pub certified: usize,
    /// Points certified and correctly classified (`None` without labels).
    pub vra: Option<usize>,
    /// Why the other points were not certified.
    pub refusals: BTreeMap<String, usize>,
    /// Per-point verdicts.
    pub verdicts: Vec<bool>,
    /// Per-point reason for not certifying (`None` when certified).
    pub refusal_of: Vec<Option<Refusal>>,
    /// Sums of the floating-point degradation and of `L eps` (the conservatism ratio's terms).
    pub degradation_sums: (f64, f64),
    /// Per-point certification slack `min_j (c_j - L eps - b_j)` (NaN when not computed).
    pub slacks: Vec<f64>,
    /// Conservatism ratio `E[E_ctr + E_ball] / E[L eps]` over points and competing classes
    /// (paper sec. 8, RQ2), when any point's bounds could be computed.
    pub conservatism: Option<f64>,
    /// Seconds spent in this mode's certificates.
    pub seconds: f64,
}

/// The result of certifying a subject at one radius.
#[derive(Clone, Debug)]
pub struct CertifyOutcome {
    /// Number of points.
    pub n: usize,
    /// Correct predictions (`None` without labels).
    pub correct: Option<usize>,
    /// One entry per mode, in the order asked (the real ceiling first).
    pub modes: Vec<ModeOutcome>,
    /// Seconds in norms.
    pub norms_s: f64,
    /// Seconds in the forward passes plus all certificates.
    pub certify_s: f64,
    /// Seconds in the float64 reference pass (0 when not run).
    pub reference_s: f64,
    /// Model-level reason why nothing can be certified, if any.
    pub model_refusal: Option<String>,
}

impl CertifyOutcome {
    /// Outcome of `mode`, if computed.
    pub fn mode(&self, mode: Mode) -> Option<&ModeOutcome> {
        self.modes.iter().find(|m| m.mode == mode)
    }
}

/// Per-point radii, as upper bounds.
fn radii(subject: &Subject, radius: &Radius) -> Result<Vec<f64>, LipfpError> {
    match radius {
        Radius::Uniform { up, .. } => Ok(vec![*up; subject.n()]),
        Radius::PerInstance(p) => {
            let all = data::load_epsilons(p, subject.total)?;
            Ok(all[subject.first..subject.first + subject.n()].to_vec())
        }
    }
}

/// Certify every point of `subject` in each of `modes` (the real ceiling is always included).
pub fn certify(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
) -> Result<CertifyOutcome, LipfpError> {
    certify_with_progress(subject, radius, modes, &Progress::silent())
}

/// [`certify`], showing progress per mode.
pub fn certify_with_progress(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
    progress: &Progress,
) -> Result<CertifyOutcome, LipfpError> {
    let eps = radii(subject, radius)?;
    let mut all = vec![Mode::Real];
    for &m in modes {
        if !all.contains(&m) {
            all.push(m);
        }
    }
    if all.iter().any(|m| m.needs_reference()) && subject.reference.is_none() {
        return Err(LipfpError::Usage(
            "internal: a pre-deployment mode was asked for without the float64 reference pass"
                .into(),
        ));
    }
    let classes = subject.net.classes();
    let hidden_layers = subject.net.layers.len() - 1;
    let mut outcomes = Vec::with_capacity(all.len());
    let start = Instant::now();
    for mode in all {
        let t = Instant::now();
        let task = progress.task(&format!("{mode} certificates"), subject.n() as u64);
        let results: Vec<PointResult> = match &subject.bounds {
            Err(_) => vec![
                PointResult {
                    verdict: Err(Refusal::Model),
                    slack: None,
                    degradation: None,
                };
                subject.n()
            ],
            Ok(mb) => {
                let certifier = Certifier {
                    fmt: mb,
                    hi: subject.reference.as_ref().and_then(|r| r.bounds.as_ref()),
                };
                (0..subject.n())
                    .into_par_iter()
                    .with_min_len(64)
                    .map(|i| {
                        let hi = subject.reference.as_ref().map(|r| HiCentre {
                            logits: &r.logits[i * classes..(i + 1) * classes],
                            gap: r.gaps[i],
                            norms: &r.norms[i * hidden_layers..(i + 1) * hidden_layers],
                        });
                        let centre = Centre {
                            logits: &subject.logits[i * classes..(i + 1) * classes],
                            x_norm: subject.x_norms[i],
                            hi,
                        };
                        let r = certifier.certify(mode, &centre, eps[i]);
                        if i % 1024 == 1023 {
                            task.add(1024);
                        }
                        r
                    })
                    .collect()
            }
        };
        task.finish();
        let seconds = t.elapsed().as_secs_f64();
        let mut refusals = BTreeMap::new();
        let (mut deg, mut leps) = (0.0, 0.0);
        for r in &results {
            if let Err(why) = r.verdict {
                *refusals.entry(why.to_string()).or_insert(0) += 1;
            }
            if let Some((d, l)) = r.degradation {
                deg += d;
                leps += l;
            }
        }
        let ok: Vec<bool> = results.iter().map(|r| r.verdict.is_ok()).collect();
        let certified = ok.iter().filter(|&&b| b).count();
        let vra = subject.labels.as_ref().map(|labels| {
            ok.iter()
                .zip(&subject.predictions)
                .zip(labels)
                .filter(|((c, p), y)| **c && **p == Some(**y))
                .count()
        });
        outcomes.push(ModeOutcome {
            mode,
            certified,
            vra,
            refusals,
            verdicts: ok,
            refusal_of: results.iter().map(|r| r.verdict.err()).collect(),
            degradation_sums: (deg, leps),
            slacks: results
                .iter()
                .map(|r| r.slack.unwrap_or(f64::NAN))
                .collect(),
            conservatism: (leps > 0.0 && mode != Mode::Real).then(|| deg / leps),
            seconds,
        });
    }
    let model_refusal = match &subject.bounds {
        Err(e) => Some(e.clone()),
        Ok(b) => b.vacuous.clone(),
    };
    let reference_s = subject.reference.as_ref().map(|r| r.seconds).unwrap_or(0.0);
    Ok(CertifyOutcome {
        n: subject.n(),
        correct: subject.correct(),
        modes: outcomes,
        norms_s: subject.norms_s,
        certify_s: subject.forward_s + reference_s + start.elapsed().as_secs_f64(),
        reference_s,
        model_refusal,
    })
}

/// Resolve the norm cache directory: flag, then `LIPFP_CACHE_DIR`, then the policy, then the
/// user's cache directory.
pub fn resolve_cache_dir(flag: Option<&Path>, policy: Option<&Path>) -> Option<PathBuf> {
    if let Some(f) = flag {
        return Some(f.to_path_buf());
    }
    if let Some(env) = std::env::var_os("LIPFP_CACHE_DIR") {
        return Some(PathBuf::from(env));
    }
    if let Some(p) = policy {
        return Some(p.to_path_buf());
    }
    norms::default_cache_dir()
}
