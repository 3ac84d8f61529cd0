//! Merging certificate files, which are untrusted input: each shard checked (modes, radius,
//! input set, results), the shards of a gate checked to be one run covering the test set once,
//! and the engine's [`CertifyOutcome`] rebuilt from them ([`MergedGate`]), so the reports come
//! from the same code path as a direct run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bounds::ball::BallSpec;
use crate::bounds::certify::{Mode, Refusal};
use crate::engine::run::{CertifyOutcome, ModeOutcome};
use crate::error::LipfpError;
use crate::gate::assemble::GateHead;
use crate::gate::baseline::Baseline;
use crate::policy::{Radius, Thresholds};
use crate::progress::printable;
use crate::proto_gen::{CertificateFile, GateCertificates, Instance};
use crate::report::complete::CompleteReport;
use crate::report::{GateReport, SubjectFacts};

use super::complete;

/// `(count, rest)` of a note counting converted input values, `"<count> input values changed
/// when converted ..."`: each shard counts its own points.
fn changed_inputs_note(note: &str) -> Option<(u64, &str)> {
    let (count, rest) = note.split_once(' ')?;
    let count = count.parse().ok()?;
    rest.starts_with("input values changed when converted ")
        .then_some((count, rest))
}

/// The notes of a gate's shards: shard notes dropped, duplicates removed, and the counts of
/// converted input values summed over the shards (one note, where the first shard had it).
fn merge_notes<'a>(shards: impl Iterator<Item = &'a [String]>) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    // (index in `notes`, text after the count, summed count)
    let mut counts: Vec<(usize, &str, u64)> = Vec::new();
    for shard in shards {
        for n in shard {
            if let Some((count, rest)) = changed_inputs_note(n) {
                match counts.iter_mut().find(|(_, r, _)| *r == rest) {
                    Some(c) => c.2 = c.2.saturating_add(count),
                    None => {
                        counts.push((notes.len(), rest, count));
                        notes.push(String::new());
                    }
                }
            } else if !n.starts_with("shard ") && !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    for (k, rest, count) in counts {
        notes[k] = format!("{count} {rest}");
    }
    notes
}

/// A gate reassembled from one or more certificate files.
pub struct MergedGate {
    /// Gate name.
    pub name: String,
    /// The reassembled outcome (every point of the test set, in index order).
    pub outcome: CertifyOutcome,
    /// Radius.
    pub radius: Radius,
    /// Mode the thresholds apply to.
    pub mode: Mode,
    /// Thresholds.
    pub thresholds: Thresholds,
    /// Model, format, iterations and notes (deduplicated, shard notes dropped).
    pub facts: SubjectFacts,
    /// 1-based policy line (0 when unknown).
    pub policy_line: usize,
    /// The model as the policy names it (`None` when the files do not say).
    pub model_name: Option<String>,
    /// Each certificate file of the gate and the test-set indices it holds.
    pub shards: Vec<(PathBuf, Vec<usize>)>,
    /// Mode `complete`'s budget and branch and bound's figures, summed over the shards (the
    /// files' claims), when every shard has them.
    pub complete: Option<CompleteReport>,
    /// Per point (index order), its true class and whether it was classified correctly, when
    /// the files have labels.
    pub labelled: Option<Vec<(usize, bool)>>,
    /// The test-set hash a single file over the whole test set claims (unverified: only for
    /// matching a baseline's points with a run's).
    pub claimed_test_set_hash: Option<String>,
}

impl MergedGate {
    /// The merged gate judged (against `baseline` when given, with whether the policy
    /// requires it to compare) into its report.
    pub fn judge(&self, baseline: Option<(&Baseline, bool)>) -> GateReport {
        let head = GateHead {
            name: &self.name,
            radius: &self.radius,
            mode: self.mode,
            thresholds: &self.thresholds,
            baseline,
            policy_line: (self.policy_line > 0).then_some(self.policy_line),
            model_name: self.model_name.clone(),
            withheld: None,
        };
        head.judge_merged(&self.facts, &self.outcome, self.complete.clone())
    }
}

/// Check one shard of a gate on its own: a mode list with `real`, no repeats, known names; the
/// threshold mode among them; `count` instances, all within `[first, first + count)` of a
/// non-empty test set of `total` points.
fn check_shard(path: &Path, g: &GateCertificates) -> Result<(), LipfpError> {
    let name = &g.gate;
    let bad = |m: String| Err(LipfpError::data(path, format!("gate `{name}`: {m}")));
    if g.modes.is_empty() || !g.modes.iter().any(|m| m == Mode::Real.name()) {
        return bad(format!("mode list {:?} lacks the real ceiling", g.modes));
    }
    for (k, m) in g.modes.iter().enumerate() {
        if Mode::parse(m).is_none() {
            return bad(format!("unknown mode `{m}`"));
        }
        if g.modes[..k].contains(m) {
            return bad(format!("mode `{m}` is listed twice"));
        }
    }
    if !g.ball.is_empty() && BallSpec::from_description(&g.ball).is_none() {
        return bad(format!("unknown input set `{}`", printable(&g.ball)));
    }
    if !g.modes.contains(&g.threshold_mode) {
        return bad(format!(
            "the threshold mode `{}` is not among the certified modes {:?}",
            g.threshold_mode, g.modes
        ));
    }
    let end = g.first.checked_add(g.count);
    if g.total == 0 || end.is_none_or(|e| e > g.total) || g.instances.len() as u64 != g.count {
        return bad(format!(
            "shard [{}, +{}) of a test set of {} points holds {} points",
            g.first,
            g.count,
            g.total,
            g.instances.len()
        ));
    }
    if let Some(i) = g
        .instances
        .iter()
        .find(|i| i.index < g.first || i.index - g.first >= g.count)
    {
        return bad(format!("point {} lies outside the shard", i.index));
    }
    Ok(())
}

/// Whether two shards of one gate describe the same run (everything but the slice and timings).
fn same_run(a: &GateCertificates, b: &GateCertificates) -> bool {
    a.model == b.model
        && a.model_hash == b.model_hash
        && a.format == b.format
        && a.ftz == b.ftz
        && a.execution == b.execution
        && a.epsilon == b.epsilon
        && a.epsilons == b.epsilons
        && a.ball == b.ball
        && a.gram_iterations == b.gram_iterations
        && a.modes == b.modes
        && a.threshold_mode == b.threshold_mode
        && a.thresholds == b.thresholds
        && a.total == b.total
        && a.has_labels == b.has_labels
        && a.policy_line == b.policy_line
        && complete::same_budget(a, b)
}

/// The shards of one gate: each certificate file holding part of it, with that part.
type Shards<'a> = Vec<(&'a Path, &'a GateCertificates)>;

/// The gates of several certificate files in order of first appearance, each with its shards
/// in file order.
fn group_by_gate(files: &[(PathBuf, CertificateFile)]) -> Vec<(String, Shards<'_>)> {
    let mut position: BTreeMap<&str, usize> = BTreeMap::new();
    let mut gates: Vec<(String, Shards<'_>)> = Vec::new();
    for (path, f) in files {
        for g in &f.gates {
            let k = *position.entry(g.gate.as_str()).or_insert_with(|| {
                gates.push((g.gate.clone(), Vec::new()));
                gates.len() - 1
            });
            gates[k].1.push((path.as_path(), g));
        }
    }
    gates
}

/// Check the shards of gate `name` (`parts`, at least one) each on their own, describing the
/// run of the first, and holding together as many points as the test set (checked before
/// allocating anything of the test set's size: the shards' points are in memory).
fn check_one_run(name: &str, parts: &[(&Path, &GateCertificates)]) -> Result<(), LipfpError> {
    let (path0, g0) = parts[0];
    for (p, g) in parts {
        check_shard(p, g)?;
        if !same_run(g, g0) {
            return Err(LipfpError::data(
                p,
                format!(
                    "gate `{name}` was certified differently than in {} (model, format, execution, \
                     radius, input set, modes, thresholds, complete budget, test-set size or labels differ); \
                     refusing to merge",
                    path0.display()
                ),
            ));
        }
    }
    let held: u64 = parts.iter().map(|(_, g)| g.count).sum();
    if held != g0.total {
        return Err(LipfpError::data(
            path0,
            format!(
                "gate `{name}`: the certificate files hold {held} of {} points; give every shard's file",
                g0.total
            ),
        ));
    }
    Ok(())
}

/// The `total` points of gate `name` in test-set order, each from the one shard holding it: an
/// index beyond the test set, a point in two shards or a missing point is an error.
fn gather_instances<'a>(
    name: &str,
    parts: &[(&Path, &'a GateCertificates)],
    total: usize,
) -> Result<Vec<&'a Instance>, LipfpError> {
    let mut instances: Vec<Option<&Instance>> = vec![None; total];
    for (p, g) in parts {
        for inst in &g.instances {
            let k = inst.index as usize;
            if k >= total {
                return Err(LipfpError::data(
                    p,
                    format!("gate `{name}`: index {k} beyond the test set ({total})"),
                ));
            }
            if instances[k].is_some() {
                return Err(LipfpError::data(
                    p,
                    format!("gate `{name}`: point {k} appears in more than one shard"),
                ));
            }
            instances[k] = Some(inst);
        }
    }
    let missing = instances.iter().filter(|i| i.is_none()).count();
    if missing > 0 {
        let first_missing = instances.iter().position(|i| i.is_none()).unwrap_or(0);
        return Err(LipfpError::data(
            parts[0].0,
            format!(
                "gate `{name}`: {missing} of {total} points are missing (first: {first_missing}); \
                 give every shard's certificate file"
            ),
        ));
    }
    Ok(instances.into_iter().flatten().collect())
}

/// The certified modes a shard at `path` lists, in its order.
fn shard_modes(path: &Path, g: &GateCertificates) -> Result<Vec<Mode>, LipfpError> {
    g.modes
        .iter()
        .map(|m| {
            Mode::parse(m).ok_or_else(|| LipfpError::data(path, format!("unknown mode `{m}`")))
        })
        .collect()
}

/// Check each point of gate `name` has one verdict, slack and refusal per mode (`width`
/// modes), and a refusal with a known code exactly where it is not certified.
fn check_results(
    name: &str,
    path: &Path,
    instances: &[&Instance],
    width: usize,
) -> Result<(), LipfpError> {
    let malformed = |i: &&&Instance| {
        i.certified.len() != width
            || i.slack.len() != width
            || i.refusal.len() != width
            || i.refusal
                .iter()
                .zip(&i.certified)
                .any(|(r, &c)| c != r.is_empty() || (!c && Refusal::from_code(r).is_none()))
    };
    match instances.iter().find(malformed) {
        Some(bad) => Err(LipfpError::data(
            path,
            format!("gate `{name}`: point {} has malformed results", bad.index),
        )),
        None => Ok(()),
    }
}

/// Whether a point's prediction (if any) equals its label.
fn is_correct(i: &Instance) -> bool {
    i.prediction >= 0 && i.prediction == i.label
}

/// A per-mode figure of mode `m` (`figure` picks the list) summed over a gate's shards, in
/// shard order; 0 where a shard lacks it.
fn shard_sum(
    parts: &[(&Path, &GateCertificates)],
    m: usize,
    figure: impl Fn(&GateCertificates) -> &[f64],
) -> f64 {
    parts
        .iter()
        .map(|(_, g)| figure(g).get(m).copied().unwrap_or(0.0))
        .sum::<f64>()
}

/// The outcome of `mode`, the `m`-th certified mode, rebuilt from the gate's merged points and
/// its shards' sums (degradation, `L·eps`, seconds); VRA and per-class figures when
/// `labels_ok`.
fn mode_outcome(
    m: usize,
    mode: Mode,
    instances: &[&Instance],
    parts: &[(&Path, &GateCertificates)],
    labels_ok: bool,
) -> ModeOutcome {
    let verdicts: Vec<bool> = instances.iter().map(|i| i.certified[m]).collect();
    let refusal_of: Vec<Option<Refusal>> = instances
        .iter()
        .map(|i| Refusal::from_code(&i.refusal[m]))
        .collect();
    let mut refusals = BTreeMap::new();
    for r in refusal_of.iter().flatten() {
        *refusals.entry(r.to_string()).or_insert(0) += 1;
    }
    let deg = shard_sum(parts, m, |g| &g.degradation_sum);
    let leps = shard_sum(parts, m, |g| &g.leps_sum);
    ModeOutcome {
        mode,
        certified: verdicts.iter().filter(|&&b| b).count(),
        vra: labels_ok.then(|| {
            instances
                .iter()
                .filter(|i| i.certified[m] && is_correct(i))
                .count()
        }),
        refusals,
        refusal_of,
        degradation_sums: (deg, leps),
        slacks: instances.iter().map(|i| i.slack[m]).collect(),
        conservatism: crate::engine::run::conservatism_ratio(mode, deg, leps),
        seconds: shard_sum(parts, m, |g| &g.mode_seconds),
        by_class: if labels_ok {
            let labels: Vec<usize> = instances.iter().map(|i| i.label.max(0) as usize).collect();
            let correct: Vec<bool> = instances.iter().map(|i| is_correct(i)).collect();
            crate::engine::run::tally_classes(&labels, &verdicts, &correct, 0)
        } else {
            Vec::new()
        },
        verdicts,
    }
}

/// The radius a shard at `path` records: its decimal `epsilon` read exactly, or its
/// per-instance radii file.
fn shard_radius(path: &Path, g: &GateCertificates) -> Result<Radius, LipfpError> {
    if g.epsilons.is_empty() {
        Radius::parse_decimal(&g.epsilon)
            .map_err(|m| LipfpError::data(path, format!("epsilon: {m}")))
    } else {
        Ok(Radius::PerInstance(g.epsilons.clone().into()))
    }
}

/// The input set a shard records (files of earlier versions name none: they certified l2 balls).
fn shard_ball(g: &GateCertificates) -> String {
    if g.ball.is_empty() {
        "l2".to_string()
    } else {
        g.ball.clone()
    }
}

/// Model, format, execution and iterations a shard at `path` records, with the gate's merged
/// `notes`.
fn shard_facts(
    path: &Path,
    g: &GateCertificates,
    notes: Vec<String>,
) -> Result<SubjectFacts, LipfpError> {
    Ok(SubjectFacts {
        model: g.model.clone(),
        model_hash: g.model_hash.clone(),
        format: g
            .format
            .parse()
            .map_err(|m: String| LipfpError::data(path, m))?,
        ftz: g.ftz,
        execution: g.execution.clone(),
        gram_iterations: g.gram_iterations,
        test_set_hash: None,
        notes,
        ball: shard_ball(g),
    })
}

/// Reassemble gate `name` from its shards (`parts`, at least one): checked to be one run that
/// covers the test set exactly once with well-formed results.
fn merge_gate(
    name: String,
    parts: &[(&Path, &GateCertificates)],
) -> Result<MergedGate, LipfpError> {
    check_one_run(&name, parts)?;
    let (path0, g0) = parts[0];
    let total = g0.total as usize;
    let instances = gather_instances(&name, parts, total)?;
    let modes = shard_modes(path0, g0)?;
    check_results(&name, path0, &instances, modes.len())?;
    let labels_ok = g0.has_labels;
    let correct = labels_ok.then(|| instances.iter().filter(|i| is_correct(i)).count());
    let mode_outcomes: Vec<ModeOutcome> = modes
        .iter()
        .enumerate()
        .map(|(m, &mode)| mode_outcome(m, mode, &instances, parts, labels_ok))
        .collect();
    let complete = complete::merged(
        parts,
        mode_outcomes.iter().find(|m| m.mode == Mode::Complete),
    );
    let mode = Mode::parse(&g0.threshold_mode)
        .ok_or_else(|| LipfpError::data(path0, format!("unknown mode `{}`", g0.threshold_mode)))?;
    let radius = shard_radius(path0, g0)?;
    let mut notes = merge_notes(parts.iter().map(|(_, g)| g.notes.as_slice()));
    if parts.len() > 1 {
        notes.push(format!("merged from {} certificate files", parts.len()));
    }
    Ok(MergedGate {
        name,
        outcome: CertifyOutcome {
            n: total,
            correct,
            modes: mode_outcomes,
            norms_s: parts.iter().map(|(_, g)| g.norms_s).fold(0.0, f64::max),
            certify_s: parts.iter().map(|(_, g)| g.certify_s).sum(),
            reference_s: parts.iter().map(|(_, g)| g.reference_s).sum(),
            model_refusal: None,
            radii_hash: None,
            notes: Vec::new(),
        },
        radius,
        mode,
        thresholds: (g0
            .thresholds
            .as_ref()
            .map(Thresholds::from_proto)
            .transpose())
        .map_err(|m| LipfpError::data(path0, format!("thresholds: {m}")))?
        .unwrap_or_default(),
        facts: shard_facts(path0, g0, notes)?,
        policy_line: g0.policy_line as usize,
        model_name: (!g0.model_name.is_empty()).then(|| g0.model_name.clone()),
        labelled: labels_ok.then(|| {
            (instances.iter())
                .map(|i| (i.label.max(0) as usize, is_correct(i)))
                .collect()
        }),
        claimed_test_set_hash: (parts.len() == 1 && g0.count == g0.total)
            .then(|| g0.test_set_sha256.clone())
            .filter(|h| !h.is_empty()),
        complete,
        shards: parts
            .iter()
            .map(|(p, g)| {
                let idx = g.instances.iter().map(|i| i.index as usize).collect();
                (p.to_path_buf(), idx)
            })
            .collect(),
    })
}

/// Merge the gates of several certificate files: shards of the same gate are concatenated,
/// checked to agree on what was certified and to cover the test set exactly once.
pub fn merge(files: &[(PathBuf, CertificateFile)]) -> Result<Vec<MergedGate>, LipfpError> {
    group_by_gate(files)
        .into_iter()
        .map(|(name, parts)| merge_gate(name, &parts))
        .collect()
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
