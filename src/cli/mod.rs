//! Command-line interface: argument definitions, flags parsed into the requests of
//! [`crate::commands`], dispatch, publishing the reports, and the exit-code contract. The
//! commands' work is in [`crate::commands`].
//!
//! Imports: [`crate::commands`], [`crate::report`], [`crate::gate`], [`crate::engine`],
//! [`crate::policy`], [`crate::bounds`], [`crate::onnx`], [`crate::arith`] and the shared
//! leaves.
//!
//! Exit codes (the one documented place):
//! * `0` — success; for `check` and `report`, every gate passed (or had no thresholds);
//! * `1` — at least one gate failed its thresholds (and none errored); for `verify`, the property
//!   is violated (a counterexample was found and confirmed);
//! * `2` — an error. For `check`, either errored gates (a gate whose model, data or radii could
//!   not be used, or whose required baseline does not compare: every report lists them with
//!   their error, and the other gates were evaluated), or an error outside every gate (usage,
//!   policy, baseline file, a report that could not be written: [`crate::report::publish`]),
//!   where nothing is reported as complete: a JUnit file, when asked for, then holds one
//!   `error` testcase, and under GitHub Actions the policy file gets an error annotation and
//!   the job summary a line;
//! * `3`, `4` — `verify` only: unknown (neither holds nor violated was shown), timeout;
//! * anything else — an unexpected failure (a bug: please report it).

mod certify;
mod exit;
mod outputs;
mod shared_flags;
mod verify;

pub use exit::Exit;
pub use outputs::ReportOutputs;
pub use shared_flags::DeploymentFlags;

use exit::exit_for;
use outputs::{check_outputs, emit, emit_with, suite_name};
use shared_flags::{parse_format_flag, parse_shard};

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::arith::runtime::RuntimeFlags;
use crate::bounds::norms::DEFAULT_GRAM_ITERATIONS;
use crate::commands::inspect;
use crate::commands::report::ReportRequest;
use crate::error::LipfpError;
use crate::files;
use crate::policy::Policy;
use crate::progress::Progress;
use crate::proto_gen::CertificateFile;
use crate::report;
use crate::report::certificates;

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
// one value per run: the size difference of the variants does not matter
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Evaluate every `[[gate]]` of a policy; exit 0 pass, 1 a gate failed, 2 error.
    Check(CheckArgs),
    /// Certify one model on one test set and print the figures.
    Certify(certify::CertifyArgs),
    /// Re-render reports from certificate files (e.g. the shards of a CI matrix), without
    /// recomputing; exit 0 pass, 1 a gate failed, 2 error.
    Report(ReportArgs),
    /// Show how a model is read: layers, ONNX nodes, norms, n*u per format, hash.
    Inspect(InspectArgs),
    /// Measure speed and memory: the MNIST benchmark in every mode and a HIGGS-scale run.
    Bench(BenchArgs),
    /// Decide a VNN-LIB property (or a benchmark's instance list): exit 0 holds, 1 violated,
    /// 2 error, 3 unknown, 4 timeout.
    Verify(verify::VerifyArgs),
}

/// `lipfp bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Directory holding benchmarks/mnist (the project's shared material).
    #[arg(long, default_value = "../shared")]
    pub shared: PathBuf,
    /// Points of the generated HIGGS-scale test set (0 skips it).
    #[arg(long, default_value_t = 500_000)]
    pub higgs_points: usize,
    /// Write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `lipfp check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Policy file.
    #[arg(long, short, default_value = "lipfp.toml")]
    pub config: PathBuf,
    /// Report destinations.
    #[command(flatten)]
    pub out: ReportOutputs,
    /// Write per-instance certificates (protobuf) here, for `lipfp report`.
    #[arg(long)]
    pub certificates: Option<PathBuf>,
    /// Certify only shard K of N of every test set (1-based, e.g. 2/4).
    #[arg(long)]
    pub shard: Option<String>,
    /// With `[baseline] certificates`: write the test-set indices of the points that lost
    /// their verified robustness here (.npy, uint64; with several gates compared,
    /// `<stem>-<gate>.npy` per gate).
    #[arg(long, value_name = "PATH.npy")]
    pub regressions: Option<PathBuf>,
}

/// `lipfp report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Certificate files written by `--certificates` (shards of one run are merged).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Report destinations.
    #[command(flatten)]
    pub out: ReportOutputs,
    /// Baseline JSON report for the `max_*_drop_pp` thresholds.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Check the files against this policy: its gates, thresholds, radii and modes, and the
    /// model and data it names (hash, execution model, point count, predictions, labels).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// With --config: re-certify this many randomly chosen points of every file and require
    /// identical verdicts (catches forged or corrupt flags).
    #[arg(long, requires = "config")]
    pub verify: Option<usize>,
}

/// `lipfp inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// ONNX model.
    pub model: PathBuf,
    /// Deployment format the weights are converted to (default: the stored format).
    #[arg(long)]
    pub format: Option<String>,
    /// Gram iterations for the spectral norms.
    #[arg(long, default_value_t = DEFAULT_GRAM_ITERATIONS)]
    pub gram_iterations: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// One runtime's error terms (default: every runtime at its defaults).
    #[command(flatten)]
    pub runtime: RuntimeFlags,
}

/// Run a parsed command line; errors are printed here and mapped to exit codes.
pub fn run(cli: Cli) -> Exit {
    let progress = Progress::new(cli.quiet);
    let config = match &cli.command {
        Command::Check(a) => Some(a.config.display().to_string()),
        Command::Report(a) => a.config.as_ref().map(|c| c.display().to_string()),
        _ => None,
    };
    let (result, out, suite) = match &cli.command {
        Command::Check(a) => (
            check(a, &progress),
            Some(&a.out),
            suite_name(&a.config.display().to_string()),
        ),
        Command::Certify(a) => (
            certify::certify(a, &progress),
            Some(&a.out),
            suite_name("certify"),
        ),
        Command::Report(a) => (
            report_files(a, &progress),
            Some(&a.out),
            suite_name(config.as_deref().unwrap_or("report")),
        ),
        Command::Inspect(a) => (inspect_model(a, &progress), None, String::new()),
        Command::Bench(a) => (bench(a, &progress), None, String::new()),
        Command::Verify(a) => (verify::verify(a, &progress), None, String::new()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let message = e.to_string();
            eprintln!("lipfp: error: {}", report::console::diagnostic(&message));
            if let Some(out) = out {
                // dashboards still get a report: one error testcase, an annotation and a
                // summary line, never a partial pass
                let to = report::publish::Destinations {
                    json: None,
                    junit: out.junit.as_deref(),
                    pr_comment: out.pr_comment.as_deref(),
                    suite: &suite,
                    policy_file: config.as_deref(),
                    verbose: out.verbose,
                };
                if let Err(w) = report::publish::publish_error(&message, &to) {
                    // the same failure (e.g. `--junit` names a directory) is reported once
                    if w.to_string() != message {
                        eprintln!(
                            "lipfp: error: {}",
                            report::console::diagnostic(&w.to_string())
                        );
                    }
                }
            }
            Exit::InputError
        }
    }
}

fn check(a: &CheckArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    check_outputs(&a.out, a.certificates.as_ref())?;
    if let Some(p) = &a.regressions {
        files::check_target(p, "regressions file")?;
    }
    let policy = Policy::load(&a.config)?;
    for warning in policy.warnings() {
        progress.warn(&warning);
    }
    let shard = parse_shard(a.shard.as_deref())?;
    let run = crate::commands::check::run(&policy, shard, a.certificates.is_some(), progress)?;
    let policy_name = policy.path.display().to_string();
    let mut artifacts = Vec::new();
    if let Some(path) = &a.certificates {
        let file = CertificateFile {
            tool_version: env!("CARGO_PKG_VERSION").into(),
            policy: policy_name.clone(),
            gates: run.certificates,
        };
        artifacts.push(certificates::artifact(&file, path));
    }
    if let Some(path) = &a.regressions {
        artifacts.extend(crate::report::regressions::artifacts(
            &run.report.gates,
            path,
        ));
    }
    emit_with(
        &run.report,
        &a.out,
        &suite_name(&policy_name),
        Some(&policy_name),
        artifacts,
    )?;
    Ok(exit_for(&run.report))
}

fn report_files(a: &ReportArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    check_outputs(&a.out, None)?;
    let request = ReportRequest {
        files: &a.files,
        baseline: a.baseline.as_deref(),
        config: a.config.as_deref(),
        verify: a.verify.unwrap_or(0),
    };
    let report = crate::commands::report::run(&request, progress)?;
    let policy = report.policy.as_deref();
    let suite = suite_name(policy.unwrap_or("report"));
    emit(&report, &a.out, &suite, policy)?;
    Ok(exit_for(&report))
}

fn inspect_model(a: &InspectArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    let format = parse_format_flag("--format", a.format.as_deref())?;
    if !(1..=64).contains(&a.gram_iterations) {
        return Err(LipfpError::Usage(
            "--gram-iterations must be between 1 and 64".into(),
        ));
    }
    let runtimes: Vec<_> = a
        .runtime
        .keys()
        .choice()
        .map_err(|m| LipfpError::Usage(format!("--{m}")))?
        .into_iter()
        .collect();
    let info = inspect::inspect(&a.model, format, a.gram_iterations, &runtimes, progress)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&info).expect("inspection serialises")
        );
    } else {
        print!("{}", inspect::render(&info));
    }
    Ok(Exit::Pass)
}

fn bench(a: &BenchArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    let opts = crate::commands::bench::BenchOptions {
        shared: a.shared.clone(),
        higgs_points: a.higgs_points,
    };
    let r = crate::commands::bench::run_bench(&opts, progress)?;
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&r).expect("bench report serialises");
        crate::files::write_atomic(p, (text + "\n").as_bytes(), "benchmark report")?;
    }
    print!("{}", crate::commands::bench::render(&r));
    Ok(Exit::Pass)
}
