//! `lipfp inspect`'s runtime table: for each deployment target, the execution model it maps the
//! model's format to, each dense layer's error terms under it, and whether its certificates are
//! vacuous (or why the target cannot be modelled).

use std::fmt::Write;

use serde::Serialize;

use crate::arith::format::Format;
use crate::arith::runtime::{Runtime, RuntimeChoice};
use crate::bounds::certify::ModelBounds;
use crate::bounds::norms::LayerNorms;
use crate::onnx::model::DenseNet;

/// One dense layer's error terms under a runtime: `|y_hat_i - y_i| <= rel_w |w_i||z| + ...`,
/// and the constant part `beta_const` of its deviation recursion.
#[derive(Clone, Debug, Serialize)]
pub struct LayerTerms {
    /// 1-based layer.
    pub layer: usize,
    /// `rel_w` (upper bound).
    pub rel_w: f64,
    /// `rel_b ||b|| + abs sqrt(m)` (upper bound).
    pub beta_const: f64,
}

/// One runtime's terms for the model.
#[derive(Clone, Debug, Serialize)]
pub struct RuntimeTerms {
    /// The runtime's name.
    pub runtime: String,
    /// The execution model, when the runtime can be modelled for the format.
    pub execution: Option<String>,
    /// Why the runtime cannot be modelled for the format.
    pub refused: Option<String>,
    /// Per dense layer.
    pub layers: Vec<LayerTerms>,
    /// Why every certificate for this runtime is vacuous, if it is.
    pub vacuous: Option<String>,
    /// The settings the certificate depends on.
    pub depends_on: Vec<String>,
}

/// The terms of `choices` (every runtime at its defaults when empty) for `net` in `format`.
pub fn runtime_terms(
    net: &DenseNet,
    norms: &[LayerNorms],
    format: Format,
    choices: &[RuntimeChoice],
) -> Vec<RuntimeTerms> {
    let all: Vec<RuntimeChoice> = if choices.is_empty() {
        Runtime::ALL.into_iter().map(RuntimeChoice::new).collect()
    } else {
        choices.to_vec()
    };
    all.into_iter()
        .map(|c| {
            let mut t = RuntimeTerms {
                runtime: c.runtime.name().to_string(),
                execution: None,
                refused: None,
                layers: Vec::new(),
                vacuous: None,
                depends_on: Vec::new(),
            };
            match c.deployment(format, None, false) {
                Err(why) => t.refused = Some(why),
                Ok(d) => {
                    let bounds = ModelBounds::new(net, norms, &d.execution);
                    t.layers = bounds
                        .layers
                        .iter()
                        .enumerate()
                        .filter_map(|(k, lb)| {
                            lb.rounding.map(|r| r.rel_w).map(|rel_w| LayerTerms {
                                layer: k + 1,
                                rel_w,
                                beta_const: lb.beta_const,
                            })
                        })
                        .collect();
                    t.vacuous = bounds.vacuous;
                    t.execution = Some(d.execution.to_string());
                    t.depends_on = d.depends_on;
                }
            }
            t
        })
        .collect()
}

/// The runtime table of an inspection.
pub fn render_runtimes(out: &mut String, terms: &[RuntimeTerms]) {
    let _ = writeln!(out, "\nruntimes (docs/runtimes.md; --runtime R for one):");
    for t in terms {
        if let Some(why) = &t.refused {
            let _ = writeln!(out, "  {:<17} REFUSED: {why}", t.runtime);
            continue;
        }
        let rel: Vec<String> = t
            .layers
            .iter()
            .map(|l| {
                format!(
                    "L{} rel_w {:.3e} beta {:.3e}",
                    l.layer, l.rel_w, l.beta_const
                )
            })
            .collect();
        let state = t
            .vacuous
            .as_ref()
            .map_or(String::new(), |v| format!("  VACUOUS: {v}"));
        let _ = writeln!(out, "  {:<17} {}{state}", t.runtime, rel.join("; "));
        for d in &t.depends_on {
            let _ = writeln!(out, "  {:<17}   {d}", "");
        }
    }
}
