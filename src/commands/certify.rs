//! `lipfp certify`: one model, one test set, one radius, certified into a one-gate [`Report`]
//! (no thresholds), with the optional robustness curve, falsifier and certificate file.
//!
//! The command line is parsed by [`crate::cli`] into a [`CertifyRequest`]; [`run()`] does the
//! work and hands back what is to be published, which the caller writes.

use std::path::PathBuf;

use crate::bounds::certify::{Mode, MODE_NAMES};
use crate::engine::attack;
use crate::engine::gate_work::{run_gate, GateWork};
use crate::engine::run::{self, CertifyOptions, SubjectSpec};
use crate::error::LipfpError;
use crate::files::Artifact;
use crate::gate::assemble::GateHead;
use crate::policy::{CompleteBudget, CurveGrid, Radius, Thresholds};
use crate::progress::Progress;
use crate::proto_gen::CertificateFile;
use crate::report::certificates::{self, GateMeta};
use crate::report::{self as reports, Report};

/// The gate name of `lipfp certify`'s one gate.
const GATE: &str = "certify";

/// What `lipfp certify` runs, its flags already parsed.
#[derive(Debug)]
pub struct CertifyRequest {
    /// The subject to load (model, format, runtime, data, Gram iterations, shard).
    pub spec: SubjectSpec,
    /// The radius (uniform or per instance).
    pub radius: Radius,
    /// The modes, the first one reported (never empty).
    pub modes: Vec<Mode>,
    /// The `--curve` list as given (`auto` for the automatic grid). It is parsed before the
    /// subject is loaded, where a bad list is a usage error naming `--curve`.
    pub curve: Option<String>,
    /// Write the curve as an SVG chart here.
    pub plot: Option<PathBuf>,
    /// Run the falsifier on the points the first mode does not certify.
    pub attack: bool,
    /// With `attack`: write the adversarial inputs found here.
    pub attack_witnesses: Option<PathBuf>,
    /// Write the per-instance certificates here.
    pub certificates: Option<PathBuf>,
    /// Seconds the local bounds may take (`None`: no limit).
    pub local_budget_s: Option<f64>,
    /// Let `best` consult local bounds where it does not otherwise certify.
    pub best_local: bool,
    /// With mode `complete`, branch and bound's budget.
    pub complete: CompleteBudget,
}

/// The result of `lipfp certify` before it is published.
pub struct CertifyRun {
    /// The one `certify` gate.
    pub report: Report,
    /// The files rendered besides the reports: SVG plot, witnesses, certificate file.
    pub artifacts: Vec<Artifact>,
}

/// Certify `req`: check the attack and curve requests, prepare the subject, certify every
/// point in every mode, then add the curve, the falsifier's bracket and the certificate file
/// when asked for.
pub fn run(req: &CertifyRequest, progress: &Progress) -> Result<CertifyRun, LipfpError> {
    let mode = first_mode(&req.modes)?;
    if req.attack {
        attack::check_cli(&req.radius, mode, req.attack_witnesses.as_deref())?;
    }
    let grid = (req.curve.as_deref())
        .map(|text| {
            CurveGrid::parse_list(text).map_err(|m| LipfpError::Usage(format!("--curve: {m}")))
        })
        .transpose()?;
    let subject = run::prepare(&req.spec, progress)?;
    let work = GateWork {
        label: String::new(),
        radius: &req.radius,
        modes: &req.modes,
        options: CertifyOptions {
            local_budget_s: req.local_budget_s,
            best_local: req.best_local,
        },
        complete: Some(req.complete),
        curve: grid.as_ref(),
        attack: req.attack,
    };
    let done = run_gate(&subject, &work, progress)?;
    let model_name = req.spec.model.display().to_string();
    let head = GateHead {
        name: GATE,
        radius: &req.radius,
        mode,
        thresholds: &Thresholds::default(),
        baseline: None,
        policy_line: None,
        model_name: Some(model_name.clone()),
        withheld: None,
    };
    let gate = head.judge_run(&subject, req.spec.gram_iterations, &done);
    let mut artifacts = Vec::new();
    if let (Some(path), Some(c)) = (&req.plot, &gate.curve) {
        let svg = reports::plot::svg(GATE, c, None)?;
        artifacts.push(Artifact::new(path, svg.into_bytes(), "SVG plot"));
    }
    let witnesses = req.attack_witnesses.as_ref().filter(|_| req.attack);
    if let (Some(path), Some(found)) = (witnesses, done.bracket(mode)) {
        artifacts.extend(attack::witnesses::artifacts(path, &subject, found));
    }
    if let Some(path) = &req.certificates {
        let meta = GateMeta {
            name: GATE,
            radius: &req.radius,
            mode,
            thresholds: &Thresholds::default(),
            gram_iterations: req.spec.gram_iterations,
            policy_line: 0,
            model_name: &model_name,
            complete: gate.complete.as_ref(),
        };
        let file = CertificateFile {
            tool_version: env!("CARGO_PKG_VERSION").into(),
            policy: String::new(),
            gates: vec![certificates::gate_certificates(
                &meta,
                &subject,
                &done.outcome,
            )],
        };
        artifacts.push(certificates::artifact(&file, path));
    }
    let report = Report {
        lipfp_version: env!("CARGO_PKG_VERSION").into(),
        policy: None,
        gates: vec![gate],
    };
    Ok(CertifyRun { report, artifacts })
}

/// The mode the gate reports: the first of `modes` (the parsed `--mode` list is never empty;
/// an empty request is refused as `--mode` refuses an empty list).
fn first_mode(modes: &[Mode]) -> Result<Mode, LipfpError> {
    modes.first().copied().ok_or_else(|| {
        LipfpError::Usage(format!("--mode: no mode given (supported: {MODE_NAMES})"))
    })
}
