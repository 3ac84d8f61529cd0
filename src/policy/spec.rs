//! The validated policy: [`Policy`], its [`Gate`]s, what each certifies ([`Target`]) and the
//! [`BaselineSource`] its drop thresholds compare with. Every path is resolved and every value
//! checked; [`super::Policy::parse`] is the only way to one.

use std::path::PathBuf;

use crate::arith::format::Format;
use crate::arith::runtime::RuntimeChoice;
use crate::bounds::ball::BallSpec;
use crate::bounds::certify::Mode;

use super::complete::CompleteBudget;
use super::decision::Decision;
use super::radius::{CurveGrid, Radius};
use super::thresholds::Thresholds;

/// The `[baseline]` of a policy: a previous JSON report or a previous run's certificate file.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineSource {
    /// The file, resolved against the policy's directory.
    pub path: PathBuf,
    /// Whether it is a certificate file (`certificates = ...`; per-point regression) rather than
    /// a JSON report (`report = ...`).
    pub certificates: bool,
    /// Whether a missing or non-comparable baseline is an error.
    pub required: bool,
}

impl Gate {
    /// The mode the thresholds apply to.
    pub fn mode(&self) -> Mode {
        self.modes[0]
    }
}

/// What a gate certifies: a model in a format on a test set. Gates with equal targets share
/// one load, one norm computation and one forward pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// ONNX model.
    pub model: PathBuf,
    /// Deployment (storage) format; `None`: read from the model's weights.
    pub format: Option<Format>,
    /// Declared accumulation format (`None`: the storage format or the next wider one).
    pub accumulate: Option<Format>,
    /// Flush-to-zero execution.
    pub ftz: bool,
    /// The declared runtime and its settings (`None`: the IEEE model alone).
    pub runtime: Option<RuntimeChoice>,
    /// Gram iterations for the spectral norms.
    pub gram_iterations: u32,
    /// Test inputs.
    pub inputs: PathBuf,
    /// Test labels.
    pub labels: Option<PathBuf>,
    /// How the model's outputs name the class (`decision`, default argmax).
    pub decision: Decision,
    /// The label column of a CSV test set (`label_column`; `None`: every column is a feature).
    pub label_column: Option<String>,
    /// The set a radius stands for: the gate's `norm` (default l2) and the `input_range` (the
    /// gate's, else `[data]`'s) every input lies in and the set is clipped to.
    pub ball: BallSpec,
}

/// One `[[gate]]`.
#[derive(Clone, Debug)]
pub struct Gate {
    /// Gate name (unique within the policy).
    pub name: String,
    /// 1-based line of the gate's `name` key in the policy file.
    pub line: usize,
    /// The gate's model path as written in the policy (relative to the policy file).
    pub model_name: String,
    /// Model, format and data (the gate's keys override `[model]` and `[data]`).
    pub target: Target,
    /// Perturbation radius.
    pub radius: Radius,
    /// Modes to compute; the thresholds apply to the first.
    pub modes: Vec<Mode>,
    /// Thresholds.
    pub thresholds: Thresholds,
    /// The robustness curve to report, if any (`curve = true` or a list of radii).
    pub curve: Option<CurveGrid>,
    /// Run the falsifier on the points the first mode does not certify (`attack = true`).
    pub attack: bool,
    /// Seconds the local bounds may take (`local_budget_s`); the points left then are not
    /// certified by them. `None`: no limit.
    pub local_budget_s: Option<f64>,
    /// Let `best` consult local bounds where it does not otherwise certify (`best_local`,
    /// default true; `best_local = false` opts out).
    pub best_local: bool,
    /// With mode `complete`, branch and bound's budget.
    pub complete: Option<CompleteBudget>,
}

/// A validated policy; every path is resolved relative to the policy file.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The policy file.
    pub path: PathBuf,
    /// Baseline for the regression thresholds.
    pub baseline: Option<BaselineSource>,
    /// The gates, in file order.
    pub gates: Vec<Gate>,
}
