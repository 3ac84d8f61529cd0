//! Baseline regression: compare a gate with the same gate in a previous JSON report or in a
//! previous run's certificate files (for retrained weights: "did robustness drop?"), like with
//! like only: the radius, the mode, the deployment format, the execution model and the test set
//! must be the same, or the comparison is refused with the reason. Certificates also give each
//! point's verified robustness, for the per-point regression ([`crate::gate::regression`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::LipfpError;
use crate::gate::curve::CurveReport;
use crate::gate::gate_report::ModeReport;
use crate::policy::{parse_decimal_exact, Thresholds};

/// The JSON report's schema version: `report::json` writes it as `schema`, and a baseline of
/// another schema does not compare. Raise it when a field the baseline reads changes name or
/// meaning.
pub const REPORT_SCHEMA: u64 = 1;

/// A gate's figures in the baseline report, for the gate's threshold mode.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineFigures {
    /// Certified rate in percent.
    pub certified_pct: f64,
    /// VRA in percent, when the baseline had labels.
    pub vra_pct: Option<f64>,
    /// McNemar's p-value of a VRA drop against this run, from the per-point regression (only
    /// with a certificate baseline; set by the caller).
    pub vra_drop_p: Option<f64>,
}

/// A gate of a certificate baseline: what it certified, its figures per mode, and per mode each
/// point's verified robustness (certified and correctly classified) with the true classes.
#[derive(Clone, Debug)]
pub struct CertificateGate {
    /// Gate name.
    pub name: String,
    /// What was certified.
    pub identity: Identity,
    /// Figures per mode.
    pub modes: BTreeMap<String, BaselineFigures>,
    /// Per mode, each point's verified robustness (test-set order).
    pub vra: BTreeMap<String, Vec<bool>>,
    /// Each point's true class.
    pub labels: Vec<usize>,
}

/// What a gate's figures are about: two gates are compared only when these agree. Read back
/// from a JSON report by the names [`crate::gate::gate_report::GateReport`] writes them under.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Identity {
    /// The radius as written (uniform radius).
    pub epsilon: Option<String>,
    /// SHA-256 of the per-instance radii.
    pub epsilons_sha256: Option<String>,
    /// Deployment format.
    pub format: Option<String>,
    /// Execution model.
    pub execution: Option<String>,
    /// SHA-256 of the converted test inputs and labels.
    pub test_set_hash: Option<String>,
    /// The set a radius stands for (`l2`, `linf in [0, 1]`: the norm and the input range).
    pub ball: Option<String>,
}

/// Per mode each point's verified robustness, and each point's true class.
type PointFlags = (BTreeMap<String, Vec<bool>>, Vec<usize>);

/// One gate of the baseline report.
#[derive(Clone, Debug, Default)]
struct BaselineGate {
    identity: Identity,
    modes: BTreeMap<String, BaselineFigures>,
    /// The gate's robustness curve, when the baseline has one (shown beside the current one).
    curve: Option<CurveReport>,
    /// Per mode each point's verified robustness, and the true classes (certificate baselines).
    points: Option<PointFlags>,
    /// Modes the report lists whose figures cannot be read (no numeric `certified_pct`).
    unreadable: Vec<String>,
}

/// A previous JSON report, indexed by gate name.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    path: PathBuf,
    gates: BTreeMap<String, BaselineGate>,
    /// The report's `schema` (absent in reports written before it was versioned, which have the
    /// fields of schema 1).
    schema: Option<u64>,
}

/// A JSON report as a baseline reads it: its schema and its gates (a gate that cannot be read
/// is left out, and so never compares).
#[derive(Deserialize)]
struct ReportFile {
    #[serde(default)]
    schema: Option<u64>,
    gates: Vec<serde_json::Value>,
}

/// One gate of a JSON report as a baseline reads it back, by the names
/// [`crate::gate::gate_report::GateReport`] writes: its name, identity, modes (each read into a
/// [`ModeReport`] on its own, so that one unreadable mode is named rather than losing the
/// gate) and curve.
#[derive(Deserialize)]
struct ReportedGate {
    name: String,
    #[serde(flatten)]
    identity: Identity,
    #[serde(default)]
    modes: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    curve: Option<serde_json::Value>,
}

/// `what` differs: the reason naming both values (hashes shortened to 12 digits).
fn differs(what: &str, before: &Option<String>, now: &Option<String>) -> String {
    let show = |x: &Option<String>| match x {
        Some(s) if s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("{}…", &s[..12])
        }
        Some(s) => format!("`{s}`"),
        None => "not recorded".into(),
    };
    format!(
        "{what} differs (baseline {}, now {})",
        show(before),
        show(now)
    )
}

/// What a baseline that does not compare with a gate (`why`: [`Baseline::compare`]'s reason)
/// does to the gate.
#[derive(Clone, Debug, PartialEq)]
pub enum Unusable {
    /// The gate errors: its drop thresholds need the baseline and `required = true`.
    Error(String),
    /// The gate warns: its drop thresholds are not evaluated (never a quiet pass).
    Warning(String),
    /// A note: no threshold of the gate needs the baseline.
    Note(String),
}

impl Unusable {
    /// The consequence for a gate with `thresholds` under `[baseline] required`.
    pub fn of(why: String, thresholds: &Thresholds, required: bool) -> Unusable {
        match (thresholds.uses_baseline(), required) {
            (true, true) => Unusable::Error(format!("{why} ([baseline] required = true)")),
            (true, false) => {
                Unusable::Warning(format!("{why}; the drop thresholds are not evaluated"))
            }
            (false, _) => Unusable::Note(why),
        }
    }
}

impl Baseline {
    /// Read a JSON report written by `--json`.
    pub fn load(path: &Path) -> Result<Baseline, LipfpError> {
        let bytes =
            crate::files::read_limited(path, "baseline report", crate::files::BASELINE_LIMIT)?;
        let text_ = String::from_utf8_lossy(&bytes);
        let file: ReportFile = serde_json::from_str(&text_).map_err(|e| {
            LipfpError::data(path, format!("baseline is not a lipfp JSON report: {e}"))
        })?;
        let mut out = Baseline {
            path: path.to_path_buf(),
            gates: BTreeMap::new(),
            schema: file.schema,
        };
        for g in file.gates {
            let Ok(g) = ReportedGate::deserialize(g) else {
                continue;
            };
            let modes: BTreeMap<String, BaselineFigures> = (g.modes.iter())
                .filter_map(|(mode, m)| {
                    let m = ModeReport::deserialize(m).ok()?;
                    let figures = BaselineFigures {
                        certified_pct: m.certified_pct,
                        vra_pct: m.vra_pct,
                        vra_drop_p: None,
                    };
                    Some((mode.clone(), figures))
                })
                .collect();
            let unreadable = (g.modes.keys())
                .filter(|mode| !modes.contains_key(*mode))
                .cloned()
                .collect();
            let identity = Identity {
                // reports written before input sets were named certified l2 balls
                ball: g.identity.ball.or_else(|| Some("l2".to_string())),
                ..g.identity
            };
            out.gates.insert(
                g.name,
                BaselineGate {
                    identity,
                    modes,
                    curve: g.curve.and_then(|c| serde_json::from_value(c).ok()),
                    points: None,
                    unreadable,
                },
            );
        }
        Ok(out)
    }

    /// A baseline made of a previous run's certificate files (read and merged by the caller).
    pub fn from_certificates(path: &Path, gates: Vec<CertificateGate>) -> Baseline {
        let gates = gates
            .into_iter()
            .map(|g| {
                let gate = BaselineGate {
                    identity: g.identity,
                    modes: g.modes,
                    curve: None,
                    points: Some((g.vra, g.labels)),
                    unreadable: Vec::new(),
                };
                (g.name, gate)
            })
            .collect();
        Baseline {
            path: path.to_path_buf(),
            gates,
            schema: None,
        }
    }

    /// The baseline file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Each point's verified robustness in `mode` of gate `name` and the true classes, when the
    /// baseline has them (certificate baselines); call after [`Baseline::compare`] accepted it.
    pub fn points(&self, name: &str, mode: &str) -> Option<(&[bool], &[usize])> {
        let (vra, labels) = self.gates.get(name)?.points.as_ref()?;
        Some((vra.get(mode)?, labels))
    }

    /// The curve of gate `name` in the baseline, when it certified the same network execution on
    /// the same test set as `now` (format, execution model, test-set hash; the radius does not
    /// matter to a curve). For the charts only: no threshold reads it.
    pub fn curve(&self, name: &str, now: &Identity) -> Option<&CurveReport> {
        let g = self.gates.get(name)?;
        let same = g.identity.format == now.format
            && g.identity.execution == now.execution
            && g.identity.test_set_hash == now.test_set_hash
            && g.identity.ball == now.ball
            && now.test_set_hash.is_some();
        same.then_some(g.curve.as_ref()).flatten()
    }

    /// The figures of gate `name` in `mode` when the baseline's gate certified the same thing
    /// as `now` (radius, format, execution model, test set); otherwise the reason the
    /// comparison is refused, naming the baseline file, the gate and what differs.
    pub fn compare(
        &self,
        name: &str,
        mode: &str,
        now: &Identity,
    ) -> Result<&BaselineFigures, String> {
        let refuse = |why: String| {
            format!(
                "baseline comparison refused: in {}, gate `{name}`: {why}",
                self.path.display()
            )
        };
        if let Some(schema) = self.schema.filter(|s| *s != REPORT_SCHEMA) {
            return Err(refuse(format!(
                "the report has schema {schema}; this lipfp reads schema {REPORT_SCHEMA}"
            )));
        }
        let g = self
            .gates
            .get(name)
            .ok_or_else(|| refuse("no gate of that name".into()))?;
        let before = &g.identity;
        let same_radius = match (&before.epsilon, &now.epsilon) {
            (Some(a), Some(b)) => match (parse_decimal_exact(a), parse_decimal_exact(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            },
            (None, None) => {
                before.epsilons_sha256.is_some() && before.epsilons_sha256 == now.epsilons_sha256
            }
            _ => false,
        };
        if !same_radius {
            let show = |i: &Identity| match (&i.epsilon, &i.epsilons_sha256) {
                (Some(e), _) => Some(format!("eps {e}")),
                (None, Some(h)) => Some(format!(
                    "per-instance radii {}…",
                    h.chars().take(12).collect::<String>()
                )),
                (None, None) => None,
            };
            return Err(refuse(differs("the radius", &show(before), &show(now))));
        }
        for (what, b, n) in [
            ("the format", &before.format, &now.format),
            ("the execution model", &before.execution, &now.execution),
            ("the input set (norm and range)", &before.ball, &now.ball),
            (
                "the test set (hash of the converted inputs and labels)",
                &before.test_set_hash,
                &now.test_set_hash,
            ),
        ] {
            if b.is_none() || b != n {
                return Err(refuse(differs(what, b, n)));
            }
        }
        if g.unreadable.iter().any(|m| m == mode) {
            return Err(refuse(format!(
                "mode {mode} has no readable figures (no numeric `certified_pct`: a report of \
                 another lipfp version or schema?)"
            )));
        }
        g.modes.get(mode).ok_or_else(|| {
            let have: Vec<&str> = g.modes.keys().map(String::as_str).collect();
            refuse(format!(
                "no figures in mode {mode} (it has: {})",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            ))
        })
    }
}
