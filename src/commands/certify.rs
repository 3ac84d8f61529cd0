//! `lipfp certify`: one model, one test set, one radius, certified into a one-gate [`Report`]
//! (no thresholds), with the optional robustness curve, falsifier and certificate file.
//!
//! The command line is parsed by [`crate::cli`] into a [`CertifyRequest`]; [`run()`] does the
//! work and hands back what is to be published, which the caller writes.

use std::path::PathBuf;

use crate::bounds::certify::{Mode, MODE_NAMES};
use crate::engine::attack;
use crate::engine::complete::points::decide_points;
use crate::engine::run::{self, Subject, SubjectSpec};
use crate::error::LipfpError;
use crate::files::Artifact;
use crate::gate::assemble::GateRun;
use crate::gate::curve::CurveReport;
use crate::policy::{CompleteBudget, CurveGrid, Radius, Thresholds};
use crate::progress::Progress;
use crate::proto_gen::CertificateFile;
use crate::report::attack::AttackReport;
use crate::report::certificates::{self, GateMeta};
use crate::report::complete::CompleteReport;
use crate::report::{self as reports, Report, SubjectFacts};

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
    /// The `--curve` list as given (`auto` for the automatic grid). It is parsed after the
    /// certification, where a bad list is a usage error naming `--curve`.
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

/// Certify `req`: check the attack request, prepare the subject, certify every point in every
/// mode, then add the curve, the falsifier's bracket and the certificate file when asked for.
pub fn run(req: &CertifyRequest, progress: &Progress) -> Result<CertifyRun, LipfpError> {
    let mode = first_mode(&req.modes)?;
    if req.attack {
        attack::check_cli(&req.radius, mode, req.attack_witnesses.as_deref())?;
    }
    let subject = run::prepare(&req.spec, progress)?;
    progress.stage(&format!("certifying {} points", subject.n()));
    let options = run::CertifyOptions {
        local_budget_s: req.local_budget_s,
        best_local: req.best_local,
    };
    let mut outcome =
        run::certify_with_options(&subject, &req.radius, &req.modes, &options, progress)?;
    let decisions = (req.modes.contains(&Mode::Complete))
        .then(|| decide_points(&subject, &req.radius, &mut outcome, req.complete, progress))
        .transpose()?;
    let model_name = req.spec.model.display().to_string();
    let mut artifacts = Vec::new();
    let curve = curve(req, &subject, &mut artifacts, progress)?;
    let mut complete = None;
    let mut attack = None;
    if let Some(d) = &decisions {
        let settled = outcome.mode(Mode::Complete);
        complete = settled.map(|m| CompleteReport::new(m, d.into(), (&req.complete).into()));
        if mode == Mode::Complete {
            attack = Some(AttackReport::of_subject(&d.attack, &subject));
            if let Some(p) = req.attack_witnesses.as_ref().filter(|_| req.attack) {
                artifacts.extend(attack::witnesses::artifacts(p, &subject, &d.attack));
            }
        }
    }
    if req.attack && attack.is_none() {
        let found = attack::falsify(&subject, &req.radius, mode, &outcome, progress)?;
        attack = Some(AttackReport::of_subject(&found, &subject));
        if let Some(p) = &req.attack_witnesses {
            artifacts.extend(attack::witnesses::artifacts(p, &subject, &found));
        }
    }
    let gate = GateRun {
        name: GATE,
        facts: &SubjectFacts::of(&subject, req.spec.gram_iterations),
        radius: &req.radius,
        mode,
        outcome: &outcome,
        thresholds: &Thresholds::default(),
        baseline: None,
        regression: None,
        policy_line: None,
        model_name: Some(model_name.clone()),
        curve,
        complete,
        attack,
        withheld: None,
    }
    .build();
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
            gates: vec![certificates::gate_certificates(&meta, &subject, &outcome)],
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

/// With a curve asked for: the curve and its notes, and with a plot its SVG among the
/// `artifacts`.
fn curve(
    req: &CertifyRequest,
    subject: &Subject,
    artifacts: &mut Vec<Artifact>,
    progress: &Progress,
) -> Result<Option<(CurveReport, Vec<String>)>, LipfpError> {
    let Some(text) = &req.curve else {
        return Ok(None);
    };
    let grid =
        CurveGrid::parse_list(text).map_err(|m| LipfpError::Usage(format!("--curve: {m}")))?;
    progress.stage("robustness curve");
    let curve = run::certify_curve(
        subject,
        &grid,
        &req.modes,
        &run::CertifyOptions {
            local_budget_s: req.local_budget_s,
            best_local: req.best_local,
        },
    )?;
    let c = CurveReport::new(&curve, subject.n());
    if let Some(path) = &req.plot {
        let svg = reports::plot::svg(GATE, &c, None)?;
        artifacts.push(Artifact::new(path, svg.into_bytes(), "SVG plot"));
    }
    Ok(Some((c, curve.notes())))
}
