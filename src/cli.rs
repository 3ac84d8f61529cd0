//! Command-line interface: argument definitions, the commands, and the exit-code contract.
//!
//! Exit codes (the one documented place):
//! * `0` — success; for `check`, every gate passed (or had no thresholds);
//! * `1` — `check`: at least one gate failed its thresholds;
//! * `2` — usage, policy, model or data error (nothing was certified or reported as complete).

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::certify::{parse_mode_list, Mode};
use crate::error::LipfpError;
use crate::format::Format;
use crate::gate::{evaluate, GateVerdict};
use crate::norms::DEFAULT_GRAM_ITERATIONS;
use crate::policy::{Policy, Radius, Target};
use crate::progress::Progress;
use crate::report::{self, GateReport, Report, SubjectFacts};
use crate::run::{self, Subject, SubjectSpec};

/// Process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Success / all gates passed.
    Pass = 0,
    /// A gate failed.
    PolicyFailed = 1,
    /// Usage, policy or input error.
    InputError = 2,
}

impl Exit {
    /// The numeric code.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Floating-point-sound robustness certificates for dense ReLU classifiers, as a CI gate.
#[derive(Debug, Parser)]
#[command(name = "lipfp", version, about, long_about = None)]
pub struct Cli {
    /// Print no progress on stderr.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate every [[gate]] of a policy; exit 0 pass, 1 a gate failed, 2 error.
    Check(CheckArgs),
    /// Certify one model on one test set and print the figures.
    Certify(CertifyArgs),
}

/// `lipfp check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Policy file.
    #[arg(long, short, default_value = "lipfp.toml")]
    pub config: PathBuf,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Norm cache directory (default: $LIPFP_CACHE_DIR, the policy's [cache] dir, or the user cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

/// `lipfp certify`.
#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// ONNX model.
    #[arg(long)]
    pub model: PathBuf,
    /// Test inputs (.npy, float16/32/64, [N, ...]).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Test labels (.npy, any integer dtype, [N]).
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// Radius as a decimal (read exactly).
    #[arg(
        long,
        conflicts_with = "epsilons",
        required_unless_present = "epsilons"
    )]
    pub epsilon: Option<String>,
    /// Per-instance radii (.npy float64 [N]).
    #[arg(long)]
    pub epsilons: Option<PathBuf>,
    /// Deployment format: float64, float32, float16, bfloat16.
    #[arg(long, default_value = "float32")]
    pub format: String,
    /// Flush-to-zero / denormals-are-zero execution.
    #[arg(long)]
    pub ftz: bool,
    /// Mode(s), comma-separated: standard, hybrid, measured, float64-centre, best, real
    /// (default: every sound mode; real is always computed as the ceiling).
    #[arg(long)]
    pub mode: Option<String>,
    /// Gram iterations for the spectral norms.
    #[arg(long, default_value_t = DEFAULT_GRAM_ITERATIONS)]
    pub gram_iterations: u32,
    /// Norm cache directory (default: $LIPFP_CACHE_DIR or the user cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Run a parsed command line; errors are printed here and mapped to exit codes.
pub fn run(cli: Cli) -> Exit {
    let progress = Progress::new(cli.quiet);
    let result = match cli.command {
        Command::Check(a) => check(&a, &progress),
        Command::Certify(a) => certify(&a, &progress),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lipfp: error: {e}");
            Exit::InputError
        }
    }
}

fn facts<'a>(subject: &'a Subject, gram_iterations: u32) -> SubjectFacts<'a> {
    SubjectFacts {
        model: subject.net.path.display().to_string(),
        model_hash: subject.net.hash(),
        format: subject.net.format,
        ftz: subject.ftz,
        gram_iterations,
        norms_cached: subject
            .norms
            .as_ref()
            .map(|n| n.from_cache)
            .unwrap_or(false),
        notes: &subject.notes,
    }
}

fn emit(report: &Report, json: Option<&Path>) -> Result<(), LipfpError> {
    print!("{}", report::console::render(report));
    if let Some(p) = json {
        report::json::write(report, p)?;
    }
    Ok(())
}

fn certify(a: &CertifyArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    let format: Format = a.format.parse().map_err(LipfpError::Usage)?;
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
    let spec = SubjectSpec {
        model: a.model.clone(),
        format,
        ftz: a.ftz,
        inputs: a.inputs.clone(),
        labels: a.labels.clone(),
        gram_iterations: a.gram_iterations,
        cache_dir: run::resolve_cache_dir(a.cache_dir.as_deref(), None),
        reference: modes.iter().any(|m| m.needs_reference()),
    };
    let subject = run::prepare(&spec, progress)?;
    progress.stage(&format!("certifying {} points", subject.n()));
    let outcome = run::certify(&subject, &radius, &modes)?;
    let verdict = GateVerdict {
        passed: None,
        failures: vec![],
    };
    let gate = GateReport::new(
        "certify",
        &facts(&subject, a.gram_iterations),
        &radius,
        modes[0],
        &outcome,
        &verdict,
    );
    let report = Report {
        lipfp_version: env!("CARGO_PKG_VERSION").into(),
        policy: None,
        gates: vec![gate],
    };
    emit(&report, a.json.as_deref())?;
    Ok(Exit::Pass)
}

fn check(a: &CheckArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    let policy = Policy::load(&a.config)?;
    let cache_dir = run::resolve_cache_dir(a.cache_dir.as_deref(), policy.cache_dir.as_deref());
    // one subject per distinct target, prepared in the order gates first name it
    let mut subjects: Vec<(Target, Subject)> = Vec::new();
    let mut gates = Vec::with_capacity(policy.gates.len());
    for g in &policy.gates {
        if !subjects.iter().any(|(t, _)| *t == g.target) {
            let t = &g.target;
            let spec = SubjectSpec {
                model: t.model.clone(),
                format: t.format,
                ftz: t.ftz,
                inputs: t.inputs.clone(),
                labels: t.labels.clone(),
                gram_iterations: t.gram_iterations,
                cache_dir: cache_dir.clone(),
                reference: policy
                    .gates
                    .iter()
                    .filter(|o| o.target == *t)
                    .any(|o| o.modes.iter().any(|m| m.needs_reference())),
            };
            subjects.push((t.clone(), run::prepare(&spec, progress)?));
        }
        let subject = &subjects
            .iter()
            .find(|(t, _)| *t == g.target)
            .expect("prepared above")
            .1;
        progress.stage(&format!(
            "gate `{}`: certifying {} points",
            g.name,
            subject.n()
        ));
        let outcome = run::certify(subject, &g.radius, &g.modes)?;
        let verdict = evaluate(&g.thresholds, g.mode(), &outcome);
        let mut gate = GateReport::new(
            &g.name,
            &facts(subject, g.target.gram_iterations),
            &g.radius,
            g.mode(),
            &outcome,
            &verdict,
        );
        gate.policy_line = Some(g.line);
        gates.push(gate);
    }
    let report = Report {
        lipfp_version: env!("CARGO_PKG_VERSION").into(),
        policy: Some(policy.path.display().to_string()),
        gates,
    };
    emit(&report, a.json.as_deref())?;
    let failed = report.gates.iter().any(|g| g.passed == Some(false));
    Ok(if failed {
        Exit::PolicyFailed
    } else {
        Exit::Pass
    })
}
