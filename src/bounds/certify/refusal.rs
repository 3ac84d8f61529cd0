//! Why a point was not certified: one code per reason, as stored in certificate files and
//! counted in reports.

use std::fmt;

use serde::Serialize;

/// Why an instance was not certified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The margin does not exceed the required bound.
    Margin,
    /// Overflow could not be excluded at this (1-based) layer.
    Overflow(usize),
    /// The centre logits are not finite.
    NonFiniteLogits,
    /// Overflow could not be excluded for the float64 reference execution at this layer.
    ReferenceOverflow(usize),
    /// A model-level reason applies to every instance (vacuous layer, norm failure).
    Model,
    /// The float64 reference execution was not run at this point, which a pre-deployment
    /// mode needed: the points were chosen for other modes or radii (a per-instance radii file
    /// that changed between the forward passes and the certificates).
    NoReference,
    /// The local bounds were not computed at this point (their time budget ran out, or the
    /// network has layers they do not cover).
    NoLocal,
    /// `complete`: a counterexample in the set, confirmed by lipfp's execution of the model.
    Falsified,
    /// `complete`: branch and bound decided nothing within its budget.
    Undecided,
}

impl Refusal {
    /// A stable machine-readable code (`margin`, `overflow:3`, ...), as stored in certificate
    /// files.
    pub fn code(self) -> String {
        match self {
            Refusal::Margin => "margin".into(),
            Refusal::Overflow(l) => format!("overflow:{l}"),
            Refusal::NonFiniteLogits => "non_finite_logits".into(),
            Refusal::ReferenceOverflow(l) => format!("reference_overflow:{l}"),
            Refusal::Model => "model".into(),
            Refusal::NoReference => "no_reference".into(),
            Refusal::NoLocal => "no_local".into(),
            Refusal::Falsified => "falsified".into(),
            Refusal::Undecided => "undecided".into(),
        }
    }

    /// Parse a [`Refusal::code`].
    pub fn from_code(code: &str) -> Option<Refusal> {
        let layer = |s: &str| s.parse::<usize>().ok();
        match code.split_once(':') {
            Some(("overflow", l)) => layer(l).map(Refusal::Overflow),
            Some(("reference_overflow", l)) => layer(l).map(Refusal::ReferenceOverflow),
            Some(_) => None,
            None => match code {
                "margin" => Some(Refusal::Margin),
                "non_finite_logits" => Some(Refusal::NonFiniteLogits),
                "model" => Some(Refusal::Model),
                "no_reference" => Some(Refusal::NoReference),
                "no_local" => Some(Refusal::NoLocal),
                "falsified" => Some(Refusal::Falsified),
                "undecided" => Some(Refusal::Undecided),
                _ => None,
            },
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Margin => f.write_str("margin too small"),
            Refusal::Overflow(l) => write!(f, "overflow not excluded at layer {l}"),
            Refusal::NonFiniteLogits => f.write_str("non-finite logits"),
            Refusal::ReferenceOverflow(l) => {
                write!(f, "float64 reference: overflow not excluded at layer {l}")
            }
            Refusal::Model => f.write_str("model cannot be certified"),
            Refusal::NoReference => f.write_str("float64 reference not computed at this point"),
            Refusal::NoLocal => f.write_str("local bounds not computed at this point"),
            Refusal::Falsified => f.write_str("falsified (a confirmed counterexample)"),
            Refusal::Undecided => f.write_str("undecided (branch and bound's budget ran out)"),
        }
    }
}
