//! `[baseline] certificates = "..."`: a previous run's certificate file read as the baseline of
//! `lipfp check` (figures and per-point verdicts per gate and mode; the per-point regression
//! is [`crate::gate::regression`]'s).

use std::collections::BTreeMap;
use std::path::Path;

use super::MergedGate;
use crate::error::LipfpError;
use crate::gate::baseline::{Baseline, BaselineFigures, CertificateGate, Identity};
use crate::gate::verdict::pct;

/// Read and merge the certificate file at `path` into a baseline.
pub fn read_baseline(path: &Path) -> Result<Baseline, LipfpError> {
    let file = super::read::read(path)?;
    let merged = super::merge::merge(&[(path.to_path_buf(), file)])?;
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
