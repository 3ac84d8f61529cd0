//! The `lipfp.toml` policy: a typed schema deserialised once (unknown keys rejected with their
//! name and position) and validated with errors that point at the field.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::certify::{parse_mode_list, Mode};
use crate::error::LipfpError;
use crate::format::Format;
use crate::norms::DEFAULT_GRAM_ITERATIONS;

mod radius;
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
    report: String,
    #[serde(default)]
    required: bool,
}

#[derive(Debug, Deserialize)]
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    inputs: Option<String>,
    #[serde(default)]
    labels: Option<String>,
}

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
    format: Option<String>,
    #[serde(default)]
    accumulate: Option<String>,
    #[serde(default)]
    ftz: Option<bool>,
    #[serde(default)]
    epsilon: Option<toml::Value>,
    #[serde(default)]
    epsilons: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    min_accuracy_pct: Option<f64>,
    #[serde(default)]
    min_certified_pct: Option<f64>,
    #[serde(default)]
    min_vra_pct: Option<f64>,
    #[serde(default)]
    max_fp_cost_pp: Option<f64>,
    #[serde(default)]
    max_vra_drop_pp: Option<f64>,
    #[serde(default)]
    max_certified_drop_pp: Option<f64>,
    #[serde(default)]
    curve: Option<toml::Value>,
    #[serde(default)]
    attack: Option<bool>,
}

/// Thresholds of a gate (percentages, percentage points).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Thresholds {
    /// Minimum clean accuracy.
    pub min_accuracy_pct: Option<f64>,
    /// Minimum certified rate of the gate's mode.
    pub min_certified_pct: Option<f64>,
    /// Minimum verified robust accuracy of the gate's mode.
    pub min_vra_pct: Option<f64>,
    /// Maximum floating-point cost: real certified rate minus the mode's, in points.
    pub max_fp_cost_pp: Option<f64>,
    /// Maximum drop of the mode's VRA against the baseline report's gate of the same name.
    pub max_vra_drop_pp: Option<f64>,
    /// Maximum drop of the mode's certified rate against the baseline.
    pub max_certified_drop_pp: Option<f64>,
}

impl Thresholds {
    /// True when the gate has no threshold (it reports but never fails).
    pub fn is_empty(&self) -> bool {
        *self == Thresholds::default()
    }

    /// One note per `*_pct` threshold that looks like a fraction (`0 < x <= 1`): thresholds
    /// are percentages, so `min_vra_pct = 0.95` asks for 0.95%, not 95%.
    pub fn fraction_notes(&self) -> Vec<String> {
        [
            ("min_accuracy_pct", self.min_accuracy_pct),
            ("min_certified_pct", self.min_certified_pct),
            ("min_vra_pct", self.min_vra_pct),
        ]
        .into_iter()
        .filter_map(|(key, v)| {
            let v = v?;
            (v > 0.0 && v <= 1.0).then(|| {
                let percent = (v * 1e11).round() / 1e9;
                format!(
                    "{key} = {v} looks like a fraction: thresholds are percentages (0..100), so this \
                     asks for {v}%; write {percent} for {percent}%"
                )
            })
        })
        .collect()
    }
}

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
    /// Gram iterations for the spectral norms.
    pub gram_iterations: u32,
    /// Test inputs.
    pub inputs: PathBuf,
    /// Test labels.
    pub labels: Option<PathBuf>,
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
}

/// A validated policy; every path is resolved relative to the policy file.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The policy file.
    pub path: PathBuf,
    /// Baseline report for regression thresholds, and whether it must exist.
    pub baseline: Option<(PathBuf, bool)>,
    /// The gates, in file order.
    pub gates: Vec<Gate>,
}

impl Policy {
    /// Whether a gate on target `t` needs the float64 reference execution.
    pub fn needs_reference(&self, t: &Target) -> bool {
        self.gates
            .iter()
            .filter(|g| g.target == *t)
            .any(|g| g.modes.iter().any(|m| m.needs_reference()))
    }

    /// Read and validate a policy file.
    pub fn load(path: &Path) -> Result<Policy, LipfpError> {
        let bytes = crate::files::read_limited(path, "policy file", crate::files::POLICY_LIMIT)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| LipfpError::policy(path, "the policy is not UTF-8 text"))?;
        Policy::parse(path, &text)
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
        let resolve = |p: &str| base.join(p);
        let model = raw.model.unwrap_or(RawModel {
            path: None,
            format: None,
            accumulate: None,
            ftz: None,
            gram_iterations: None,
        });
        let data = raw.data.unwrap_or(RawData {
            inputs: None,
            labels: None,
        });
        let gram_iterations = model.gram_iterations.unwrap_or(DEFAULT_GRAM_ITERATIONS);
        if !(1..=64).contains(&gram_iterations) {
            return Err(err(format!(
                "[model] gram_iterations = {gram_iterations}: must be between 1 and 64"
            )));
        }
        let parse_format = |text: &str, at: &str, key: &str| -> Result<Format, LipfpError> {
            text.parse()
                .map_err(|m: String| err(format!("{at} {key}: {m}")))
        };
        if let Some(f) = &model.format {
            parse_format(f, "[model]", "format")?;
        }
        if let Some(f) = &model.accumulate {
            parse_format(f, "[model]", "accumulate")?;
        }
        if raw.gates.is_empty() {
            return Err(err("the policy has no [[gate]]".into()));
        }
        let mut gates = Vec::with_capacity(raw.gates.len());
        for (k, g) in raw.gates.into_iter().enumerate() {
            let line = 1 + text[..g.name.span().start.min(text.len())]
                .matches('\n')
                .count();
            let name = g.name.into_inner();
            if let Some(c) = name.chars().find(|c| c.is_control()) {
                // a newline in a name would start a new line in every report (a workflow
                // command on GitHub Actions)
                return Err(err(format!(
                    "[[gate]] #{} (line {line}): the name `{}` contains the control character U+{:04X}; gate names must be printable text on one line",
                    k + 1,
                    name.escape_debug(),
                    c as u32
                )));
            }
            let at = format!("[[gate]] #{} (`{}`, line {line})", k + 1, name);
            if name.trim().is_empty() {
                return Err(err(format!("[[gate]] #{}: name must not be empty", k + 1)));
            }
            if gates.iter().any(|x: &Gate| x.name == name) {
                return Err(err(format!("{at}: duplicate gate name")));
            }
            let radius = match (&g.epsilon, &g.epsilons) {
                (Some(toml::Value::String(s)), None) => {
                    Radius::parse_decimal(s).map_err(|m| err(format!("{at} epsilon: {m}")))?
                }
                (Some(v), None) => {
                    return Err(err(format!(
                        "{at} epsilon: write the radius as a decimal string (epsilon = \"{v}\") so it is read exactly"
                    )))
                }
                (None, Some(p)) => Radius::PerInstance(resolve(p)),
                (Some(_), Some(_)) => return Err(err(format!("{at}: set either epsilon or epsilons, not both"))),
                (None, None) => return Err(err(format!("{at}: missing epsilon (or epsilons = \"radii.npy\")"))),
            };
            let curve = match &g.curve {
                Some(v) => CurveGrid::from_toml(v).map_err(|m| err(format!("{at} curve: {m}")))?,
                None => None,
            };
            let mode_text = g.mode.clone().unwrap_or_else(|| "standard".into());
            let modes = parse_mode_list(&mode_text).map_err(|m| err(format!("{at} mode: {m}")))?;
            let attack = g.attack.unwrap_or(false);
            if attack {
                crate::attack::check_request(&radius, modes[0])
                    .map_err(|m| err(format!("{at} attack: {m}")))?;
            }
            let thresholds = Thresholds {
                min_accuracy_pct: g.min_accuracy_pct,
                min_certified_pct: g.min_certified_pct,
                min_vra_pct: g.min_vra_pct,
                max_fp_cost_pp: g.max_fp_cost_pp,
                max_vra_drop_pp: g.max_vra_drop_pp,
                max_certified_drop_pp: g.max_certified_drop_pp,
            };
            for (key, v) in [
                ("min_accuracy_pct", thresholds.min_accuracy_pct),
                ("min_certified_pct", thresholds.min_certified_pct),
                ("min_vra_pct", thresholds.min_vra_pct),
                ("max_fp_cost_pp", thresholds.max_fp_cost_pp),
                ("max_vra_drop_pp", thresholds.max_vra_drop_pp),
                ("max_certified_drop_pp", thresholds.max_certified_drop_pp),
            ] {
                if let Some(v) = v {
                    if !(0.0..=100.0).contains(&v) {
                        return Err(err(format!("{at} {key} = {v}: must be between 0 and 100")));
                    }
                }
            }
            let model_name = g
                .model
                .as_deref()
                .or(model.path.as_deref())
                .ok_or_else(|| {
                    err(format!(
                        "{at}: no model: set [model] path or the gate's model"
                    ))
                })?
                .to_string();
            let target = Target {
                model: resolve(&model_name),
                format: g
                    .format
                    .as_deref()
                    .or(model.format.as_deref())
                    .map(|f| parse_format(f, &at, "format"))
                    .transpose()?,
                accumulate: g
                    .accumulate
                    .as_deref()
                    .or(model.accumulate.as_deref())
                    .map(|f| parse_format(f, &at, "accumulate"))
                    .transpose()?,
                ftz: g.ftz.or(model.ftz).unwrap_or(false),
                gram_iterations,
                inputs: resolve(g.inputs.as_deref().or(data.inputs.as_deref()).ok_or_else(
                    || {
                        err(format!(
                            "{at}: no test inputs: set [data] inputs or the gate's inputs"
                        ))
                    },
                )?),
                labels: g.labels.as_deref().or(data.labels.as_deref()).map(resolve),
            };
            if target.labels.is_none() {
                for (key, v) in [
                    ("min_accuracy_pct", thresholds.min_accuracy_pct),
                    ("min_vra_pct", thresholds.min_vra_pct),
                    ("max_vra_drop_pp", thresholds.max_vra_drop_pp),
                ] {
                    if v.is_some() {
                        return Err(err(format!(
                            "{at} {key}: needs labels, but [data] has no labels"
                        )));
                    }
                }
            }
            gates.push(Gate {
                name,
                line,
                model_name,
                target,
                radius,
                modes,
                thresholds,
                curve,
                attack,
            });
        }
        Ok(Policy {
            path: path.to_path_buf(),
            baseline: raw.baseline.map(|b| (resolve(&b.report), b.required)),
            gates,
        })
    }
}

#[cfg(test)]
mod tests;
