//! `[baseline] certificates = "..."`: a previous run's certificate file as the baseline of
//! `lipfp check`, and the per-point regression of each gate against it
//! ([`crate::gate::regression`]), with the lost points written on request (`--regressions`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::engine::run::{CertifyOutcome, Subject};
use crate::error::LipfpError;
use crate::files::{npy_bytes, Artifact};
use crate::gate::baseline::{Baseline, BaselineFigures, CertificateGate, Identity};
use crate::gate::regression::{self, Regression};
use crate::gate::verdict::pct;
use crate::report::certificates::{self, MergedGate};
use crate::report::GateReport;

/// Read and merge the certificate file at `path` into a baseline.
pub fn load(path: &Path) -> Result<Baseline, LipfpError> {
    let file = certificates::read(path)?;
    let merged = certificates::merge(&[(path.to_path_buf(), file)])?;
    Ok(Baseline::from_certificates(
        path,
        merged.into_iter().map(baseline_gate).collect(),
    ))
}

/// One merged gate as a baseline gate: identity, figures and per-point VRA per mode.
fn baseline_gate(m: MergedGate) -> CertificateGate {
    let n = m.outcome.n;
    let labelled = m.labelled.unwrap_or_default();
    let mut modes = BTreeMap::new();
    let mut vra = BTreeMap::new();
    for mo in &m.outcome.modes {
        let name = mo.mode.name().to_string();
        let figures = BaselineFigures {
            certified_pct: pct(mo.certified, n),
            vra_pct: mo.vra.map(|v| pct(v, n)),
            vra_drop_p: None,
        };
        modes.insert(name.clone(), figures);
        if labelled.len() == n {
            let flags = (mo.verdicts.iter().zip(&labelled))
                .map(|(&c, &(_, ok))| c && ok)
                .collect();
            vra.insert(name, flags);
        }
    }
    CertificateGate {
        identity: Identity {
            epsilon: m.radius.fields().0,
            epsilons_sha256: None,
            format: Some(m.facts.format.name().to_string()),
            execution: Some(m.facts.execution.clone()),
            test_set_hash: m.claimed_test_set_hash,
            ball: Some(m.facts.ball.clone()),
        },
        name: m.name,
        modes,
        vra,
        labels: labelled.iter().map(|&(l, _)| l).collect(),
    }
}

/// The per-point regression of gate `name` in `mode` against `baseline`, when the baseline has
/// per-point data and this run has labels over the same points.
pub fn compare(
    baseline: &Baseline,
    (name, mode): (&str, &str),
    subject: &Subject,
    outcome: &CertifyOutcome,
) -> Option<Regression> {
    let (before, labels) = baseline.points(name, mode)?;
    let now_labels = subject.labels.as_ref()?;
    let verdicts = &outcome
        .modes
        .iter()
        .find(|m| m.mode.name() == mode)?
        .verdicts;
    if before.len() != verdicts.len() || now_labels.as_slice() != labels {
        return None;
    }
    let now: Vec<bool> = (verdicts.iter().enumerate())
        .map(|(i, &c)| c && subject.predictions[i] == Some(now_labels[i]))
        .collect();
    Some(regression::compare(
        &baseline.path().display().to_string(),
        before,
        &now,
        labels,
    ))
}

/// The lost points of every gate with a regression as `.npy` files of `u64` test-set indices:
/// at `path` for one such gate, else at `<stem>-<gate key>.npy` beside it per gate.
pub fn artifacts(gates: &[GateReport], path: &Path) -> Vec<Artifact> {
    let with: Vec<(&GateReport, &Regression)> = gates
        .iter()
        .filter_map(|g| g.regression.as_ref().map(|r| (g, r)))
        .collect();
    let target = |g: &GateReport| -> PathBuf {
        if with.len() == 1 {
            return path.to_path_buf();
        }
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let key = crate::report::github::output_key(&g.name);
        path.with_file_name(format!("{stem}-{key}.npy"))
    };
    with.iter()
        .map(|(g, r)| {
            let lost: Vec<u64> = r.lost.iter().map(|&i| i as u64).collect();
            let bytes = npy_bytes(&[lost.len() as u64], &lost);
            Artifact::new(&target(g), bytes, "regressions file")
        })
        .collect()
}
