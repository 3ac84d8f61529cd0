//! The engine: model + data -> norms (once, cached) -> centre logits -> per-instance
//! certificates (parallel) -> per-mode figures. Reporters consume [`CertifyOutcome`]; they never
//! compute.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;

use crate::certify::{
    predicted_class, real_certificate, standard_certificate, Mode, ModelBounds, Refusal, Verdict,
};
use crate::data::{self, Inputs};
use crate::error::LipfpError;
use crate::exec::Executor;
use crate::format::Format;
use crate::model::{self, DenseNet};
use crate::norms::{self, NetworkNorms};
use crate::policy::Radius;
use crate::progress::Progress;
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
    /// Notes for the report (conversions, cache warnings, vacuity).
    pub notes: Vec<String>,
    /// Flush-to-zero constants in use.
    pub ftz: bool,
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
    let inputs = data::load_inputs(&spec.inputs, &net, spec.format)?;
    if inputs.converted_changed > 0 {
        notes.push(format!(
            "{} input values changed when converted from {} to {}; balls are centred at the converted inputs",
            inputs.converted_changed, inputs.dtype, spec.format
        ));
    }
    if inputs.n == 0 {
        return Err(LipfpError::data(&spec.inputs, "the test set is empty"));
    }
    let labels = match &spec.labels {
        Some(p) => Some(data::load_labels(p, inputs.n, net.classes())?),
        None => None,
    };

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
    let logits = exec.logits(&inputs.values, inputs.dim);
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
        notes,
        ftz: spec.ftz,
    })
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
    /// One entry per mode, in the order asked.
    pub modes: Vec<ModeOutcome>,
    /// Seconds in norms.
    pub norms_s: f64,
    /// Seconds in the forward pass plus all certificates.
    pub certify_s: f64,
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
        Radius::PerInstance(p) => data::load_epsilons(p, subject.n()),
    }
}

/// Certify every point of `subject` in each of `modes` (the real ceiling is always included).
pub fn certify(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
) -> Result<CertifyOutcome, LipfpError> {
    let eps = radii(subject, radius)?;
    let mut all = vec![Mode::Real];
    for &m in modes {
        if !all.contains(&m) {
            all.push(m);
        }
    }
    let classes = subject.net.classes();
    let mut outcomes = Vec::with_capacity(all.len());
    let start = Instant::now();
    for mode in all {
        let t = Instant::now();
        let verdicts: Vec<Verdict> = match &subject.bounds {
            Err(_) => vec![Err(Refusal::Model); subject.n()],
            Ok(mb) => (0..subject.n())
                .into_par_iter()
                .with_min_len(64)
                .map(|i| {
                    let logits = &subject.logits[i * classes..(i + 1) * classes];
                    match mode {
                        Mode::Real => real_certificate(mb, logits, eps[i]),
                        Mode::Standard => {
                            standard_certificate(mb, logits, subject.x_norms[i], eps[i])
                        }
                    }
                })
                .collect(),
        };
        let seconds = t.elapsed().as_secs_f64();
        let mut refusals = BTreeMap::new();
        for v in &verdicts {
            if let Err(r) = v {
                *refusals.entry(r.to_string()).or_insert(0) += 1;
            }
        }
        let ok: Vec<bool> = verdicts.iter().map(|v| v.is_ok()).collect();
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
            seconds,
        });
    }
    let model_refusal = match &subject.bounds {
        Err(e) => Some(e.clone()),
        Ok(b) => b.vacuous.clone(),
    };
    Ok(CertifyOutcome {
        n: subject.n(),
        correct: subject.correct(),
        modes: outcomes,
        norms_s: subject.norms_s,
        certify_s: subject.forward_s + start.elapsed().as_secs_f64(),
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
