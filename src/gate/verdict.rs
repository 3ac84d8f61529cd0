//! Gate verdicts: compare a run's figures with a gate's thresholds, recording every threshold
//! with its measured figure and the margin to it (reporters render these; they compute nothing).

use serde::Serialize;

use crate::bounds::certify::Mode;
use crate::engine::run::CertifyOutcome;
use crate::gate::baseline::BaselineFigures;
use crate::policy::thresholds::{Direction, Figure, ThresholdDef, Unit};
use crate::policy::{Thresholds, MIN_CLASS_POINTS};

/// Percentage `100 * k / n`.
pub fn pct(k: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * k as f64 / n as f64
    }
}

/// A p-value as reports write it: four decimals, or two significant digits below `1e-4`.
pub fn p_text(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// `x` rounded to 4 decimals, as reports write percentages (the one rounding of every reported
/// percentage): a drop compares the baseline's reported figure with this run's as reported.
pub fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// One threshold of a gate and how the run stands against it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThresholdCheck {
    /// The policy key, e.g. `min_certified_pct` or `warn_min_certified_pct`.
    pub key: &'static str,
    /// The threshold's registry row: figure, direction and unit.
    #[serde(skip)]
    pub def: &'static ThresholdDef,
    /// The limit as set in the policy.
    pub limit: f64,
    /// What is measured, e.g. `standard VRA` or `standard VRA drop`.
    pub what: String,
    /// The measured figure: a percentage for `min_*_pct`, percentage points for `max_*_pp`
    /// (null when not evaluated).
    pub value: Option<f64>,
    /// Distance to the limit in percentage points, positive inside it (`value - limit` for a
    /// minimum, `limit - value` for a maximum); null when not evaluated.
    pub margin_pp: Option<f64>,
    /// Whether the threshold is met (null when not evaluated).
    pub passed: Option<bool>,
    /// Why it was not evaluated (no labels, no comparable baseline, the gate errored).
    pub skipped: Option<String>,
}

impl ThresholdCheck {
    /// The threshold `def` at key `key` with limit `limit` judged against `value`.
    fn judge(
        (key, def): (&'static str, &'static ThresholdDef),
        limit: f64,
        what: String,
        value: Result<f64, String>,
    ) -> Self {
        let (value, margin_pp, skipped) = match value {
            Ok(v) => (Some(v), Some(def.margin(v, limit)), None),
            Err(why) => (None, None, Some(why)),
        };
        ThresholdCheck {
            key,
            def,
            limit,
            what,
            value,
            margin_pp,
            passed: margin_pp.map(|m| m >= 0.0),
            skipped,
        }
    }

    /// The one-line failure text, e.g. `standard certified 94.10% < min_certified_pct 95`; a drop names
    /// the baseline figure `before`.
    fn failure(&self, before: Option<f64>) -> Option<String> {
        if self.passed != Some(false) {
            return None;
        }
        let (v, key, limit) = (self.value?, self.key, self.limit);
        if self.def.unit == Unit::Significance {
            return Some(format!(
                "{} is significant: McNemar p = {} < {key} {limit}",
                self.what,
                p_text(v)
            ));
        }
        Some(match before {
            _ if self.def.direction == Direction::AtLeast => {
                format!("{} {v:.2}% < {key} {limit}", self.what)
            }
            Some(b) => format!(
                "{} dropped {v:.2} pp (baseline {b:.2}% -> now {:.2}%) > {key} {limit}",
                self.what.trim_end_matches(" drop"),
                b - v
            ),
            None => format!("{} {v:.2} pp > {key} {limit}", self.what),
        })
    }
}

/// The verdict of one gate.
#[derive(Clone, Debug, PartialEq)]
pub struct GateVerdict {
    /// `None` when the gate has no threshold.
    pub passed: Option<bool>,
    /// One line per failed threshold, e.g. `standard certified 94.10% < min_certified_pct 95`.
    pub failures: Vec<String>,
    /// One line per warn-level threshold not met, e.g. `standard certified 94.10% < warn_min_certified_pct 95`:
    /// reported, never failing the gate.
    pub warnings: Vec<String>,
    /// Every threshold with its figure and margin, in policy-key order, the warn level after.
    pub checks: Vec<ThresholdCheck>,
}

/// One threshold to judge: key and row, limit, what is measured, the figure (or why it is
/// missing) and, for a drop, the baseline figure.
type Spec = (
    (&'static str, &'static ThresholdDef),
    f64,
    String,
    Result<f64, String>,
    Option<f64>,
);

/// The thresholds of one level of a gate (`warn`: the `warn_*` keys) in mode `mode`, with the
/// figures `fig` gives for each.
fn specs(
    t: &Thresholds,
    warn: bool,
    mode: Mode,
    fig: impl Fn(Figure) -> (Result<f64, String>, Option<f64>),
) -> Vec<Spec> {
    t.limits()
        .map(|(def, limit)| {
            let (value, before) = fig(def.figure);
            let what = def.figure.measured(mode);
            ((def.key_at(warn), def), limit, what, value, before)
        })
        .collect()
}

/// The certified rate of mode `m` in `outcome`, in percent (with `vra`, the VRA), or why it is
/// unavailable.
fn rate_of(outcome: &CertifyOutcome, m: Mode, vra: bool) -> Result<f64, String> {
    let mo = outcome
        .mode(m)
        .ok_or_else(|| format!("mode {m} was not computed"))?;
    if vra {
        mo.vra
            .map(|v| pct(v, outcome.n))
            .ok_or_else(|| "no labels".into())
    } else {
        Ok(pct(mo.certified, outcome.n))
    }
}

/// The floating-point cost of `mode`: the real mode's certified rate minus its own, in
/// percentage points (the figure `max_fp_cost_pp` judges and every report shows).
pub fn fp_cost_pp(outcome: &CertifyOutcome, mode: Mode) -> Result<f64, String> {
    Ok(rate_of(outcome, Mode::Real, false)? - rate_of(outcome, mode, false)?)
}

/// The value of `figure` (a percentage or percentage points) and, for a drop, the
/// baseline's figure; `Err` says why it is unavailable.
fn figure(
    figure: Figure,
    (mode, min_points): (Mode, u64),
    outcome: &CertifyOutcome,
    baseline: &Result<&BaselineFigures, String>,
) -> (Result<f64, String>, Option<f64>) {
    let n = outcome.n;
    let rate = |m: Mode, vra: bool| rate_of(outcome, m, vra);
    let drop = |vra: bool| -> (Result<f64, String>, Option<f64>) {
        let b = match baseline {
            Ok(b) => b,
            Err(why) => return (Err(why.clone()), None),
        };
        let before = if vra {
            b.vra_pct
        } else {
            Some(b.certified_pct)
        };
        match (before, rate(mode, vra)) {
            (Some(before), Ok(now)) => (Ok(before - round4(now)), Some(before)),
            (None, _) => (Err("the baseline has no VRA (no labels)".into()), None),
            (_, Err(e)) => (Err(e), None),
        }
    };
    match figure {
        Figure::Accuracy => (
            outcome
                .correct
                .map(|c| pct(c, n))
                .ok_or_else(|| "no labels".into()),
            None,
        ),
        Figure::Certified => (rate(mode, false), None),
        Figure::Vra => (rate(mode, true), None),
        Figure::FpCost => (fp_cost_pp(outcome, mode), None),
        Figure::VraDrop => drop(true),
        Figure::CertifiedDrop => drop(false),
        Figure::VraDropSignificance => (
            match baseline {
                Ok(b) => b.vra_drop_p.ok_or_else(|| {
                    "needs per-point data: a certificate baseline ([baseline] certificates) \
                     and labels"
                        .to_string()
                }),
                Err(why) => Err(why.clone()),
            },
            None,
        ),
        Figure::ClassVra => (worst_class(outcome, mode, true, min_points), None),
        Figure::ClassCertified => (worst_class(outcome, mode, false, min_points), None),
    }
}

/// Per true class with at least `min_points` points, its VRA (`vra`) or certified rate in
/// `mode`, in percent, with the class index; `Err` when no class can be judged.
fn class_rates(
    outcome: &CertifyOutcome,
    mode: Mode,
    vra: bool,
    min_points: u64,
) -> Result<Vec<(usize, f64, usize)>, String> {
    let mo = outcome
        .mode(mode)
        .ok_or_else(|| format!("mode {mode} was not computed"))?;
    if mo.by_class.is_empty() {
        return Err("no labels".into());
    }
    let rates: Vec<(usize, f64, usize)> = mo
        .by_class
        .iter()
        .enumerate()
        .filter(|(_, c)| c.n as u64 >= min_points)
        .map(|(k, c)| (k, pct(if vra { c.vra } else { c.certified }, c.n), c.n))
        .collect();
    if rates.is_empty() {
        return Err(format!(
            "no class has {min_points} points or more (min_class_points)"
        ));
    }
    Ok(rates)
}

/// The weakest judged class's rate.
fn worst_class(
    outcome: &CertifyOutcome,
    mode: Mode,
    vra: bool,
    min_points: u64,
) -> Result<f64, String> {
    class_rates(outcome, mode, vra, min_points)
        .map(|r| r.iter().map(|(_, p, _)| *p).fold(f64::INFINITY, f64::min))
}

/// The failure line of a per-class threshold: every judged class below the limit (at most ten
/// named), and how many classes were too small to judge.
fn class_failure(
    c: &ThresholdCheck,
    outcome: &CertifyOutcome,
    mode: Mode,
    min_points: u64,
) -> String {
    let vra = c.def.figure == Figure::ClassVra;
    let rates = class_rates(outcome, mode, vra, min_points).unwrap_or_default();
    let below: Vec<String> = rates
        .iter()
        .filter(|(_, p, _)| *p < c.limit)
        .map(|(k, p, n)| format!("class {k} ({p:.2}% of {n} points)"))
        .collect();
    let shown = below
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let more = below.len().saturating_sub(10);
    let small = outcome.mode(mode).map_or(0, |m| {
        m.by_class
            .iter()
            .filter(|k| k.n > 0 && (k.n as u64) < min_points)
            .count()
    });
    let mut line = format!(
        "{mode} {} below {} {} in {shown}",
        if vra { "VRA" } else { "certified rate" },
        c.key,
        c.limit
    );
    if more > 0 {
        line.push_str(&format!(" and {more} more classes"));
    }
    if small > 0 {
        line.push_str(&format!(
            " ({small} classes with fewer than {min_points} points not judged)"
        ));
    }
    line
}

/// Evaluate `thresholds` against the figures of `mode` in `outcome` and, for the drop
/// thresholds, against the same gate's figures in a baseline report: `Err(reason)` when there
/// is no comparable baseline (the drop thresholds are then not evaluated, with the reason). The
/// warn level is judged the same way into `warnings`; it never fails the gate.
pub fn evaluate(
    thresholds: &Thresholds,
    mode: Mode,
    outcome: &CertifyOutcome,
    baseline: Result<&BaselineFigures, String>,
) -> GateVerdict {
    if thresholds.is_empty() {
        return GateVerdict {
            passed: None,
            failures: vec![],
            warnings: vec![],
            checks: vec![],
        };
    }
    let min_points = thresholds.min_class_points.unwrap_or(MIN_CLASS_POINTS);
    let level = |t: &Thresholds, warn: bool| {
        let mut lines = Vec::new();
        let mut checks = Vec::new();
        for (key, limit, what, value, before) in specs(t, warn, mode, |f| {
            figure(f, (mode, min_points), outcome, &baseline)
        }) {
            let c = ThresholdCheck::judge(key, limit, what, value);
            if c.def.figure.per_class() && c.passed == Some(false) {
                lines.push(class_failure(&c, outcome, mode, min_points));
            } else {
                lines.extend(c.failure(before));
            }
            checks.push(c);
        }
        (lines, checks)
    };
    let (failures, mut checks) = level(thresholds, false);
    let (warnings, warn_checks) = thresholds
        .warn
        .as_deref()
        .map_or_else(Default::default, |w| level(w, true));
    checks.extend(warn_checks);
    GateVerdict {
        passed: Some(failures.is_empty()),
        failures,
        warnings,
        checks,
    }
}

/// Every threshold of a gate that could not be evaluated, each marked as skipped.
pub fn unevaluated(thresholds: &Thresholds, mode: Mode) -> Vec<ThresholdCheck> {
    let levels =
        std::iter::once((thresholds, false)).chain(thresholds.warn.as_deref().map(|w| (w, true)));
    levels
        .flat_map(|(t, warn)| specs(t, warn, mode, |_| (Err("the gate errored".into()), None)))
        .map(|(key, limit, what, value, _)| ThresholdCheck::judge(key, limit, what, value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run::ModeOutcome;
    use std::collections::BTreeMap;

    fn mode(mode: Mode, certified: usize, vra: usize) -> ModeOutcome {
        ModeOutcome {
            mode,
            certified,
            vra: Some(vra),
            refusals: BTreeMap::new(),
            verdicts: vec![],
            refusal_of: vec![],
            degradation_sums: (0.0, 0.0),
            slacks: vec![],
            conservatism: None,
            seconds: 0.0,
            by_class: vec![],
        }
    }

    fn outcome() -> CertifyOutcome {
        CertifyOutcome {
            n: 200,
            correct: Some(190),
            modes: vec![mode(Mode::Real, 180, 176), mode(Mode::Standard, 170, 166)],
            norms_s: 0.0,
            certify_s: 0.0,
            reference_s: 0.0,
            model_refusal: None,
            radii_hash: None,
            notes: Vec::new(),
        }
    }

    /// The key of the (first) threshold judging `figure`.
    fn key_of(figure: Figure) -> &'static str {
        let row = crate::policy::thresholds::THRESHOLDS.iter();
        row.clone()
            .find(|d| d.figure == figure)
            .map_or("", |d| d.key)
    }

    #[test]
    fn every_threshold_gets_its_figure_and_margin() {
        let (vra, drop) = (key_of(Figure::Vra), key_of(Figure::VraDrop));
        let t = (Thresholds::default().with(vra, 80.0))
            .and_then(|t| t.with("max_fp_cost_pp", 4.0))
            .and_then(|t| t.with(drop, 1.0))
            .unwrap();
        let base = BaselineFigures {
            certified_pct: 90.0,
            vra_pct: Some(85.0),
            vra_drop_p: None,
        };
        let v = evaluate(&t, Mode::Standard, &outcome(), Ok(&base));
        assert_eq!(v.passed, Some(false));
        let keys: Vec<_> = v.checks.iter().map(|c| c.key).collect();
        assert_eq!(keys, [vra, "max_fp_cost_pp", drop]);
        // VRA 83% against a minimum of 80: 3 pp inside
        assert_eq!(v.checks[0].value, Some(83.0));
        assert_eq!(v.checks[0].margin_pp, Some(3.0));
        assert_eq!(v.checks[0].passed, Some(true));
        // fp cost 90 - 85 = 5 pp against a maximum of 4: 1 pp outside
        assert_eq!(v.checks[1].margin_pp, Some(-1.0));
        assert_eq!(v.checks[2].value, Some(2.0));
        assert_eq!(
            v.failures,
            [
                "floating-point cost 5.00 pp > max_fp_cost_pp 4".to_string(),
                format!("standard VRA dropped 2.00 pp (baseline 85.00% -> now 83.00%) > {drop} 1")
            ]
        );
        // no comparable baseline: the drop is not evaluated, with the reason
        let v = evaluate(&t, Mode::Standard, &outcome(), Err("refused".into()));
        assert_eq!(v.checks[2].passed, None);
        assert_eq!(v.checks[2].skipped.as_deref(), Some("refused"));
        assert_eq!(v.failures.len(), 1);
        // a mode that was not computed is not evaluated rather than a panic
        let v = evaluate(&t, Mode::Best, &outcome(), Err("none".into()));
        assert!(v.checks.iter().all(|c| c.passed.is_none()), "{v:?}");
    }

    #[test]
    fn the_warn_level_warns_and_never_fails() {
        let vra = ThresholdDef::named(key_of(Figure::Vra)).unwrap();
        let mut t = Thresholds::default().with(vra.key, 80.0).unwrap();
        let warn = (Thresholds::default().with(vra.key, 85.0))
            .and_then(|t| t.with("max_fp_cost_pp", 10.0))
            .unwrap();
        t.warn = Some(Box::new(warn));
        let v = evaluate(&t, Mode::Standard, &outcome(), Err("none".into()));
        assert_eq!(v.passed, Some(true));
        assert!(v.failures.is_empty());
        assert_eq!(
            v.warnings,
            [format!("standard VRA 83.00% < {} 85", vra.warn_key)]
        );
        let keys: Vec<_> = v.checks.iter().map(|c| c.key).collect();
        assert_eq!(keys, [vra.key, vra.warn_key, "warn_max_fp_cost_pp"]);
        assert_eq!(v.checks[1].margin_pp, Some(-2.0));
        assert_eq!(v.checks[2].passed, Some(true));
        // only a warn level: the gate is judged (passed) rather than report-only
        let mut only = Thresholds::default();
        only.warn = t.warn.clone();
        let v = evaluate(&only, Mode::Standard, &outcome(), Err("none".into()));
        assert_eq!((v.passed, v.warnings.len()), (Some(true), 1));
        // an errored gate lists both levels as not evaluated
        let keys: Vec<_> = unevaluated(&t, Mode::Standard)
            .iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(keys, [vra.key, vra.warn_key, "warn_max_fp_cost_pp"]);
    }
}
