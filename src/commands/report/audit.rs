//! `lipfp report --config POLICY [--verify K]`: certificate files checked against the policy,
//! model and data they claim to certify instead of trusted.
//!
//! A certificate file is written by another CI job, so everything in it is input. With the
//! policy, lipfp takes the gates, thresholds, radii and modes from the policy, reloads each
//! gate's model and data, requires the files to name the same converted network (hash), execution
//! model, Gram iterations and number of points, recomputes predictions, accuracy and VRA from the
//! data, and (with `--verify K`) re-certifies `K` points of every file, chosen with a key the file
//! writer cannot know, requiring the same verdict in every mode.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::bounds::certify::Mode;
use crate::engine::complete::points::recheck_points;
use crate::engine::run::{self, ReferencePlan, Subject, SubjectSpec};
use crate::error::LipfpError;
use crate::policy::{Gate, Policy, Target};
use crate::progress::Progress;
use crate::report::certificates::MergedGate;
use crate::report::complete::BudgetReport;

/// Check `merged` against `policy` and re-certify `verify` points of every certificate file;
/// on success the gates carry the policy's thresholds and recomputed accuracy and VRA.
pub fn audit(
    policy: &Policy,
    merged: &mut [MergedGate],
    verify: usize,
    progress: &Progress,
) -> Result<(), LipfpError> {
    check_gate_names(policy, merged)?;
    let mut subjects: Vec<(Target, Subject)> = Vec::new();
    for g in &policy.gates {
        if !subjects.iter().any(|(t, _)| *t == g.target) {
            subjects.push((
                g.target.clone(),
                prepare(policy, &g.target, merged, progress)?,
            ));
        }
        let subject = &subjects
            .iter()
            .find(|(t, _)| *t == g.target)
            .expect("prepared above")
            .1;
        let m = merged
            .iter_mut()
            .find(|m| m.name == g.name)
            .expect("names checked above");
        check_run(policy, g, m, subject)?;
        progress.stage(&format!("gate `{}`: re-certifying sampled points", g.name));
        let checked = verify_sample(g, m, subject, verify)?;
        recompute_accuracy(m, subject);
        m.thresholds = g.thresholds.clone();
        m.mode = g.mode();
        m.policy_line = g.line;
        m.model_name = Some(g.model_name.clone());
        m.facts.test_set_hash = Some(subject.test_set_hash.clone());
        m.facts.notes.push(format!(
            "checked against {}: model hash, execution model, point count, predictions, labels, \
             accuracy and VRA recomputed; {checked} points re-certified with identical verdicts",
            policy.path.display()
        ));
    }
    Ok(())
}

/// The policy's gates and the files' gates must be the same set.
fn check_gate_names(policy: &Policy, merged: &[MergedGate]) -> Result<(), LipfpError> {
    for g in &policy.gates {
        if !merged.iter().any(|m| m.name == g.name) {
            return Err(LipfpError::policy(
                &policy.path,
                format!(
                    "gate `{}` (line {}) has no certificates in the files given",
                    g.name, g.line
                ),
            ));
        }
    }
    if let Some(m) = merged
        .iter()
        .find(|m| !policy.gates.iter().any(|g| g.name == m.name))
    {
        let file = m.shards.first().map(|s| s.0.clone()).unwrap_or_default();
        return Err(LipfpError::data(
            &file,
            format!("gate `{}` is not in {}", m.name, policy.path.display()),
        ));
    }
    Ok(())
}

/// Load the target's model and data (every point) as `lipfp check` does, with the float64
/// reference wherever the policy's gates on it or the modes their files hold need it (every
/// mode in a file is re-certified).
fn prepare(
    policy: &Policy,
    t: &Target,
    merged: &[MergedGate],
    progress: &Progress,
) -> Result<Subject, LipfpError> {
    let in_files = policy
        .gates
        .iter()
        .filter(|g| g.target == *t)
        .filter_map(|g| {
            let m = merged.iter().find(|m| m.name == g.name)?;
            let modes: Vec<Mode> = m.outcome.modes.iter().map(|mo| mo.mode).collect();
            Some(ReferencePlan::for_run(&modes, &g.radius, None))
        })
        .fold(ReferencePlan::None, ReferencePlan::union);
    let plan = ReferencePlan::for_target(policy, t).union(in_files);
    run::prepare(&SubjectSpec::for_target(t, plan, None), progress)
}

/// The files must describe the run the policy asks for, on this model and data.
fn check_run(
    policy: &Policy,
    g: &Gate,
    m: &MergedGate,
    subject: &Subject,
) -> Result<(), LipfpError> {
    let file = m.shards.first().map(|s| s.0.clone()).unwrap_or_default();
    let mismatch = |what: &str, file_says: String, policy_says: String| {
        Err(LipfpError::data(
            &file,
            format!(
                "gate `{}`: {what} is {file_says} in the certificate files but {policy_says} for {} (line {})",
                g.name,
                policy.path.display(),
                g.line
            ),
        ))
    };
    let facts = &m.facts;
    if facts.model_hash != subject.net.hash() {
        return mismatch(
            "the model hash",
            facts.model_hash.clone(),
            subject.net.hash(),
        );
    }
    let execution = subject.execution.to_string();
    if facts.execution != execution {
        return mismatch("the execution model", facts.execution.clone(), execution);
    }
    if facts.ball != g.target.ball.describe() {
        let (a, b) = (facts.ball.clone(), g.target.ball.describe());
        return mismatch("the input set (norm and range)", a, b);
    }
    if facts.gram_iterations != g.target.gram_iterations {
        let (a, b) = (facts.gram_iterations, g.target.gram_iterations);
        return mismatch("the Gram iteration count", a.to_string(), b.to_string());
    }
    if m.outcome.n != subject.total {
        let (a, b) = (m.outcome.n, subject.total);
        return mismatch("the number of points", a.to_string(), b.to_string());
    }
    if m.radius != g.radius {
        return mismatch(
            "the radius",
            format!("{:?}", m.radius),
            format!("{:?}", g.radius),
        );
    }
    if let (Some(budget), Some(c)) = (&g.complete, &m.complete) {
        let policy_budget = BudgetReport::from(budget);
        if c.budget != policy_budget {
            let (a, b) = (format!("{:?}", c.budget), format!("{policy_budget:?}"));
            return mismatch("mode complete's budget", a, b);
        }
    }
    if let Some(mode) = g.modes.iter().find(|&&x| m.outcome.mode(x).is_none()) {
        return mismatch(&format!("mode {mode}"), "missing".into(), "required".into());
    }
    Ok(())
}

/// `k` of `indices`, chosen by a key drawn afresh for every run (a per-process random SipHash
/// key), so a file's writer cannot know which of its points will be re-certified.
fn random_sample(indices: &[usize], k: usize) -> Vec<usize> {
    let key = RandomState::new();
    let mut keyed: Vec<(u64, usize)> = indices.iter().map(|&i| (key.hash_one(i), i)).collect();
    keyed.sort_unstable();
    keyed.into_iter().take(k).map(|(_, i)| i).collect()
}

/// Re-certify `k` random points of every file in every mode of the gate; returns how many.
fn verify_sample(
    g: &Gate,
    m: &MergedGate,
    subject: &Subject,
    k: usize,
) -> Result<usize, LipfpError> {
    let mut checked = 0;
    for (file, indices) in &m.shards {
        let sample = random_sample(indices, k);
        for mo in m.outcome.modes.iter().filter(|mo| mo.mode != Mode::Real) {
            let best_local = g.best_local || g.modes.contains(&Mode::Local);
            let again = match (mo.mode, g.complete) {
                (Mode::Complete, Some(budget)) => {
                    recheck_points(subject, &g.radius, &sample, budget)?
                }
                _ => run::certify_points(subject, &g.radius, mo.mode, &sample, best_local)?,
            };
            // where the run may have skipped local bounds (a time budget, best's lazy choice)
            // or branch and bound ran out of time, the recomputation certifies at least as much:
            // a file's certificates must hold, its refusals may be conservative
            let local = matches!(mo.mode, Mode::Local | Mode::Best);
            let one_way = (local && (g.best_local || g.local_budget_s.is_some()))
                || mo.mode == Mode::Complete;
            for (&i, &ok) in sample.iter().zip(&again) {
                let differs = if one_way {
                    mo.verdicts[i] && !ok
                } else {
                    mo.verdicts[i] != ok
                };
                if differs {
                    return Err(LipfpError::data(
                        file,
                        format!(
                            "gate `{}`: point {i} is {} in {} mode in this file, but re-certification from the model and data says {}; the file is corrupt or forged",
                            g.name,
                            if mo.verdicts[i] { "certified" } else { "not certified" },
                            mo.mode,
                            if ok { "certified" } else { "not certified" }
                        ),
                    ));
                }
            }
        }
        checked += sample.len();
    }
    Ok(checked)
}

/// Accuracy and VRA from the data's labels and the recomputed predictions, not the files'.
fn recompute_accuracy(m: &mut MergedGate, subject: &Subject) {
    let correct: Option<Vec<bool>> = subject.labels.as_ref().map(|labels| {
        subject
            .predictions
            .iter()
            .zip(labels)
            .map(|(p, y)| *p == Some(*y))
            .collect()
    });
    m.outcome.correct = correct.as_ref().map(|c| c.iter().filter(|&&b| b).count());
    for mo in &mut m.outcome.modes {
        mo.vra = correct.as_ref().map(|c| {
            mo.verdicts
                .iter()
                .zip(c)
                .filter(|(v, c)| **v && **c)
                .count()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_distinct_members_and_vary_between_runs() {
        let idx: Vec<usize> = (100..1100).collect();
        let a = random_sample(&idx, 10);
        assert_eq!(a.len(), 10);
        let mut d = a.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 10);
        assert!(a.iter().all(|i| idx.contains(i)));
        assert_eq!(random_sample(&idx[..3], 10).len(), 3);
        // a fresh key per call: two samples of 10 from 1000 coincide with negligible probability
        let b = random_sample(&idx, 10);
        assert_ne!(a, b);
    }
}
