//! Thresholds in certificate files: the policy's thresholds as `proto/lipfp.proto`'s
//! `Thresholds` message and back (the warn level nested), field for field.

use crate::policy::Thresholds;
use crate::proto_gen;

/// A gate's thresholds as a certificate file records them (the warn level nested).
pub(super) fn to_proto(t: &Thresholds) -> proto_gen::Thresholds {
    proto_gen::Thresholds {
        min_accuracy_pct: t.min_accuracy_pct,
        min_certified_pct: t.min_certified_pct,
        min_vra_pct: t.min_vra_pct,
        max_fp_cost_pp: t.max_fp_cost_pp,
        max_vra_drop_pp: t.max_vra_drop_pp,
        max_certified_drop_pp: t.max_certified_drop_pp,
        min_class_vra_pct: t.min_class_vra_pct,
        min_class_certified_pct: t.min_class_certified_pct,
        min_class_points: t.min_class_points,
        max_vra_drop_significance: t.max_vra_drop_significance,
        warn: t.warn.as_deref().map(|w| Box::new(to_proto(w))),
    }
}

/// The thresholds a certificate file records (none where absent).
pub(super) fn from_proto(t: Option<&proto_gen::Thresholds>) -> Thresholds {
    t.map(|t| Thresholds {
        min_accuracy_pct: t.min_accuracy_pct,
        min_certified_pct: t.min_certified_pct,
        min_vra_pct: t.min_vra_pct,
        max_fp_cost_pp: t.max_fp_cost_pp,
        max_vra_drop_pp: t.max_vra_drop_pp,
        max_certified_drop_pp: t.max_certified_drop_pp,
        min_class_vra_pct: t.min_class_vra_pct,
        min_class_certified_pct: t.min_class_certified_pct,
        min_class_points: t.min_class_points,
        max_vra_drop_significance: t.max_vra_drop_significance,
        warn: t.warn.as_deref().map(|w| Box::new(from_proto(Some(w)))),
    })
    .unwrap_or_default()
}
