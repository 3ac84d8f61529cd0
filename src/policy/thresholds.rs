//! The threshold registry: every threshold a gate can set is one row of `threshold_rows!`,
//! with its policy key and warn-level key, the figure it judges, its direction and unit,
//! whether it needs labels, and where certificate files of earlier versions kept it. The policy
//! schema (`RawGate`), the limits' validation, the gate's evaluation
//! (`gate::verdict`, by [`Figure`]), every reporter's rendering and certificate files
//! (`limits`, keyed by the policy key) all follow from the rows. Adding a threshold over a
//! figure the gate computes is one row; over a new figure, one row and its arm in
//! `gate::verdict::figure`.

use std::collections::BTreeMap;

use crate::bounds::certify::Mode;
use crate::proto_gen;

/// Every threshold, in the policy's order: `key / warn_key => figure, direction, unit,
/// labels: whether a gate must have labels to set it, legacy: proto` when certificate files
/// record it in the `Thresholds` field of the same name (so lipfp versions before `limits` read
/// it too), `none` for thresholds added since (recorded in `limits`). Calls `$then!` with the
/// rows.
macro_rules! threshold_rows {
    ($then:ident) => {
        $then! {
            /// Minimum clean accuracy.
            min_accuracy_pct / warn_min_accuracy_pct => Accuracy, AtLeast, Percent, labels: true, legacy: proto;
            /// Minimum certified rate of the gate's mode.
            min_certified_pct / warn_min_certified_pct => Certified, AtLeast, Percent, labels: false, legacy: proto;
            /// Minimum verified robust accuracy of the gate's mode.
            min_vra_pct / warn_min_vra_pct => Vra, AtLeast, Percent, labels: true, legacy: proto;
            /// Maximum floating-point cost: real certified rate minus the mode's, in points.
            max_fp_cost_pp / warn_max_fp_cost_pp => FpCost, AtMost, Points, labels: false, legacy: proto;
            /// Maximum drop of the mode's VRA against the baseline report's gate of the same name.
            max_vra_drop_pp / warn_max_vra_drop_pp => VraDrop, AtMost, Points, labels: true, legacy: proto;
            /// Maximum drop of the mode's certified rate against the baseline.
            max_certified_drop_pp / warn_max_certified_drop_pp => CertifiedDrop, AtMost, Points, labels: false, legacy: proto;
            /// Minimum VRA of every true class (with at least `min_class_points` points).
            min_class_vra_pct / warn_min_class_vra_pct => ClassVra, AtLeast, Percent, labels: true, legacy: proto;
            /// Minimum certified rate of every true class (with at least `min_class_points` points).
            min_class_certified_pct / warn_min_class_certified_pct => ClassCertified, AtLeast, Percent, labels: true, legacy: proto;
            /// Significance level: a VRA drop against a certificate baseline fails only when
            /// McNemar's exact p-value on the points lost and gained is below it.
            max_vra_drop_significance / warn_max_vra_drop_significance => VraDropSignificance, AtLeast, Significance, labels: false, legacy: proto;
        }
    };
}
pub(crate) use threshold_rows;

/// The figure a threshold judges; `gate::verdict` computes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Clean accuracy, in percent.
    Accuracy,
    /// The mode's certified rate.
    Certified,
    /// The mode's verified robust accuracy.
    Vra,
    /// Real certified rate minus the mode's, in points.
    FpCost,
    /// Baseline VRA minus this run's, in points.
    VraDrop,
    /// Baseline certified rate minus this run's, in points.
    CertifiedDrop,
    /// The weakest judged class's VRA.
    ClassVra,
    /// The weakest judged class's certified rate.
    ClassCertified,
    /// McNemar's exact p-value of the VRA drop against a certificate baseline.
    VraDropSignificance,
}

impl Figure {
    /// What the figure measures in `mode`, as reports name it.
    pub fn measured(self, mode: Mode) -> String {
        match self {
            Figure::Accuracy => "accuracy".into(),
            Figure::Certified => format!("{mode} certified"),
            Figure::Vra => format!("{mode} VRA"),
            Figure::FpCost => "floating-point cost".into(),
            Figure::VraDrop | Figure::VraDropSignificance => format!("{mode} VRA drop"),
            Figure::CertifiedDrop => format!("{mode} certified drop"),
            Figure::ClassVra => format!("{mode} VRA of the weakest class"),
            Figure::ClassCertified => format!("{mode} certified rate of the weakest class"),
        }
    }

    /// Whether the figure compares this run with a baseline.
    pub fn uses_baseline(self) -> bool {
        matches!(
            self,
            Figure::VraDrop | Figure::CertifiedDrop | Figure::VraDropSignificance
        )
    }

    /// Whether the figure is the weakest class's (its failure names the classes below).
    pub fn per_class(self) -> bool {
        matches!(self, Figure::ClassVra | Figure::ClassCertified)
    }
}

/// Which side of its limit a threshold's figure must lie on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The figure must be at least the limit (a `min_*` key, or a significance level).
    AtLeast,
    /// The figure must be at most the limit.
    AtMost,
}

/// The unit of a threshold's limit and figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A percentage, 0..=100.
    Percent,
    /// Percentage points, 0..=100.
    Points,
    /// A significance level in (0, 1], met by a p-value at or above it.
    Significance,
}

/// One row of the registry.
#[derive(Debug)]
pub struct ThresholdDef {
    /// The policy key, e.g. `min_certified_pct`.
    pub key: &'static str,
    /// The warn-level key, `warn_` and the key.
    pub warn_key: &'static str,
    /// The figure judged.
    pub figure: Figure,
    /// Which side of the limit passes.
    pub direction: Direction,
    /// The unit of limit and figure.
    pub unit: Unit,
    /// Whether the figure needs labels (a gate without labels may not set it).
    pub needs_labels: bool,
    /// The field of the same name in certificate files (read, and written for readers of
    /// earlier versions), for the thresholds that have one.
    legacy: Option<LegacyField>,
}

/// A named `Thresholds` field: its reader and its writer.
type LegacyField = (
    fn(&proto_gen::Thresholds) -> Option<f64>,
    fn(&mut proto_gen::Thresholds, f64),
);

macro_rules! legacy_reader {
    (proto, $key:ident) => {
        Some((
            |p: &proto_gen::Thresholds| p.$key,
            |p: &mut proto_gen::Thresholds, v| p.$key = Some(v),
        ))
    };
    (none, $key:ident) => {
        None
    };
}

macro_rules! registry {
    ($($(#[doc = $doc:literal])* $key:ident / $warn:ident => $figure:ident, $direction:ident,
       $unit:ident, labels: $labels:literal, legacy: $legacy:ident;)*) => {
        /// Every threshold, in the policy's order (see `threshold_rows!`).
        pub static THRESHOLDS: &[ThresholdDef] = &[$(ThresholdDef {
            key: stringify!($key),
            warn_key: stringify!($warn),
            figure: Figure::$figure,
            direction: Direction::$direction,
            unit: Unit::$unit,
            needs_labels: $labels,
            legacy: legacy_reader!($legacy, $key),
        }),*];
    };
}
threshold_rows!(registry);

/// Rows are equal when their keys are (a key names one row).
impl PartialEq for ThresholdDef {
    fn eq(&self, other: &ThresholdDef) -> bool {
        self.key == other.key
    }
}

impl ThresholdDef {
    /// The row whose policy key is `key` (not a `warn_*` key).
    pub fn named(key: &str) -> Option<&'static ThresholdDef> {
        THRESHOLDS.iter().find(|d| d.key == key)
    }

    /// The row and level of a policy key: `(row, true)` for its `warn_*` key.
    pub fn of_policy_key(key: &str) -> Option<(&'static ThresholdDef, bool)> {
        THRESHOLDS.iter().find_map(|d| {
            (d.key == key)
                .then_some((d, false))
                .or((d.warn_key == key).then_some((d, true)))
        })
    }

    /// The key of this threshold at a level (`warn`: the `warn_*` key).
    pub fn key_at(&self, warn: bool) -> &'static str {
        if warn {
            self.warn_key
        } else {
            self.key
        }
    }

    /// Why `limit` is not a valid limit of this threshold: percentages and points lie in
    /// 0..=100, a significance level in (0, 1].
    pub fn check_limit(&self, limit: f64) -> Result<(), String> {
        match self.unit {
            Unit::Significance if !(limit > 0.0 && limit <= 1.0) => {
                Err("a significance level, must be in (0, 1] (e.g. 0.05)".into())
            }
            Unit::Percent | Unit::Points if !(0.0..=100.0).contains(&limit) => {
                Err("must be between 0 and 100".into())
            }
            _ => Ok(()),
        }
    }

    /// Whether `value` meets `limit`, and by how much (positive inside): `value - limit` for a
    /// minimum or significance level, `limit - value` for a maximum.
    pub fn margin(&self, value: f64, limit: f64) -> f64 {
        match self.direction {
            Direction::AtLeast => value - limit,
            Direction::AtMost => limit - value,
        }
    }

    /// The comparison a report writes between key and limit, `≥` or `≤`.
    pub fn symbol(&self) -> &'static str {
        match self.direction {
            Direction::AtLeast => "≥",
            Direction::AtMost => "≤",
        }
    }

    /// The suffix of a figure in this threshold's unit: `%`, ` pp`, or none for a p-value.
    pub fn unit_suffix(&self) -> &'static str {
        match self.unit {
            Unit::Percent => "%",
            Unit::Points => " pp",
            Unit::Significance => "",
        }
    }
}

/// Classes with fewer points than this are not judged by the per-class thresholds unless the
/// policy sets `min_class_points`.
pub const MIN_CLASS_POINTS: u64 = 20;

/// Thresholds of a gate (percentages, percentage points, significance levels), one limit per
/// registry row set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Thresholds {
    /// Limit per row of [`THRESHOLDS`] set, by the row's index.
    limits: BTreeMap<usize, f64>,
    /// Classes with fewer points are reported, not judged (default [`MIN_CLASS_POINTS`]).
    pub min_class_points: Option<u64>,
    /// The warn level (`warn_*` keys): the same thresholds, reported as warnings when not met,
    /// never failing the gate (their own `min_class_points` and `warn` are unused).
    pub warn: Option<Box<Thresholds>>,
}

impl Thresholds {
    /// The thresholds `limits` sets, in registry order (`None`: not set).
    pub fn from_limits(limits: impl IntoIterator<Item = Option<f64>>) -> Thresholds {
        Thresholds {
            limits: (limits.into_iter().enumerate())
                .filter_map(|(k, v)| Some((k, v?)))
                .collect(),
            ..Thresholds::default()
        }
    }

    /// These thresholds with `key`'s limit set to `limit`; `Err` names an unknown key.
    pub fn with(mut self, key: &str, limit: f64) -> Result<Thresholds, String> {
        let k = THRESHOLDS
            .iter()
            .position(|d| d.key == key)
            .ok_or_else(|| format!("no threshold is named `{key}`"))?;
        self.limits.insert(k, limit);
        Ok(self)
    }

    /// True when the gate has no threshold (it reports but never fails).
    pub fn is_empty(&self) -> bool {
        *self == Thresholds::default()
    }

    /// The limit set for `key` (a policy key of this level), if any.
    pub fn limit(&self, key: &str) -> Option<f64> {
        let k = THRESHOLDS.iter().position(|d| d.key == key)?;
        self.limits.get(&k).copied()
    }

    /// The thresholds set at this level, in registry order.
    pub fn limits(&self) -> impl Iterator<Item = (&'static ThresholdDef, f64)> + '_ {
        self.limits.iter().map(|(&k, &v)| (&THRESHOLDS[k], v))
    }

    /// Every threshold set with its policy key (the warn level's as `warn_*`), this level
    /// first, each in registry order.
    pub fn by_key(&self) -> Vec<(&'static str, &'static ThresholdDef, f64)> {
        let level = |t: &Thresholds, warn: bool| {
            (t.limits().map(move |(d, v)| (d.key_at(warn), d, v))).collect::<Vec<_>>()
        };
        let mut out = level(self, false);
        out.extend(
            self.warn
                .as_deref()
                .map_or_else(Vec::new, |w| level(w, true)),
        );
        out
    }

    /// Whether a threshold of either level compares with a baseline.
    pub fn uses_baseline(&self) -> bool {
        self.by_key()
            .iter()
            .any(|(_, d, _)| d.figure.uses_baseline())
    }

    /// One note per percentage threshold that looks like a fraction (`0 < x <= 1`): thresholds
    /// are percentages, so a limit of 0.95 asks for 0.95%, not 95%.
    pub fn fraction_notes(&self) -> Vec<String> {
        self.by_key()
            .into_iter()
            .filter(|(_, d, v)| d.unit == Unit::Percent && *v > 0.0 && *v <= 1.0)
            .map(|(key, _, v)| {
                let percent = (v * 1e11).round() / 1e9;
                format!(
                    "{key} = {v} looks like a fraction: thresholds are percentages (0..100), \
                     so this asks for {v}%; write {percent} for {percent}%"
                )
            })
            .collect()
    }

    /// The thresholds as a certificate file records them: each in its named field where it
    /// has one (which earlier lipfp versions read), else in `limits` keyed by the policy key;
    /// the warn level nested.
    pub fn to_proto(&self) -> proto_gen::Thresholds {
        let mut p = proto_gen::Thresholds {
            min_class_points: self.min_class_points,
            warn: self.warn.as_deref().map(|w| Box::new(w.to_proto())),
            ..proto_gen::Thresholds::default()
        };
        for (d, v) in self.limits() {
            match d.legacy {
                Some((_, write)) => write(&mut p, v),
                None => {
                    p.limits.insert(d.key.to_string(), v);
                }
            }
        }
        p
    }

    /// The thresholds a certificate file records (its named fields and its `limits`); `Err`
    /// names a key no threshold has.
    pub fn from_proto(p: &proto_gen::Thresholds) -> Result<Thresholds, String> {
        let mut t = Thresholds {
            min_class_points: p.min_class_points,
            ..Thresholds::default()
        };
        for (k, d) in THRESHOLDS.iter().enumerate() {
            if let Some(v) = d.legacy.and_then(|(read, _)| read(p)) {
                t.limits.insert(k, v);
            }
        }
        for (key, &v) in &p.limits {
            t = t.with(key, v)?;
        }
        if let Some(w) = p.warn.as_deref() {
            t.warn = Some(Box::new(Thresholds::from_proto(w)?));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_unique_and_named_by_its_figure_and_direction() {
        for (k, d) in THRESHOLDS.iter().enumerate() {
            assert_eq!(d.warn_key, format!("warn_{}", d.key));
            let prefix = match (d.direction, d.unit) {
                (_, Unit::Significance) => "max_",
                (Direction::AtLeast, _) => "min_",
                (Direction::AtMost, _) => "max_",
            };
            assert!(d.key.starts_with(prefix), "{}", d.key);
            let suffix = match d.unit {
                Unit::Percent => "_pct",
                Unit::Points => "_pp",
                Unit::Significance => "_significance",
            };
            assert!(d.key.ends_with(suffix), "{}", d.key);
            assert!(THRESHOLDS[..k].iter().all(|e| e.key != d.key));
            assert_eq!(
                ThresholdDef::of_policy_key(d.warn_key).map(|x| x.1),
                Some(true)
            );
        }
    }

    /// docs/policy.md's table of thresholds has one row per registry row, in order, with its
    /// unit and whether it needs labels.
    #[test]
    fn the_policy_docs_list_every_threshold() {
        let doc = include_str!("../../docs/policy.md");
        let rows: Vec<Vec<&str>> = (doc.lines())
            .filter(|l| l.starts_with("| `"))
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        let keys: Vec<String> = THRESHOLDS.iter().map(|d| format!("`{}`", d.key)).collect();
        assert_eq!(rows.iter().map(|r| r[0]).collect::<Vec<_>>(), keys);
        for (row, d) in rows.iter().zip(THRESHOLDS) {
            let unit = match d.unit {
                Unit::Percent => "%",
                Unit::Points => "pp",
                Unit::Significance => "level in (0, 1]",
            };
            let labels = if d.needs_labels { "yes" } else { "no" };
            let row3 = row[3].split(" (").next().unwrap_or_default();
            let side = match d.direction {
                Direction::AtLeast => "at least",
                Direction::AtMost => "at most",
            };
            assert_eq!((row[2], row3), (unit, labels), "{}", d.key);
            assert!(row[1].ends_with(side), "{}: {}", d.key, row[1]);
        }
    }

    #[test]
    fn limits_are_checked_by_unit() {
        let pct = ThresholdDef::named("min_accuracy_pct").unwrap();
        let sig = ThresholdDef::named("max_vra_drop_significance").unwrap();
        assert!(pct.check_limit(100.0).is_ok() && pct.check_limit(100.5).is_err());
        assert!(pct.check_limit(0.0).is_ok() && pct.check_limit(f64::NAN).is_err());
        assert!(sig.check_limit(1.0).is_ok() && sig.check_limit(0.0).is_err());
        assert_eq!(pct.margin(83.0, 80.0), 3.0);
        let cost = ThresholdDef::named("max_fp_cost_pp").unwrap();
        assert_eq!(cost.margin(1.5, 2.0), 0.5);
    }

    #[test]
    fn certificate_files_round_trip_and_earlier_files_still_read() {
        let mut t = Thresholds::default()
            .with("min_certified_pct", 80.0)
            .and_then(|t| t.with("max_vra_drop_significance", 0.05))
            .unwrap();
        t.min_class_points = Some(5);
        t.warn = Some(Box::new(
            Thresholds::default().with("max_fp_cost_pp", 1.0).unwrap(),
        ));
        assert_eq!(Thresholds::from_proto(&t.to_proto()), Ok(t.clone()));
        // every threshold of today has its named field, which earlier versions read
        assert!(t.to_proto().limits.is_empty());
        // written by lipfp before `limits`: the named fields
        let legacy = proto_gen::Thresholds {
            min_certified_pct: Some(80.0),
            max_vra_drop_significance: Some(0.05),
            min_class_points: Some(5),
            warn: Some(Box::new(proto_gen::Thresholds {
                max_fp_cost_pp: Some(1.0),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(Thresholds::from_proto(&legacy), Ok(t));
        let unknown = proto_gen::Thresholds {
            limits: [("min_speed_pct".to_string(), 1.0)].into(),
            ..Default::default()
        };
        assert!(Thresholds::from_proto(&unknown)
            .unwrap_err()
            .contains("min_speed_pct"));
    }

    #[test]
    fn fraction_notes_name_percentages_only() {
        let t = Thresholds::default()
            .with("min_certified_pct", 0.95)
            .and_then(|t| t.with("max_fp_cost_pp", 0.5))
            .unwrap();
        let notes = t.fraction_notes();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("min_certified_pct = 0.95 looks like a fraction"));
    }
}
