//! One `[[gate]]` validated: its name, radius, curve, modes, attack, thresholds (each within 0..100)
//! and target (the gate's keys over `[model]` and `[data]`), then the thresholds needing labels.

use std::path::{Path, PathBuf};

use crate::arith::runtime::RuntimeKeys;
use crate::bounds::ball::{BallSpec, InputRange, Norm};
use crate::bounds::certify::parse_mode_list;
use crate::error::LipfpError;

use super::attack::check_attack_request;
use super::decision::Decision;
use super::radius::{CurveGrid, Radius};
use super::raw::{parse_format, RawData, RawGate, RawModel};
use super::spec::{Gate, Target};
use super::thresholds::Thresholds;

/// What every gate of a policy shares: where errors point, where paths resolve, and the
/// `[model]` and `[data]` defaults a gate's keys override.
pub(super) struct Defaults<'a> {
    /// The policy file (errors name it).
    pub path: &'a Path,
    /// The policy's directory: relative paths resolve against it.
    pub base: &'a Path,
    /// `[model]` (its formats already checked).
    pub model: &'a RawModel,
    /// `[data]`.
    pub data: &'a RawData,
    /// `[model] gram_iterations` or the default, already checked.
    pub gram_iterations: u32,
}

/// The input range written as `input_range = [lo, hi]` (numbers, integers or not).
fn input_range_of(v: &toml::Value) -> Result<InputRange, String> {
    let number = |v: &toml::Value| match v {
        toml::Value::Integer(k) => Some(*k as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    };
    match v.as_array().map(|a| a.iter().map(number).collect::<Option<Vec<f64>>>()) {
        Some(Some(ends)) if ends.len() == 2 => InputRange::new(ends[0], ends[1]),
        _ => Err(format!(
            "write the valid range of every input feature as two numbers, e.g. input_range = [0, 1] (got {v})"
        )),
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    1 + text[..offset.min(text.len())].matches('\n').count()
}

/// The labels a test set holds itself: a `.npz` archive's array `y`, a CSV file's
/// `label_column`, unless `labels` names another file; `label_column` only with CSV inputs.
pub(super) fn data_defaults(t: Target) -> Result<Target, String> {
    let csv = crate::files::is_csv(&t.inputs);
    if t.label_column.is_some() && !csv {
        return Err(format!(
            "label_column: the inputs {} are not a CSV file",
            t.inputs.display()
        ));
    }
    let own = crate::files::is_npz(&t.inputs) || (csv && t.label_column.is_some());
    let labels = t.labels.clone().or_else(|| own.then(|| t.inputs.clone()));
    Ok(Target { labels, ..t })
}

impl Defaults<'_> {
    /// A policy error with message `m`.
    fn err(&self, m: String) -> LipfpError {
        LipfpError::policy(self.path, m)
    }

    /// A path written in the policy, resolved against the policy's directory.
    fn resolve(&self, p: &str) -> PathBuf {
        self.base.join(p)
    }

    /// Validate gate #`k + 1` of the policy `text` (`earlier`: the gates before it).
    pub fn gate(
        &self,
        k: usize,
        g: RawGate,
        text: &str,
        earlier: &[Gate],
    ) -> Result<Gate, LipfpError> {
        let line = line_of(text, g.name.span().start);
        let at = self.check_name(k, line, g.name.get_ref(), earlier)?;
        let radius = self.radius(&g, &at)?;
        let curve = match &g.curve {
            Some(v) => CurveGrid::from_toml(v).map_err(|m| self.err(format!("{at} curve: {m}")))?,
            None => None,
        };
        let mode_text = g.mode.as_deref().unwrap_or("standard");
        let modes = parse_mode_list(mode_text).map_err(|m| self.err(format!("{at} mode: {m}")))?;
        let attack = g.attack.unwrap_or(false);
        if attack {
            check_attack_request(&radius, modes[0])
                .map_err(|m| self.err(format!("{at} attack: {m}")))?;
        }
        let local_budget_s = match g.local_budget_s {
            Some(b) if !(b.is_finite() && b >= 0.0) => {
                return Err(self.err(format!(
                    "{at} local_budget_s: {b} is not a number of seconds (finite, >= 0)"
                )))
            }
            b => b,
        };
        let complete = super::complete::CompleteKeys {
            budget_s: g.complete_budget_s,
            total_s: g.complete_total_s,
            subdomains: g.complete_subdomains,
            memory_mib: g.complete_memory_mib,
        }
        .budget(&modes, &radius, curve.is_some())
        .map_err(|m| self.err(format!("{at} {m}")))?;
        let thresholds = self.thresholds(&g, &at)?;
        let (model_name, target) = self.target(&g, &at)?;
        self.check_needs_labels(&thresholds, &target, &at)?;
        Ok(Gate {
            name: g.name.into_inner(),
            line,
            model_name,
            target,
            radius,
            modes,
            thresholds,
            curve,
            attack,
            local_budget_s,
            best_local: g.best_local.unwrap_or(true),
            complete,
        })
    }

    /// Check the name of gate #`k + 1` (at `line`): printable on one line (a newline would
    /// start a new line in every report, a workflow command on GitHub Actions), not empty, not
    /// an `earlier` gate's. Returns how errors name the gate.
    fn check_name(
        &self,
        k: usize,
        line: usize,
        name: &str,
        earlier: &[Gate],
    ) -> Result<String, LipfpError> {
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(self.err(format!(
                "[[gate]] #{} (line {line}): the name `{}` contains the control character U+{:04X}; gate names must be printable text on one line",
                k + 1,
                name.escape_debug(),
                c as u32
            )));
        }
        let at = format!("[[gate]] #{} (`{}`, line {line})", k + 1, name);
        if name.trim().is_empty() {
            return Err(self.err(format!("[[gate]] #{}: name must not be empty", k + 1)));
        }
        if earlier.iter().any(|x| x.name == name) {
            return Err(self.err(format!("{at}: duplicate gate name")));
        }
        Ok(at)
    }

    /// The radius of gate `at`: exactly one of `epsilon` (a decimal string, read exactly) and
    /// `epsilons` (a per-instance radii file).
    fn radius(&self, g: &RawGate, at: &str) -> Result<Radius, LipfpError> {
        match (&g.epsilon, &g.epsilons) {
            (Some(toml::Value::String(s)), None) => {
                Radius::parse_decimal(s).map_err(|m| self.err(format!("{at} epsilon: {m}")))
            }
            (Some(v), None) => Err(self.err(format!(
                "{at} epsilon: write the radius as a decimal string (epsilon = \"{v}\") so it is read exactly"
            ))),
            (None, Some(p)) => Ok(Radius::PerInstance(self.resolve(p))),
            (Some(_), Some(_)) => Err(self.err(format!(
                "{at}: set either epsilon or epsilons, not both"
            ))),
            (None, None) => Err(self.err(format!(
                "{at}: missing epsilon (or epsilons = \"radii.npy\")"
            ))),
        }
    }

    /// The thresholds of gate `at`, each limit within its unit's range.
    fn thresholds(&self, g: &RawGate, at: &str) -> Result<Thresholds, LipfpError> {
        let thresholds = g.thresholds();
        if thresholds.min_class_points == Some(0) {
            return Err(self.err(format!("{at} min_class_points = 0: must be at least 1")));
        }
        for (key, def, v) in thresholds.by_key() {
            def.check_limit(v)
                .map_err(|m| self.err(format!("{at} {key} = {v}: {m}")))?;
        }
        Ok(thresholds)
    }

    /// The model of gate `at` as written, and its target: each of the gate's keys over
    /// `[model]` and `[data]`, paths resolved against the policy's directory.
    fn target(&self, g: &RawGate, at: &str) -> Result<(String, Target), LipfpError> {
        let (model, data) = (self.model, self.data);
        let model_name = g
            .model
            .as_deref()
            .or(model.path.as_deref())
            .ok_or_else(|| {
                self.err(format!(
                    "{at}: no model: set [model] path or the gate's model"
                ))
            })?
            .to_string();
        let format_of = |gate: &Option<String>, policy: &Option<String>, key: &str| {
            gate.as_deref()
                .or(policy.as_deref())
                .map(|f| parse_format(self.path, f, at, key))
                .transpose()
        };
        let target = Target {
            model: self.resolve(&model_name),
            format: format_of(&g.format, &model.format, "format")?,
            accumulate: format_of(&g.accumulate, &model.accumulate, "accumulate")?,
            ftz: g.ftz.or(model.ftz).unwrap_or(false),
            runtime: RuntimeKeys {
                runtime: g.runtime.as_deref(),
                gpu: g.gpu.as_deref(),
                tf32: g.tf32,
                reduced_precision_reduction: g.reduced_precision_reduction,
                operand_rounding: g.operand_rounding.as_deref(),
            }
            .over(model.runtime_keys())
            .choice()
            .map_err(|m| self.err(format!("{at} {m}")))?,
            gram_iterations: self.gram_iterations,
            decision: g
                .decision
                .as_deref()
                .or(model.decision.as_deref())
                .map(Decision::parse)
                .transpose()
                .map_err(|m| self.err(format!("{at} decision: {m}")))?
                .unwrap_or_default(),
            inputs: self.resolve(g.inputs.as_deref().or(data.inputs.as_deref()).ok_or_else(
                || {
                    self.err(format!(
                        "{at}: no test inputs: set [data] inputs or the gate's inputs"
                    ))
                },
            )?),
            labels: g
                .labels
                .as_deref()
                .or(data.labels.as_deref())
                .map(|p| self.resolve(p)),
            label_column: g.label_column.clone().or(data.label_column.clone()),
            ball: BallSpec {
                norm: (g.norm.as_deref().map(Norm::parse).transpose())
                    .map_err(|m| self.err(format!("{at} norm: {m}")))?
                    .unwrap_or_default(),
                range: (g.input_range.as_ref().or(data.input_range.as_ref()))
                    .map(input_range_of)
                    .transpose()
                    .map_err(|m| self.err(format!("{at} input_range: {m}")))?,
            },
        };
        let target = data_defaults(target).map_err(|m| self.err(format!("{at} {m}")))?;
        Ok((model_name, target))
    }

    /// Check gate `at` sets no threshold needing labels when its target has none.
    fn check_needs_labels(
        &self,
        thresholds: &Thresholds,
        target: &Target,
        at: &str,
    ) -> Result<(), LipfpError> {
        if target.labels.is_some() {
            return Ok(());
        }
        for (key, def, _) in thresholds.by_key() {
            if def.needs_labels {
                return Err(self.err(format!(
                    "{at} {key}: needs labels, but [data] has no labels"
                )));
            }
        }
        Ok(())
    }
}
