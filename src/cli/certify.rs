//! `lipfp certify`: its flags, and the request they make.

use std::path::PathBuf;

use clap::Args;

use super::exit::Exit;
use super::outputs::{check_outputs, emit_with, suite_name, ReportOutputs};
use super::shared_flags::{parse_shard, DeploymentFlags};
use crate::bounds::ball::{BallSpec, InputRange, Norm};
use crate::bounds::certify::{parse_mode_list, Mode};
use crate::bounds::norms::DEFAULT_GRAM_ITERATIONS;
use crate::commands::certify::CertifyRequest;
use crate::engine::run::{ReferencePlan, SubjectSpec};
use crate::error::LipfpError;
use crate::files;
use crate::policy::{check_attack_request, CompleteBudget, CurveGrid, Decision, Radius};
use crate::progress::Progress;

/// `lipfp certify`.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("radius")
        .required(true)
        .multiple(false)
        .args(["epsilon", "epsilons"])
))]
pub struct CertifyArgs {
    /// ONNX model.
    #[arg(long)]
    pub model: PathBuf,
    /// Test inputs (.npy, float16/32/64, [N, ...]; .npz with arrays x and y; .csv with a
    /// header row).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Test labels (.npy, any integer dtype, `[N]`); default: a .npz's array y, a .csv's
    /// --label-column.
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// The label column of a .csv test set (every other column is a feature, in order).
    #[arg(long, value_name = "NAME")]
    pub label_column: Option<String>,
    /// Radius as a decimal (read exactly); or --epsilons for per-instance radii.
    #[arg(long)]
    pub epsilon: Option<String>,
    /// Per-instance radii (.npy float64 `[N]`); or --epsilon for one radius.
    #[arg(long)]
    pub epsilons: Option<PathBuf>,
    /// The declared deployment.
    #[command(flatten)]
    pub deployment: DeploymentFlags,
    /// Mode(s), comma-separated: standard, hybrid, measured, float64-centre, best, real
    /// (default: every sound mode; real is always computed as the ceiling).
    #[arg(long)]
    pub mode: Option<String>,
    /// Gram iterations for the spectral norms.
    #[arg(long, default_value_t = DEFAULT_GRAM_ITERATIONS)]
    pub gram_iterations: u32,
    /// Report destinations.
    #[command(flatten)]
    pub out: ReportOutputs,
    /// Write per-instance certificates (protobuf) here, for `lipfp report`.
    #[arg(long)]
    pub certificates: Option<PathBuf>,
    /// Certify only shard K of N of the test set (1-based, e.g. 2/4).
    #[arg(long)]
    pub shard: Option<String>,
    /// Also compute the robustness curve: certified and VRA counts at every radius of a
    /// comma-separated list (e.g. 0.1,0.2,0.3), or of an automatic grid when no list is given,
    /// and the quantiles of the per-point certified radii.
    #[arg(long, num_args = 0..=1, default_missing_value = "auto")]
    pub curve: Option<String>,
    /// With --curve: write the curve as an SVG chart here.
    #[arg(long, requires = "curve")]
    pub plot: Option<PathBuf>,
    /// Search the points the first mode does not certify for adversarial examples under the
    /// deployed execution, and report the bracket on robust accuracy.
    #[arg(long)]
    pub attack: bool,
    /// With --attack: write the adversarial inputs found here (.npy), their indices beside it.
    #[arg(long, requires = "attack")]
    pub attack_witnesses: Option<PathBuf>,
    /// Which output names the predicted class: `argmax` (the largest) or `argmin` (the smallest,
    /// as in ACAS Xu); every certificate, the accuracy and the falsifier follow it.
    #[arg(long, value_name = "RULE", default_value = "argmax", value_parser = Decision::parse)]
    pub decision: Decision,
    /// Whether mode `best` consults local bounds (linear bound propagation) at the points it does
    /// not otherwise certify, where a first-order estimate says they can help (default true;
    /// `--best-local false` keeps `best` to the Lipschitz certificates).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub best_local: bool,
    /// The norm the radius is measured in: `l2` (default) or `linf` (every feature within
    /// the radius of the point's).
    #[arg(long, value_name = "NORM", default_value = "l2", value_parser = Norm::parse)]
    pub norm: Norm,
    /// The valid range of every input feature, `LO,HI` (e.g. 0,1 for pixels): every input must
    /// lie in it, and the set around each point is clipped to it.
    #[arg(long, value_name = "LO,HI", value_parser = parse_input_range)]
    pub input_range: Option<InputRange>,
    /// With mode `local`: stop computing local bounds after this many seconds; the points left
    /// are not certified by them (reported as `local bounds not computed`).
    #[arg(long, value_name = "SECONDS", value_parser = parse_budget)]
    pub local_budget: Option<f64>,
    /// With mode `complete`: branch and bound's seconds per point (default 10).
    #[arg(long, value_name = "SECONDS", value_parser = parse_positive_seconds)]
    pub complete_budget: Option<f64>,
    /// With mode `complete`: branch and bound's seconds for all points together.
    #[arg(long, value_name = "SECONDS", value_parser = parse_positive_seconds)]
    pub complete_total: Option<f64>,
    /// With mode `complete`: subdomains per point (default 2000; the same decisions on every
    /// machine).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub complete_subdomains: Option<u32>,
}

/// A time budget in seconds: finite and `> 0`.
fn parse_positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a number of seconds (finite, > 0)")),
    }
}

/// The `--curve` grid for planning the reference pass (a list that does not parse plans the
/// automatic grid's pass; it is reported as a usage error after the certification).
fn curve_grid(text: Option<&str>) -> Option<CurveGrid> {
    text.map(|t| CurveGrid::parse_list(t).unwrap_or(CurveGrid::Auto))
}

/// A time budget in seconds: finite and `>= 0`.
fn parse_budget(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{text}` is not a number of seconds (finite, >= 0)"
        )),
    }
}

/// The labels of `lipfp certify`: `--labels`, else those the test set holds itself (a .npz's
/// array `y`, a .csv's `--label-column`); `--label-column` only with .csv inputs.
fn own_labels(a: &CertifyArgs) -> Result<Option<PathBuf>, LipfpError> {
    let csv = files::is_csv(&a.inputs);
    if a.label_column.is_some() && !csv {
        return Err(LipfpError::Usage(format!(
            "--label-column: the inputs {} are not a .csv file",
            a.inputs.display()
        )));
    }
    let own = files::is_npz(&a.inputs) || (csv && a.label_column.is_some());
    Ok(a.labels.clone().or_else(|| own.then(|| a.inputs.clone())))
}

/// What `lipfp certify` runs, parsed from its flags (usage errors name the flag).
fn certify_request(a: &CertifyArgs) -> Result<CertifyRequest, LipfpError> {
    let (format, accumulate, ftz, runtime) = a.deployment.parse()?;
    let modes = match &a.mode {
        Some(text) => {
            parse_mode_list(text).map_err(|m| LipfpError::Usage(format!("--mode: {m}")))?
        }
        None => Mode::SOUND.to_vec(),
    };
    if !(1..=64).contains(&a.gram_iterations) {
        return Err(LipfpError::Usage(
            "--gram-iterations must be between 1 and 64".into(),
        ));
    }
    let radius = match (&a.epsilon, &a.epsilons) {
        (Some(e), None) => {
            Radius::parse_decimal(e).map_err(|m| LipfpError::Usage(format!("--epsilon: {m}")))?
        }
        (None, Some(p)) => Radius::PerInstance(p.clone()),
        _ => {
            return Err(LipfpError::Usage(
                "give exactly one of --epsilon and --epsilons".into(),
            ))
        }
    };
    let complete = complete_budget(a, &modes, &radius)?;
    let spec = SubjectSpec {
        model: a.model.clone(),
        format,
        accumulate,
        ftz,
        runtime,
        inputs: a.inputs.clone(),
        labels: own_labels(a)?,
        gram_iterations: a.gram_iterations,
        reference: ReferencePlan::for_run(&modes, &radius, curve_grid(a.curve.as_deref()).as_ref()),
        shard: parse_shard(a.shard.as_deref())?,
        decision: a.decision,
        label_column: a.label_column.clone(),
        ball: BallSpec {
            norm: a.norm,
            range: a.input_range,
        },
    };
    Ok(CertifyRequest {
        spec,
        radius,
        modes,
        curve: a.curve.clone(),
        plot: a.plot.clone(),
        attack: a.attack,
        attack_witnesses: a.attack_witnesses.clone(),
        certificates: a.certificates.clone(),
        local_budget_s: a.local_budget,
        best_local: a.best_local,
        complete,
    })
}

/// Branch and bound's budget from the `--complete-*` flags (only with mode `complete`).
fn complete_budget(
    a: &CertifyArgs,
    modes: &[Mode],
    radius: &Radius,
) -> Result<CompleteBudget, LipfpError> {
    let given = a.complete_budget.is_some()
        || a.complete_total.is_some()
        || a.complete_subdomains.is_some();
    let complete = modes.contains(&Mode::Complete);
    if given && !complete {
        return Err(LipfpError::Usage(
            "--complete-budget, --complete-total and --complete-subdomains need --mode complete"
                .into(),
        ));
    }
    if complete {
        check_attack_request(radius, Mode::Complete)
            .map_err(|m| LipfpError::Usage(format!("--mode complete: {m}")))?;
        if a.curve.is_some() {
            return Err(LipfpError::Usage(
                "--curve: a robustness curve is not computed for mode `complete` (branch and \
                 bound runs at --epsilon); ask for it with --mode best"
                    .into(),
            ));
        }
    }
    let d = CompleteBudget::default();
    Ok(CompleteBudget {
        seconds: a.complete_budget.unwrap_or(d.seconds),
        total_s: a.complete_total,
        subdomains: a.complete_subdomains.map_or(d.subdomains, |n| n as usize),
        ..d
    })
}

/// `lipfp certify`: certify, then publish every report asked for.
pub(super) fn certify(a: &CertifyArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    check_outputs(&a.out, a.certificates.as_ref())?;
    let request = certify_request(a)?;
    let run = crate::commands::certify::run(&request, progress)?;
    emit_with(
        &run.report,
        &a.out,
        &suite_name("certify"),
        None,
        run.artifacts,
    )?;
    Ok(Exit::Pass)
}

/// `--input-range LO,HI`: two numbers, `LO <= HI`.
fn parse_input_range(text: &str) -> Result<InputRange, String> {
    let ends: Option<Vec<f64>> = text.split(',').map(|t| t.trim().parse().ok()).collect();
    match ends.as_deref() {
        Some(&[lo, hi]) => InputRange::new(lo, hi),
        _ => Err(format!("`{text}`: write the range as LO,HI, e.g. 0,1")),
    }
}
