//! The robustness curve of a gate as reported: certified and VRA counts per radius and mode,
//! and quantiles of the per-point certified radii. Built once from the engine's
//! [`CurveOutcome`]; the console table, the step summary's Mermaid chart and the SVG plot render
//! it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::run::CurveOutcome;
use crate::gate::verdict::{pct, round4};

/// Counts at one radius.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePointReport {
    /// The radius as written (decimal).
    pub epsilon: String,
    /// Points certified.
    pub certified: usize,
    /// Certified rate in percent of all points.
    pub certified_pct: f64,
    /// Points certified and correctly classified (null without labels).
    pub vra: Option<usize>,
    /// VRA in percent (null without labels).
    pub vra_pct: Option<f64>,
}

/// Quantiles of the per-point certified radii of one mode (sound lower bounds, rounded down to
/// six significant digits; a point not certified at radius 0 counts as 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RadiusQuantiles {
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
}

/// A gate's curve: in JSON, `{"<mode>": [{"epsilon": "0.1", "certified": N, "vra": N, ...}],
/// ..., "radius_quantiles": {"<mode>": {...}}, "seconds": s}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurveReport {
    /// Per mode, the counts at every radius of the grid (in grid order).
    #[serde(flatten)]
    pub modes: BTreeMap<String, Vec<CurvePointReport>>,
    /// Per mode, quantiles of the certified radii.
    pub radius_quantiles: BTreeMap<String, RadiusQuantiles>,
    /// Seconds spent on the curve (searches and grid certificates).
    pub seconds: f64,
}

impl CurveReport {
    /// The report of `curve` over `n` points.
    pub fn new(curve: &CurveOutcome, n: usize) -> CurveReport {
        let mut modes = BTreeMap::new();
        let mut radius_quantiles = BTreeMap::new();
        for m in &curve.modes {
            let points = m
                .points
                .iter()
                .map(|p| CurvePointReport {
                    epsilon: p.epsilon.clone(),
                    certified: p.certified,
                    certified_pct: round4(pct(p.certified, n)),
                    vra: p.vra,
                    vra_pct: p.vra.map(|v| round4(pct(v, n))),
                })
                .collect();
            modes.insert(m.mode.name().to_string(), points);
            let q = |p: f64| round_down_6(m.radius_quantile(p));
            radius_quantiles.insert(
                m.mode.name().to_string(),
                RadiusQuantiles {
                    p10: q(0.10),
                    p25: q(0.25),
                    p50: q(0.50),
                    p75: q(0.75),
                    p90: q(0.90),
                },
            );
        }
        CurveReport {
            modes,
            radius_quantiles,
            seconds: curve.seconds,
        }
    }

    /// The grid radii (as written), from any mode (every mode has the same grid).
    pub fn radii(&self) -> Vec<String> {
        self.modes
            .values()
            .next()
            .map(|v| v.iter().map(|p| p.epsilon.clone()).collect())
            .unwrap_or_default()
    }

    /// The figure a chart shows for `mode`: VRA % when known, else certified %.
    pub fn series(&self, mode: &str) -> Vec<f64> {
        self.modes
            .get(mode)
            .map(|v| {
                v.iter()
                    .map(|p| p.vra_pct.unwrap_or(p.certified_pct))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the series are VRA (labels known) rather than certified rates.
    pub fn shows_vra(&self) -> bool {
        self.modes
            .values()
            .flatten()
            .next()
            .is_some_and(|p| p.vra_pct.is_some())
    }
}

/// `x >= 0` rounded down to six significant digits (a lower bound stays one).
fn round_down_6(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x.max(0.0);
    }
    let e = x.log10().floor() as i32 - 5;
    let scale = 10f64.powi(-e);
    let r = (x * scale).floor() / scale;
    if r > x {
        r.next_down()
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_down_keeps_a_lower_bound() {
        for x in [0.123456789, 1.0, 3.3333333, 1e-7 * 7.77777777, 12345.6789] {
            let r = round_down_6(x);
            assert!(r <= x, "{x} -> {r}");
            assert!((x - r) / x < 2e-5, "{x} -> {r}");
        }
        assert_eq!(round_down_6(0.0), 0.0);
    }
}
