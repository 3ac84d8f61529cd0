//! Robustness curves of mode `local`. Local bounds are computed per radius, and the local
//! certificate need not be monotone in the radius (CROWN's relaxations change with the bounds),
//! so a point's radius is found by bisection with every probe computing the bounds at that radius
//! (the radius reported is one the certificate was run and held at), and the counts at every grid
//! radius come from running the certificate there, never from the bracket. With a time budget
//! (`local_budget_s`), the points reached after it get no local bounds: never certified, and
//! counted so that the report says so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use super::local_pass::LocalModel;
use super::subject::Subject;
use super::threshold::{guess, threshold_by, Threshold};
use crate::bounds::certify::{Certifier, Mode};
use crate::error::LipfpError;

/// The local curve's time budget, shared by the thresholds and the grid counts.
pub(super) struct LocalBudget {
    /// When the local work started.
    start: Instant,
    /// Seconds allowed (`None`: no limit).
    limit: Option<f64>,
    /// Per point, whether the budget left it without local bounds.
    skipped: Vec<AtomicBool>,
}

impl LocalBudget {
    /// A budget of `limit` seconds from now over `n` points.
    pub(super) fn new(limit: Option<f64>, n: usize) -> Self {
        LocalBudget {
            start: Instant::now(),
            limit,
            skipped: (0..n).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Whether point `i` may still compute local bounds (recording it when not).
    fn admits(&self, i: usize) -> bool {
        let over = self
            .limit
            .is_some_and(|b| self.start.elapsed().as_secs_f64() > b);
        if over {
            if let Some(flag) = self.skipped.get(i) {
                flag.store(true, Ordering::Relaxed);
            }
        }
        !over
    }

    /// How many points the budget left without local bounds.
    pub(super) fn skipped(&self) -> usize {
        (self.skipped.iter())
            .filter(|f| f.load(Ordering::Relaxed))
            .count()
    }
}

/// The local certificate at point `i` (row `x`) at radius `eps`: certified, and its slack.
fn certify_at(
    (subject, certifier): (&Subject, &Certifier<'_>),
    model: &LocalModel,
    i: usize,
    x: &[f64],
    eps: f64,
) -> (bool, Option<f64>) {
    let Some(class) = subject.predictions[i] else {
        return (false, None);
    };
    let point = model.measure(x, eps, class);
    let mut c = subject.centre(i);
    c.local = Some(point.margins(eps));
    let r = certifier.certify(Mode::Local, &c, eps);
    (r.verdict.is_ok(), r.slack.filter(|s| !s.is_nan()))
}

/// Calls `f(i, row)` for every point of the subject (in parallel within each read block).
fn every_point<T: Send>(
    subject: &Subject,
    f: impl Fn(usize, &[f64]) -> T + Sync,
) -> Result<Vec<T>, LipfpError> {
    let dim = subject.inputs.dim;
    let all: Vec<usize> = (0..subject.n()).collect();
    let mut out = Vec::with_capacity(subject.n());
    subject.visit_rows(&all, |chosen, rows| {
        let block: Vec<T> = chosen
            .par_iter()
            .enumerate()
            .map(|(k, &i)| f(i, &rows[k * dim..(k + 1) * dim]))
            .collect();
        out.extend(block);
        Ok(())
    })?;
    Ok(out)
}

/// Per point, the local certificate's threshold by bisection (none where `budget` is spent).
pub(super) fn thresholds(
    subject: &Subject,
    certifier: &Certifier<'_>,
    budget: &LocalBudget,
) -> Result<Vec<Threshold>, LipfpError> {
    let Ok(model) = LocalModel::new(subject) else {
        return Ok(vec![Threshold { lo: None, hi: 0.0 }; subject.n()]);
    };
    every_point(subject, |i, x| {
        if !budget.admits(i) {
            return Threshold { lo: None, hi: 0.0 };
        }
        let run = |eps: f64| certify_at((subject, certifier), &model, i, x, eps);
        threshold_by(run, guess(certifier, &subject.centre(i)))
    })
}

/// Per grid radius, whether each point is certified there (the certificate run at that radius;
/// never where `budget` is spent).
pub(super) fn grid_points(
    subject: &Subject,
    certifier: &Certifier<'_>,
    radii: &[(String, f64)],
    budget: &LocalBudget,
) -> Result<Vec<Vec<bool>>, LipfpError> {
    let Ok(model) = LocalModel::new(subject) else {
        return Ok(vec![vec![false; subject.n()]; radii.len()]);
    };
    let per_point = every_point(subject, |i, x| {
        if !budget.admits(i) {
            return vec![false; radii.len()];
        }
        radii
            .iter()
            .map(|(_, eps)| certify_at((subject, certifier), &model, i, x, *eps).0)
            .collect::<Vec<bool>>()
    })?;
    Ok((0..radii.len())
        .map(|k| per_point.iter().map(|p| p[k]).collect())
        .collect())
}
