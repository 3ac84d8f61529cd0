//! `lipfp verify`'s flags and exit codes ([`crate::commands::verify`] does the work).

use std::path::PathBuf;

use clap::Args;

use super::exit::Exit;
use super::shared_flags::DeploymentFlags;
use crate::bounds::norms::DEFAULT_GRAM_ITERATIONS;
use crate::commands::verify::{self as run, VerifyRequest};
use crate::engine::complete::{Recompute, RootBranching};
use crate::engine::verify::{Verdict, VerifyOptions};
use crate::error::LipfpError;
use crate::progress::Progress;

/// `lipfp verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The ONNX model (with PROPERTY).
    #[arg(required_unless_present = "instances")]
    pub model: Option<PathBuf>,
    /// The VNN-LIB property: the unsafe region over the model's inputs X_i and outputs Y_j.
    #[arg(required_unless_present = "instances")]
    pub property: Option<PathBuf>,
    /// A benchmark's instance list (`onnx,vnnlib,timeout` per line, paths relative to it)
    /// instead of MODEL and PROPERTY.
    #[arg(long, conflicts_with_all = ["model", "property"])]
    pub instances: Option<PathBuf>,
    /// Seconds for the instance (default 300); with --instances, a factor on each listed
    /// timeout is given by --timeout-scale.
    #[arg(long, default_value_t = 300.0)]
    pub timeout: f64,
    /// With --instances: multiply every listed timeout by this (e.g. 0.5).
    #[arg(long, default_value_t = 1.0)]
    pub timeout_scale: f64,
    /// Write VNN-COMP's result file here (with --instances: the table as CSV).
    #[arg(long)]
    pub result: Option<PathBuf>,
    /// The declared deployment.
    #[command(flatten)]
    pub deployment: DeploymentFlags,
    /// Gram iterations for the spectral norms.
    #[arg(long, default_value_t = DEFAULT_GRAM_ITERATIONS)]
    pub gram_iterations: u32,
    /// Bounds and the falsifier only: no branch and bound (an undecided property is `unknown`).
    #[arg(long)]
    pub incomplete: bool,
    /// Branch and bound: subdomains bounded at most per input box (then `unknown`); the same
    /// number gives the same verdict on every machine and thread count.
    #[arg(long)]
    pub max_subdomains: Option<usize>,
    /// Branch and bound: MiB its subdomain queue may hold (then `unknown`, never an
    /// out-of-memory kill).
    #[arg(long, default_value_t = 2048)]
    pub memory_cap_mib: usize,
    /// Branch and bound: whether a ReLU-splitting subdomain computes its hidden layers above its
    /// split again (adaptive: while doing so stabilises units; all three sound).
    #[arg(long, value_name = "WHEN", default_value = "adaptive", value_parser = Recompute::parse)]
    pub recompute: Recompute,
    /// Branch and bound: when a ReLU-splitting search's root bounds each unstable unit by a
    /// branch and bound of its own (staged: after a tenth of the budget from the plain root left
    /// the property open; all three sound).
    #[arg(long, value_name = "WHEN", default_value = "staged", value_parser = RootBranching::parse)]
    pub root_branching: RootBranching,
    /// Skip the falsifier before branch and bound: a counterexample then comes only from the
    /// search's own candidates (to measure the search alone).
    #[arg(long)]
    pub no_falsifier: bool,
}

/// Runs `lipfp verify`: exit 0 holds, 1 violated, 3 unknown, 4 timeout (2 on error); with
/// `--instances`, 0 once every instance ran.
pub fn verify(a: &VerifyArgs, progress: &Progress) -> Result<Exit, LipfpError> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(a.timeout) || !positive(a.timeout_scale) {
        return Err(LipfpError::Usage(
            "--timeout and --timeout-scale must be positive numbers".into(),
        ));
    }
    let (format, accumulate, ftz, runtime) = a.deployment.parse()?;
    let req = VerifyRequest {
        format,
        accumulate,
        ftz,
        runtime,
        gram_iterations: a.gram_iterations,
        timeout_s: a.timeout,
        options: VerifyOptions {
            complete: !a.incomplete,
            subdomains: a.max_subdomains.unwrap_or(usize::MAX),
            memory_bytes: a.memory_cap_mib.saturating_mul(1 << 20),
            recompute: a.recompute,
            root_branching: a.root_branching,
            falsifier: !a.no_falsifier,
        },
    };
    if let Some(list) = &a.instances {
        if let Some(p) = &a.result {
            crate::files::check_target(p, "result file")?;
        }
        let (_, csv) = run::instances(&req, list, a.timeout_scale, progress)?;
        if let Some(p) = &a.result {
            run::write_result(p, csv)?;
        }
        return Ok(Exit::Pass);
    }
    let (Some(model), Some(property)) = (&a.model, &a.property) else {
        return Err(LipfpError::Usage(
            "give MODEL and PROPERTY, or --instances".into(),
        ));
    };
    if let Some(p) = &a.result {
        crate::files::check_target(p, "result file")?;
    }
    let r = run::instance(&req, (model, property), a.timeout, progress)?;
    let o = &r.outcome;
    println!(
        "{} in {:.2} s ({}/{} disjuncts excluded by bounds{}){}",
        o.verdict.word(),
        r.seconds,
        o.excluded,
        o.disjuncts,
        run::search_note(o),
        o.bounds_note
            .as_ref()
            .map(|n| format!("; bounds: {n}"))
            .unwrap_or_default()
    );
    if let Some(p) = &a.result {
        run::write_result(p, run::result_text(o))?;
    }
    Ok(match o.verdict {
        Verdict::Holds => Exit::Pass,
        Verdict::Violated(_) => Exit::PolicyFailed,
        Verdict::Unknown => Exit::Unknown,
        Verdict::Timeout => Exit::Timeout,
    })
}
