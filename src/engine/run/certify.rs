//! Certificates over a prepared [`Subject`]: every point in every mode (in parallel), or a sample
//! of points (to re-check certificate files), and the per-mode figures the reports show.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use rayon::prelude::*;

use super::best_local::best_with_local;
use super::local_pass::{local_pass, LocalPass};
use super::subject::{CertifyOptions, Subject};
use crate::bounds::certify::{Centre, Certifier, Mode, PointResult, Refusal, Verdict};
use crate::engine::data;
use crate::engine::digest::radii_hash;
use crate::error::LipfpError;
use crate::policy::Radius;
use crate::progress::Progress;

/// The conservatism ratio from its sums (see [`ModeOutcome::conservatism`]): `None` for the
/// real mode, when no `L eps` was positive, and when the ratio is not finite (an `L eps` that
/// underflows to a tiny positive sum).
pub fn conservatism_ratio(mode: Mode, degradation: f64, leps: f64) -> Option<f64> {
    let r = degradation / leps;
    (leps > 0.0 && mode != Mode::Real && r.is_finite()).then_some(r)
}

/// Figures of one mode over the whole test set.
#[derive(Clone, Debug)]
pub struct ModeOutcome {
    /// The mode.
    pub mode: Mode,
    /// Points certified robust.
    pub certified: usize,
    /// Points certified and correctly classified (`None` without labels).
    pub vra: Option<usize>,
    /// Why the other points were not certified.
    pub refusals: BTreeMap<String, usize>,
    /// Per-point verdicts.
    pub verdicts: Vec<bool>,
    /// Per-point reason for not certifying (`None` when certified).
    pub refusal_of: Vec<Option<Refusal>>,
    /// Sums of the floating-point degradation and of `L eps` (the conservatism ratio's terms).
    pub degradation_sums: (f64, f64),
    /// Per-point certification slack `min_j (c_j - L eps - b_j)` (NaN when not computed).
    pub slacks: Vec<f64>,
    /// Conservatism ratio `E[E_ctr + E_ball] / E[L eps]` over points and competing classes
    /// (paper sec. 8, RQ2), when any point's bounds could be computed.
    pub conservatism: Option<f64>,
    /// Seconds spent in this mode's certificates.
    pub seconds: f64,
    /// Per true class (index = label): points, certified, certified and correct (empty
    /// without labels).
    pub by_class: Vec<ClassCount>,
}

/// The figures of one true class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    /// Points labelled with the class.
    pub n: usize,
    /// Of those, certified.
    pub certified: usize,
    /// Of those, certified and correctly classified.
    pub vra: usize,
}

/// Per true class, the counts of `ok` (certified) points (empty without labels).
fn count_by_class(subject: &Subject, ok: &[bool]) -> Vec<ClassCount> {
    let Some(labels) = subject.labels.as_ref() else {
        return Vec::new();
    };
    let correct: Vec<bool> = labels
        .iter()
        .zip(&subject.predictions)
        .map(|(&y, p)| *p == Some(y))
        .collect();
    tally_classes(labels, ok, &correct, subject.net.classes())
}

/// Per true class (at least `classes` entries): how many points carry the label, how many of
/// them are `ok` (certified), and how many are certified and `correct`. The table has at most
/// `classes + labels.len()` entries (labels come from files: a huge label must not size an
/// allocation); a label beyond that is not tallied.
pub fn tally_classes(
    labels: &[usize],
    ok: &[bool],
    correct: &[bool],
    classes: usize,
) -> Vec<ClassCount> {
    let largest = labels
        .iter()
        .map(|&y| y.saturating_add(1))
        .max()
        .unwrap_or(0);
    let width = largest
        .max(classes)
        .min(classes.saturating_add(labels.len()));
    let mut out = vec![ClassCount::default(); width];
    for ((&y, &c), &right) in labels.iter().zip(ok).zip(correct) {
        let Some(k) = out.get_mut(y) else {
            continue;
        };
        k.n += 1;
        k.certified += usize::from(c);
        k.vra += usize::from(c && right);
    }
    out
}

impl ModeOutcome {
    /// The outcome with the verdicts of the points `settled` replaced (`complete`'s decisions
    /// after `best`'s certificates) and every count derived from the verdicts again; `seconds`
    /// added to the mode's time.
    pub fn settle(&mut self, subject: &Subject, settled: &[(usize, Verdict)], seconds: f64) {
        for &(i, v) in settled {
            if let (Some(ok), Some(why)) = (self.verdicts.get_mut(i), self.refusal_of.get_mut(i)) {
                *ok = v.is_ok();
                *why = v.err();
            }
        }
        self.refusals.clear();
        for why in self.refusal_of.iter().flatten() {
            *self.refusals.entry(why.to_string()).or_insert(0) += 1;
        }
        self.certified = self.verdicts.iter().filter(|&&b| b).count();
        self.vra = subject.count_correct(&self.verdicts);
        self.by_class = count_by_class(subject, &self.verdicts);
        self.seconds += seconds;
    }
}

/// The result of certifying a subject at one radius.
#[derive(Clone, Debug)]
pub struct CertifyOutcome {
    /// Number of points.
    pub n: usize,
    /// Correct predictions (`None` without labels).
    pub correct: Option<usize>,
    /// One entry per mode, in the order asked (the real ceiling first).
    pub modes: Vec<ModeOutcome>,
    /// Seconds in norms.
    pub norms_s: f64,
    /// Seconds in the forward passes plus all certificates.
    pub certify_s: f64,
    /// Seconds in the float64 reference pass (0 when not run).
    pub reference_s: f64,
    /// Model-level reason why nothing can be certified, if any.
    pub model_refusal: Option<String>,
    /// SHA-256 of the per-instance radii of the whole test set (float64 bits, little-endian),
    /// when the radius is per instance.
    pub radii_hash: Option<String>,
    /// What the run did beyond the modes' figures (where `best` consulted local bounds, a local
    /// time budget that ran out).
    pub notes: Vec<String>,
}

impl CertifyOutcome {
    /// Outcome of `mode`, if computed.
    pub fn mode(&self, mode: Mode) -> Option<&ModeOutcome> {
        self.modes.iter().find(|m| m.mode == mode)
    }
}

/// [`Subject::centre`] with the local bounds of the pass `local` at radius `eps`, where computed.
fn centre_with_local<'a>(
    subject: &'a Subject,
    i: usize,
    local: Option<&'a LocalPass>,
    eps: f64,
) -> Centre<'a> {
    let mut c = subject.centre(i);
    c.local = local
        .and_then(|p| p.points[i].as_ref())
        .map(|p| p.margins(eps));
    c
}

/// The local-bounds pass at the points `indices` (each at its radius in `eps`, within
/// `budget_s` seconds), when `modes` has `local` and the model is certifiable.
fn local_for(
    subject: &Subject,
    modes: &[Mode],
    (eps, indices): (&[f64], &[usize]),
    budget_s: Option<f64>,
    progress: &Progress,
) -> Result<Option<LocalPass>, LipfpError> {
    let certifiable = subject.bounds.as_ref().is_ok_and(|b| b.vacuous.is_none());
    if !modes.iter().any(|m| m.needs_local()) || !certifiable {
        return Ok(None);
    }
    local_pass(subject, eps, indices, budget_s, progress).map(Some)
}

/// Whether each of the points `indices` (into `subject`) is certified in `mode`: the same
/// computation as [`certify`], for a sample (used to re-check certificate files). `local` and,
/// with `best_local`, `best` compute local bounds at every point of the sample (no time budget,
/// no first-order filter): where the run skipped them these verdicts may certify more.
pub fn certify_points(
    subject: &Subject,
    radius: &Radius,
    mode: Mode,
    indices: &[usize],
    best_local: bool,
) -> Result<Vec<bool>, LipfpError> {
    let (eps, _) = radii(subject, radius)?;
    let Ok(mb) = &subject.bounds else {
        return Ok(vec![false; indices.len()]);
    };
    if mode.needs_reference() && subject.reference.is_none() {
        return Err(LipfpError::Usage(
            "internal: a pre-deployment mode was asked for without the float64 reference pass"
                .into(),
        ));
    }
    let certifier = Certifier {
        fmt: mb,
        hi: subject.reference.as_ref().and_then(|r| r.bounds.as_ref()),
    };
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let with_local = if mode.certifies_as() == Mode::Best && (best_local || mode.needs_local()) {
        vec![mode, Mode::Local]
    } else {
        vec![mode]
    };
    let local = local_for(
        subject,
        &with_local,
        (&eps, &sorted),
        None,
        &Progress::silent(),
    )?;
    Ok(indices
        .iter()
        .map(|&i| {
            let c = centre_with_local(subject, i, local.as_ref(), eps[i]);
            certifier.certify(mode, &c, eps[i]).verdict.is_ok()
        })
        .collect())
}

/// Per-point radii, as upper bounds, and for per-instance radii the SHA-256 of the whole
/// file's radii (float64 bits, little-endian).
fn radii(subject: &Subject, radius: &Radius) -> Result<(Vec<f64>, Option<String>), LipfpError> {
    match radius {
        Radius::Uniform { up, .. } => Ok((vec![*up; subject.n()], None)),
        Radius::PerInstance(p) => {
            let all = data::load_epsilons(p, subject.total)?;
            let slice = radii_slice(p, &all, subject.first, subject.n())?;
            Ok((slice.to_vec(), Some(radii_hash(&all))))
        }
    }
}

/// The radii of points `first..first + n` of a test set of `total`, read from the
/// per-instance radii file `path`.
pub(super) fn point_radii(
    path: &Path,
    first: usize,
    n: usize,
    total: usize,
) -> Result<Vec<f64>, LipfpError> {
    let all = data::load_epsilons(path, total)?;
    radii_slice(path, &all, first, n).map(<[f64]>::to_vec)
}

/// Points `first..first + n` of the radii `all` read from `path`.
fn radii_slice<'a>(
    path: &Path,
    all: &'a [f64],
    first: usize,
    n: usize,
) -> Result<&'a [f64], LipfpError> {
    all.get(first..first + n)
        .ok_or_else(|| LipfpError::data(path, format!("fewer than {} radii", first + n)))
}

/// Certify every point of `subject` in each of `modes` (the real ceiling is always included).
pub fn certify(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
) -> Result<CertifyOutcome, LipfpError> {
    certify_with_progress(subject, radius, modes, &Progress::silent())
}

/// [`certify`], showing progress per mode.
pub fn certify_with_progress(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
    progress: &Progress,
) -> Result<CertifyOutcome, LipfpError> {
    certify_with_options(subject, radius, modes, &CertifyOptions::default(), progress)
}

/// [`certify_with_progress`] with `options`.
pub fn certify_with_options(
    subject: &Subject,
    radius: &Radius,
    modes: &[Mode],
    options: &CertifyOptions,
    progress: &Progress,
) -> Result<CertifyOutcome, LipfpError> {
    let (eps, radii_hash) = radii(subject, radius)?;
    let all = with_real(modes);
    if all.iter().any(|m| m.needs_reference()) && subject.reference.is_none() {
        return Err(LipfpError::Usage(
            "internal: a pre-deployment mode was asked for without the float64 reference pass"
                .into(),
        ));
    }
    let mut outcomes = Vec::with_capacity(all.len());
    let start = Instant::now();
    let every: Vec<usize> = (0..subject.n()).collect();
    let local = local_for(
        subject,
        &all,
        (&eps, &every),
        options.local_budget_s,
        progress,
    )?;
    let mut notes = Vec::new();
    if let Some(l) = &local {
        notes.extend(budget_note(l, subject.n()));
    }
    for mode in all {
        let t = Instant::now();
        let mut results = point_results(subject, mode, &eps, local.as_ref(), progress);
        if mode.certifies_as() == Mode::Best && options.best_local && local.is_none() {
            notes.extend(best_with_local(
                subject,
                &eps,
                &mut results,
                options,
                progress,
            )?);
        }
        let mut seconds = t.elapsed().as_secs_f64();
        if mode.needs_local() {
            seconds += local.as_ref().map_or(0.0, |l| l.seconds);
        }
        outcomes.push(mode_outcome(subject, mode, &results, seconds));
    }
    let model_refusal = match &subject.bounds {
        Err(e) => Some(e.clone()),
        Ok(b) => b.vacuous.clone(),
    };
    let reference_s = subject.reference.as_ref().map(|r| r.seconds).unwrap_or(0.0);
    Ok(CertifyOutcome {
        n: subject.n(),
        correct: subject.correct(),
        modes: outcomes,
        norms_s: subject.norms_s,
        certify_s: subject.forward_s + reference_s + start.elapsed().as_secs_f64(),
        reference_s,
        model_refusal,
        radii_hash,
        notes,
    })
}

/// A note when the local time budget left points without local bounds.
fn budget_note(pass: &LocalPass, n: usize) -> Option<String> {
    (pass.over_budget > 0).then(|| {
        format!(
            "local bounds: the time budget ran out with {} of {n} points left; they are not \
             certified by local bounds",
            pass.over_budget
        )
    })
}

/// The real ceiling first, then `modes` in the order asked, each once.
fn with_real(modes: &[Mode]) -> Vec<Mode> {
    let mut all = vec![Mode::Real];
    for &m in modes {
        if !all.contains(&m) {
            all.push(m);
        }
    }
    all
}

/// Every point's certificate in `mode` (in parallel; each refused when the model-level bounds
/// could not be computed), showing progress.
fn point_results(
    subject: &Subject,
    mode: Mode,
    eps: &[f64],
    local: Option<&LocalPass>,
    progress: &Progress,
) -> Vec<PointResult> {
    let task = progress.task(&format!("{mode} certificates"), subject.n() as u64);
    let results: Vec<PointResult> = match &subject.bounds {
        Err(_) => vec![
            PointResult {
                verdict: Err(Refusal::Model),
                slack: None,
                degradation: None,
            };
            subject.n()
        ],
        Ok(mb) => {
            let certifier = Certifier {
                fmt: mb,
                hi: subject.reference.as_ref().and_then(|r| r.bounds.as_ref()),
            };
            (0..subject.n())
                .into_par_iter()
                .with_min_len(64)
                .map(|i| {
                    let c = centre_with_local(subject, i, local, eps[i]);
                    let r = certifier.certify(mode, &c, eps[i]);
                    if i % 1024 == 1023 {
                        task.add(1024);
                    }
                    r
                })
                .collect()
        }
    };
    task.finish();
    results
}

/// Whether `mode` is `best` and the float64 reference ran at only some of `subject`'s points
/// (the standard certificate decided the others, without a slack or degradation of `best`).
fn lazy_best(subject: &Subject, mode: Mode) -> bool {
    mode.certifies_as() == Mode::Best
        && subject
            .reference
            .as_ref()
            .is_some_and(|r| r.points() < subject.n())
}

/// The figures of `mode` from its per-point `results` (`seconds`: the time they took).
fn mode_outcome(
    subject: &Subject,
    mode: Mode,
    results: &[PointResult],
    seconds: f64,
) -> ModeOutcome {
    let mut refusals = BTreeMap::new();
    let (mut deg, mut leps) = (0.0, 0.0);
    for r in results {
        if let Err(why) = r.verdict {
            *refusals.entry(why.to_string()).or_insert(0) += 1;
        }
        if let Some((d, l)) = r.degradation {
            deg += d;
            leps += l;
        }
    }
    if lazy_best(subject, mode) {
        // the degradation is known only where the reference ran: no ratio over part of the
        // points (NaN sums keep it absent when shards' files are merged)
        (deg, leps) = (f64::NAN, f64::NAN);
    }
    let ok: Vec<bool> = results.iter().map(|r| r.verdict.is_ok()).collect();
    let certified = ok.iter().filter(|&&b| b).count();
    let vra = subject.count_correct(&ok);
    let by_class = count_by_class(subject, &ok);
    ModeOutcome {
        mode,
        certified,
        vra,
        refusals,
        verdicts: ok,
        refusal_of: results.iter().map(|r| r.verdict.err()).collect(),
        degradation_sums: (deg, leps),
        slacks: results
            .iter()
            .map(|r| r.slack.unwrap_or(f64::NAN))
            .collect(),
        conservatism: conservatism_ratio(mode, deg, leps),
        seconds,
        by_class,
    }
}
