//! The `lipfp.toml` policy: a typed schema deserialised once (unknown keys rejected with their
//! name and position) and validated with errors that point at the field. Every threshold is a
//! row of the registry in [`thresholds`].
//!
//! Imports: [`crate::bounds`] (modes, balls, norms' defaults), [`crate::arith`] (formats,
//! runtimes), [`crate::error`], [`crate::files`], [`crate::proto_gen`] (the thresholds' fields in
//! certificate files).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::arith::format::Format;
use crate::arith::runtime::{RuntimeChoice, RuntimeKeys};
use crate::bounds::ball::BallSpec;
use crate::bounds::certify::Mode;
use crate::bounds::norms::DEFAULT_GRAM_ITERATIONS;
use crate::error::LipfpError;

mod gate;
mod radius;
use gate::Defaults;

mod complete;
mod decision;
pub mod thresholds;
pub use complete::CompleteBudget;
pub use thresholds::{Thresholds, MIN_CLASS_POINTS};
pub mod vnnlib;
pub use decision::Decision;
pub use radius::{parse_decimal_exact, CurveGrid, Radius};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    model: Option<RawModel>,
    #[serde(default)]
    data: Option<RawData>,
    /// Accepted only to refuse it with a precise message (the norm cache is gone).
    #[serde(default)]
    cache: Option<toml::Value>,
    #[serde(default)]
    baseline: Option<RawBaseline>,
    #[serde(default, rename = "gate")]
    gates: Vec<RawGate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBaseline {
    #[serde(default)]
    report: Option<String>,
    #[serde(default)]
    certificates: Option<String>,
    #[serde(default)]
    required: bool,
}

/// The `[baseline]` of a policy: a previous JSON report or a previous run's certificate file.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineSource {
    /// The file, resolved against the policy's directory.
    pub path: PathBuf,
    /// Whether it is a certificate file (`certificates = ...`; per-point regression) rather than
    /// a JSON report (`report = ...`).
    pub certificates: bool,
    /// Whether a missing or non-comparable baseline is an error.
    pub required: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    path: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    accumulate: Option<String>,
    #[serde(default)]
    ftz: Option<bool>,
    #[serde(default)]
    gram_iterations: Option<u32>,
    #[serde(default)]
    runtime: Option<String>,
    #[serde(default)]
    gpu: Option<String>,
    #[serde(default)]
    tf32: Option<bool>,
    #[serde(default)]
    reduced_precision_reduction: Option<bool>,
    #[serde(default)]
    operand_rounding: Option<String>,
    #[serde(default)]
    decision: Option<String>,
}

impl RawModel {
    fn runtime_keys(&self) -> RuntimeKeys<'_> {
        RuntimeKeys {
            runtime: self.runtime.as_deref(),
            gpu: self.gpu.as_deref(),
            tf32: self.tf32,
            reduced_precision_reduction: self.reduced_precision_reduction,
            operand_rounding: self.operand_rounding.as_deref(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    inputs: Option<String>,
    #[serde(default)]
    labels: Option<String>,
    #[serde(default)]
    label_column: Option<String>,
    #[serde(default)]
    input_range: Option<toml::Value>,
}

/// One `[[gate]]` as written: the gate's own keys, then one key per threshold of each level,
/// generated from [`thresholds::threshold_rows!`] so that serde rejects unknown keys with their
/// position.
macro_rules! raw_gate {
    ($($(#[doc = $doc:literal])* $key:ident / $warn:ident => $figure:ident, $direction:ident,
       $unit:ident, labels: $labels:literal, legacy: $legacy:ident;)*) => {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RawGate {
            name: toml::Spanned<String>,
            #[serde(default)]
            model: Option<String>,
            #[serde(default)]
            inputs: Option<String>,
            #[serde(default)]
            labels: Option<String>,
            #[serde(default)]
            label_column: Option<String>,
            #[serde(default)]
            format: Option<String>,
            #[serde(default)]
            accumulate: Option<String>,
            #[serde(default)]
            ftz: Option<bool>,
            #[serde(default)]
            runtime: Option<String>,
            #[serde(default)]
            gpu: Option<String>,
            #[serde(default)]
            tf32: Option<bool>,
            #[serde(default)]
            reduced_precision_reduction: Option<bool>,
            #[serde(default)]
            operand_rounding: Option<String>,
            #[serde(default)]
            decision: Option<String>,
            #[serde(default)]
            epsilon: Option<toml::Value>,
            #[serde(default)]
            epsilons: Option<String>,
            #[serde(default)]
            norm: Option<String>,
            #[serde(default)]
            input_range: Option<toml::Value>,
            #[serde(default)]
            mode: Option<String>,
            #[serde(default)]
            min_class_points: Option<u64>,
            #[serde(default)]
            curve: Option<toml::Value>,
            #[serde(default)]
            attack: Option<bool>,
            #[serde(default)]
            local_budget_s: Option<f64>,
            #[serde(default)]
            best_local: Option<bool>,
            #[serde(default)]
            complete_budget_s: Option<f64>,
            #[serde(default)]
            complete_total_s: Option<f64>,
            #[serde(default)]
            complete_subdomains: Option<u64>,
            #[serde(default)]
            complete_memory_mib: Option<u64>,
            $(
                #[serde(default)]
                $key: Option<f64>,
                #[serde(default)]
                $warn: Option<f64>,
            )*
        }

        impl RawGate {
            /// The thresholds as written, in registry order, the warn level nested.
            fn thresholds(&self) -> Thresholds {
                let warn = Thresholds::from_limits([$(self.$warn),*]);
                let mut t = Thresholds::from_limits([$(self.$key),*]);
                t.min_class_points = self.min_class_points;
                t.warn = (!warn.is_empty()).then(|| Box::new(warn));
                t
            }
        }
    };
}
thresholds::threshold_rows!(raw_gate);

impl Gate {
    /// The mode the thresholds apply to.
    pub fn mode(&self) -> Mode {
        self.modes[0]
    }
}

/// What a gate certifies: a model in a format on a test set. Gates with equal targets share
/// one load, one norm computation and one forward pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// ONNX model.
    pub model: PathBuf,
    /// Deployment (storage) format; `None`: read from the model's weights.
    pub format: Option<Format>,
    /// Declared accumulation format (`None`: the storage format or the next wider one).
    pub accumulate: Option<Format>,
    /// Flush-to-zero execution.
    pub ftz: bool,
    /// The declared runtime and its settings (`None`: the IEEE model alone).
    pub runtime: Option<RuntimeChoice>,
    /// Gram iterations for the spectral norms.
    pub gram_iterations: u32,
    /// Test inputs.
    pub inputs: PathBuf,
    /// Test labels.
    pub labels: Option<PathBuf>,
    /// How the model's outputs name the class (`decision`, default argmax).
    pub decision: Decision,
    /// The label column of a CSV test set (`label_column`; `None`: every column is a feature).
    pub label_column: Option<String>,
    /// The set a radius stands for: the gate's `norm` (default l2) and the `input_range` (the
    /// gate's, else `[data]`'s) every input lies in and the set is clipped to.
    pub ball: BallSpec,
}

/// One `[[gate]]`.
#[derive(Clone, Debug)]
pub struct Gate {
    /// Gate name (unique within the policy).
    pub name: String,
    /// 1-based line of the gate's `name` key in the policy file.
    pub line: usize,
    /// The gate's model path as written in the policy (relative to the policy file).
    pub model_name: String,
    /// Model, format and data (the gate's keys override `[model]` and `[data]`).
    pub target: Target,
    /// Perturbation radius.
    pub radius: Radius,
    /// Modes to compute; the thresholds apply to the first.
    pub modes: Vec<Mode>,
    /// Thresholds.
    pub thresholds: Thresholds,
    /// The robustness curve to report, if any (`curve = true` or a list of radii).
    pub curve: Option<CurveGrid>,
    /// Run the falsifier on the points the first mode does not certify (`attack = true`).
    pub attack: bool,
    /// Seconds the local bounds may take (`local_budget_s`); the points left then are not
    /// certified by them. `None`: no limit.
    pub local_budget_s: Option<f64>,
    /// Let `best` consult local bounds where it does not otherwise certify (`best_local`,
    /// default true; `best_local = false` opts out).
    pub best_local: bool,
    /// With mode `complete`, branch and bound's budget.
    pub complete: Option<CompleteBudget>,
}

/// A validated policy; every path is resolved relative to the policy file.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The policy file.
    pub path: PathBuf,
    /// Baseline for the regression thresholds.
    pub baseline: Option<BaselineSource>,
    /// The gates, in file order.
    pub gates: Vec<Gate>,
}

impl Policy {
    /// Read and validate a policy file.
    pub fn load(path: &Path) -> Result<Policy, LipfpError> {
        let bytes = crate::files::read_limited(path, "policy file", crate::files::POLICY_LIMIT)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| LipfpError::policy(path, "the policy is not UTF-8 text"))?;
        Policy::parse(path, &text)
    }

    /// The warnings a valid policy still deserves, each naming its gate and line: thresholds
    /// that look like fractions of a percentage.
    pub fn warnings(&self) -> Vec<String> {
        (self.gates.iter())
            .flat_map(|g| {
                (g.thresholds.fraction_notes().into_iter())
                    .map(move |note| format!("gate `{}` (line {}): {note}", g.name, g.line))
            })
            .collect()
    }

    /// Validate policy text read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Policy, LipfpError> {
        let err = |m: String| LipfpError::policy(path, m);
        let raw: RawPolicy =
            toml::from_str(text).map_err(|e| err(format!("invalid policy: {e}")))?;
        if raw.cache.is_some() {
            return Err(err(
                "[cache]: lipfp no longer caches norms; it recomputes them on every run, so no file \
                 the repository supplies can lower them. Delete the [cache] section"
                    .into(),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let model = raw.model.unwrap_or_default();
        let data = raw.data.unwrap_or_default();
        let gram_iterations = check_model(path, &model)?;
        if raw.gates.is_empty() {
            return Err(err("the policy has no [[gate]]".into()));
        }
        let defaults = Defaults {
            path,
            base,
            model: &model,
            data: &data,
            gram_iterations,
        };
        let mut gates = Vec::with_capacity(raw.gates.len());
        for (k, g) in raw.gates.into_iter().enumerate() {
            let gate = defaults.gate(k, g, text, &gates)?;
            gates.push(gate);
        }
        Ok(Policy {
            path: path.to_path_buf(),
            baseline: raw
                .baseline
                .map(|b| baseline_source(path, base, b))
                .transpose()?,
            gates,
        })
    }
}

/// `[baseline]`: exactly one of `report` and `certificates`, resolved against `base`.
fn baseline_source(path: &Path, base: &Path, b: RawBaseline) -> Result<BaselineSource, LipfpError> {
    let (file, certificates) =
        match (b.report, b.certificates) {
            (Some(r), None) => (r, false),
            (None, Some(c)) => (c, true),
            (Some(_), Some(_)) => {
                return Err(LipfpError::policy(
                    path,
                    "[baseline]: set one of `report` (a JSON report) and `certificates` (a \
                 certificate file), not both",
                ))
            }
            (None, None) => return Err(LipfpError::policy(
                path,
                "[baseline]: missing `report` (a JSON report) or `certificates` (a certificate \
                 file written by --certificates)",
            )),
        };
    Ok(BaselineSource {
        path: base.join(file),
        certificates,
        required: b.required,
    })
}

/// Format `text` of key `key` in section `at` of the policy at `path`.
fn parse_format(path: &Path, text: &str, at: &str, key: &str) -> Result<Format, LipfpError> {
    text.parse()
        .map_err(|m: String| LipfpError::policy(path, format!("{at} {key}: {m}")))
}

/// Check `[model]` of the policy at `path` on its own (gram iterations within 1..=64, known
/// formats); returns its gram iterations (or the default).
fn check_model(path: &Path, model: &RawModel) -> Result<u32, LipfpError> {
    let gram_iterations = model.gram_iterations.unwrap_or(DEFAULT_GRAM_ITERATIONS);
    if !(1..=64).contains(&gram_iterations) {
        return Err(LipfpError::policy(
            path,
            format!("[model] gram_iterations = {gram_iterations}: must be between 1 and 64"),
        ));
    }
    if let Some(f) = &model.format {
        parse_format(path, f, "[model]", "format")?;
    }
    if let Some(f) = &model.accumulate {
        parse_format(path, f, "[model]", "accumulate")?;
    }
    model
        .runtime_keys()
        .choice()
        .map_err(|m| LipfpError::policy(path, format!("[model] {m}")))?;
    Ok(gram_iterations)
}

/// Whether the falsifier ([`crate::engine::attack`]) can run on a gate: one uniform radius and a
/// sound first mode.
pub fn check_attack_request(radius: &Radius, mode: Mode) -> Result<(), String> {
    if let Radius::PerInstance(p) = radius {
        return Err(format!(
            "the falsifier needs one radius (epsilon); per-instance radii ({}) are not supported",
            p.display()
        ));
    }
    if !mode.is_sound() {
        return Err(
            "the falsifier attacks the points a sound mode does not certify, but the first mode is \
             `real` (unsound for floating-point execution); put a sound mode first"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
