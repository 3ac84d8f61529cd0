//! The policy as written: the serde schema (`deny_unknown_fields`, so an unknown key is named
//! with its position), one `Raw*` struct per table, `[[gate]]`'s threshold keys generated from
//! the registry ([`super::thresholds`]), and the format keys' parser.

use std::path::Path;

use serde::Deserialize;

use crate::arith::format::Format;
use crate::arith::runtime::RuntimeKeys;
use crate::error::LipfpError;

use super::thresholds::Thresholds;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    #[serde(default)]
    pub(super) model: Option<RawModel>,
    #[serde(default)]
    pub(super) data: Option<RawData>,
    /// Accepted only to refuse it with a precise message (the norm cache is gone).
    #[serde(default)]
    pub(super) cache: Option<toml::Value>,
    #[serde(default)]
    pub(super) baseline: Option<RawBaseline>,
    #[serde(default, rename = "gate")]
    pub(super) gates: Vec<RawGate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBaseline {
    #[serde(default)]
    pub(super) report: Option<String>,
    #[serde(default)]
    pub(super) certificates: Option<String>,
    #[serde(default)]
    pub(super) required: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) format: Option<String>,
    #[serde(default)]
    pub(super) accumulate: Option<String>,
    #[serde(default)]
    pub(super) ftz: Option<bool>,
    #[serde(default)]
    pub(super) gram_iterations: Option<u32>,
    #[serde(default)]
    pub(super) runtime: Option<String>,
    #[serde(default)]
    pub(super) gpu: Option<String>,
    #[serde(default)]
    pub(super) tf32: Option<bool>,
    #[serde(default)]
    pub(super) reduced_precision_reduction: Option<bool>,
    #[serde(default)]
    pub(super) operand_rounding: Option<String>,
    #[serde(default)]
    pub(super) decision: Option<String>,
}

impl RawModel {
    pub(super) fn runtime_keys(&self) -> RuntimeKeys<'_> {
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
pub(super) struct RawData {
    pub(super) inputs: Option<String>,
    #[serde(default)]
    pub(super) labels: Option<String>,
    #[serde(default)]
    pub(super) label_column: Option<String>,
    #[serde(default)]
    pub(super) input_range: Option<toml::Value>,
}

/// One `[[gate]]` as written: the gate's own keys, then one key per threshold of each level,
/// generated from `threshold_rows!` so that serde rejects unknown keys with their
/// position.
macro_rules! raw_gate {
    ($($(#[doc = $doc:literal])* $key:ident / $warn:ident => $figure:ident, $direction:ident,
       $unit:ident, labels: $labels:literal, legacy: $legacy:ident;)*) => {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawGate {
            pub(super) name: toml::Spanned<String>,
            #[serde(default)]
            pub(super) model: Option<String>,
            #[serde(default)]
            pub(super) inputs: Option<String>,
            #[serde(default)]
            pub(super) labels: Option<String>,
            #[serde(default)]
            pub(super) label_column: Option<String>,
            #[serde(default)]
            pub(super) format: Option<String>,
            #[serde(default)]
            pub(super) accumulate: Option<String>,
            #[serde(default)]
            pub(super) ftz: Option<bool>,
            #[serde(default)]
            pub(super) runtime: Option<String>,
            #[serde(default)]
            pub(super) gpu: Option<String>,
            #[serde(default)]
            pub(super) tf32: Option<bool>,
            #[serde(default)]
            pub(super) reduced_precision_reduction: Option<bool>,
            #[serde(default)]
            pub(super) operand_rounding: Option<String>,
            #[serde(default)]
            pub(super) decision: Option<String>,
            #[serde(default)]
            pub(super) epsilon: Option<toml::Value>,
            #[serde(default)]
            pub(super) epsilons: Option<String>,
            #[serde(default)]
            pub(super) norm: Option<String>,
            #[serde(default)]
            pub(super) input_range: Option<toml::Value>,
            #[serde(default)]
            pub(super) mode: Option<String>,
            #[serde(default)]
            pub(super) min_class_points: Option<u64>,
            #[serde(default)]
            pub(super) curve: Option<toml::Value>,
            #[serde(default)]
            pub(super) attack: Option<bool>,
            #[serde(default)]
            pub(super) local_budget_s: Option<f64>,
            #[serde(default)]
            pub(super) best_local: Option<bool>,
            #[serde(default)]
            pub(super) complete_budget_s: Option<f64>,
            #[serde(default)]
            pub(super) complete_total_s: Option<f64>,
            #[serde(default)]
            pub(super) complete_subdomains: Option<u64>,
            #[serde(default)]
            pub(super) complete_memory_mib: Option<u64>,
            $(
                #[serde(default)]
                pub(super) $key: Option<f64>,
                #[serde(default)]
                pub(super) $warn: Option<f64>,
            )*
        }

        impl RawGate {
            /// The thresholds as written, in registry order, the warn level nested.
            pub(super) fn thresholds(&self) -> Thresholds {
                let warn = Thresholds::from_limits([$(self.$warn),*]);
                let mut t = Thresholds::from_limits([$(self.$key),*]);
                t.min_class_points = self.min_class_points;
                t.warn = (!warn.is_empty()).then(|| Box::new(warn));
                t
            }
        }
    };
}
super::thresholds::threshold_rows!(raw_gate);

/// Format `text` of key `key` in section `at` of the policy at `path`.
pub(super) fn parse_format(
    path: &Path,
    text: &str,
    at: &str,
    key: &str,
) -> Result<Format, LipfpError> {
    text.parse()
        .map_err(|m: String| LipfpError::policy(path, format!("{at} {key}: {m}")))
}
