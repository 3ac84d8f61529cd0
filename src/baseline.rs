//! Baseline regression: compare a gate with the same gate in a previous JSON report (for
//! retrained weights: "did robustness drop?").

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::LipfpError;

/// A gate's figures in the baseline report, for the gate's threshold mode.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineFigures {
    /// Certified rate in percent.
    pub certified_pct: f64,
    /// VRA in percent, when the baseline had labels.
    pub vra_pct: Option<f64>,
}

/// A previous JSON report, indexed by gate name and mode name.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    gates: BTreeMap<String, BTreeMap<String, BaselineFigures>>,
}

impl Baseline {
    /// Read a JSON report written by `--json`.
    pub fn load(path: &Path) -> Result<Baseline, LipfpError> {
        let bytes =
            crate::files::read_limited(path, "baseline report", crate::files::BASELINE_LIMIT)?;
        let text = String::from_utf8_lossy(&bytes);
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            LipfpError::data(path, format!("baseline is not a lipfp JSON report: {e}"))
        })?;
        let gates = v["gates"]
            .as_array()
            .ok_or_else(|| LipfpError::data(path, "baseline has no `gates` array"))?;
        let mut out = Baseline::default();
        for g in gates {
            let Some(name) = g["name"].as_str() else {
                continue;
            };
            let Some(modes) = g["modes"].as_object() else {
                continue;
            };
            let figures = modes
                .iter()
                .filter_map(|(mode, m)| {
                    Some((
                        mode.clone(),
                        BaselineFigures {
                            certified_pct: m["certified_pct"].as_f64()?,
                            vra_pct: m["vra_pct"].as_f64(),
                        },
                    ))
                })
                .collect();
            out.gates.insert(name.to_string(), figures);
        }
        Ok(out)
    }

    /// The figures of gate `name` in `mode`, when the baseline has them.
    pub fn figures(&self, name: &str, mode: &str) -> Option<&BaselineFigures> {
        self.gates.get(name)?.get(mode)
    }
}
