//! The decision rule a policy declares: which output names the predicted class.

/// How a classifier's outputs name its decision: the class of the largest output (the usual
/// `argmax`) or of the smallest (`argmin`: ACAS Xu's advisories, cost or distance outputs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The class of the largest output (the first on ties).
    #[default]
    Argmax,
    /// The class of the smallest output (the first on ties).
    Argmin,
}

impl Decision {
    /// The name used in policies, flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Argmax => "argmax",
            Decision::Argmin => "argmin",
        }
    }

    /// Parse a [`Decision::name`].
    pub fn parse(text: &str) -> Result<Decision, String> {
        match text {
            "argmax" => Ok(Decision::Argmax),
            "argmin" => Ok(Decision::Argmin),
            _ => Err(format!(
                "unknown decision `{text}` (supported: argmax, argmin)"
            )),
        }
    }
}
