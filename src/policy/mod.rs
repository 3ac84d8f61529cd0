//! The `lipfp.toml` policy: a typed schema deserialised once (unknown keys rejected with their
//! name and position) and validated with errors that point at the field. Every threshold is a
//! row of the registry in [`thresholds`].
//!
//! Imports: [`crate::bounds`] (modes, balls, norms' defaults), [`crate::arith`] (formats,
//! runtimes), [`crate::error`], [`crate::files`], [`crate::proto_gen`] (the thresholds' fields in
//! certificate files).

use std::path::Path;

use crate::bounds::norms::DEFAULT_GRAM_ITERATIONS;
use crate::error::LipfpError;

mod attack;
mod complete;
mod decision;
mod gate;
mod radius;
mod raw;
mod spec;
pub mod thresholds;
pub mod vnnlib;

pub use attack::check_attack_request;
pub use complete::CompleteBudget;
pub use decision::Decision;
pub use radius::{parse_decimal_exact, CurveGrid, Radius};
pub use spec::{BaselineSource, Gate, Policy, Target};
pub use thresholds::{Thresholds, MIN_CLASS_POINTS};

use gate::Defaults;
use raw::{parse_format, RawBaseline, RawModel, RawPolicy};

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

#[cfg(test)]
mod tests;
