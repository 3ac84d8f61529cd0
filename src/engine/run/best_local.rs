//! `best` consulting local bounds lazily (`best_local`, docs/modes.md): only at the points it
//! does not otherwise certify, only where a first-order estimate says they can help, and only
//! while they help. The inputs are streamed in small blocks, so that when the first points tried
//! gain nothing the rest of the file is not read.

use std::time::Instant;

use ndarray::Array2;
use rayon::prelude::*;

use super::local_pass::{LocalModel, LocalPoint};
use super::subject::CertifyOptions;
use super::subject::Subject;
use crate::bounds::ball::Norm;
use crate::bounds::certify::{Certifier, Mode, PointResult, Refusal};
use crate::engine::gradient::{runner_up, GradNet};
use crate::error::LipfpError;
use crate::progress::Progress;

/// How many promising points `best` tries local bounds at before deciding, from whether they
/// certified any, to try the others.
const LOCAL_PROBE: usize = 4;

/// Rows read at a time while looking for promising points.
const BLOCK_ROWS: usize = 256;

/// What the lazy pass did.
#[derive(Default)]
struct Tally {
    open: usize,
    tried: usize,
    gained: usize,
    over_budget: usize,
    gave_up: bool,
}

/// Of the points `chosen` (rows `rows`), the positions of those where local bounds may certify
/// at their radius: the float64 margin against the runner-up minus `eps` times its gradient's
/// dual norm (l2 for an l2 ball, l1 for an l_inf ball) is positive (the first-order estimate of
/// the margin's minimum over the set; local bounds are below the true minimum). A choice of where
/// to spend time only: it never decides a verdict.
fn promising(
    subject: &Subject,
    grad: &GradNet,
    eps: &[f64],
    (chosen, rows): (&[usize], &[f64]),
) -> Result<Vec<usize>, LipfpError> {
    let x = Array2::from_shape_vec((chosen.len(), subject.inputs.dim), rows.to_vec())
        .map_err(|e| LipfpError::Usage(format!("internal: {e}")))?;
    let classes: Vec<usize> = chosen
        .iter()
        .map(|&i| subject.predictions[i].unwrap_or(0))
        .collect();
    let (logits, g) = grad.margin_gradient(&x, &classes);
    Ok((0..chosen.len())
        .filter(|&k| {
            let row = logits.row(k).to_vec();
            let c = classes[k];
            let margin = row[c] - row[runner_up(&row, c)];
            let slope = match subject.ball.norm {
                Norm::L2 => g.row(k).iter().map(|v| v * v).sum::<f64>().sqrt(),
                Norm::Linf => g.row(k).iter().map(|v| v.abs()).sum::<f64>(),
            };
            margin - eps[chosen[k]] * slope > 0.0
        })
        .collect())
}

/// `best`'s verdicts `certified` at the uniform radius `eps` (a curve's grid radius), updated where
/// local bounds consulted lazily certify, as at a gate's own radius ([`best_with_local`]).
pub(super) fn consult_at(
    subject: &Subject,
    eps: f64,
    certified: &mut [bool],
    options: &CertifyOptions,
) -> Result<(), LipfpError> {
    let mut results: Vec<PointResult> = (certified.iter())
        .map(|&ok| PointResult {
            verdict: if ok { Ok(()) } else { Err(Refusal::Margin) },
            slack: None,
            degradation: None,
        })
        .collect();
    let radii = vec![eps; certified.len()];
    best_with_local(subject, &radii, &mut results, options, &Progress::silent())?;
    for (c, r) in certified.iter_mut().zip(&results) {
        *c = r.verdict.is_ok();
    }
    Ok(())
}

/// `best` with the local bounds as one more source, computed lazily (module docs), within the
/// options' time budget; `results` are `best`'s, updated where local bounds certify. Returns the
/// notes saying where they ran and what they changed.
pub(super) fn best_with_local(
    subject: &Subject,
    eps: &[f64],
    results: &mut [PointResult],
    options: &CertifyOptions,
    progress: &Progress,
) -> Result<Vec<String>, LipfpError> {
    let Ok(mb) = &subject.bounds else {
        return Ok(Vec::new());
    };
    let model = match LocalModel::new(subject) {
        Ok(model) => model,
        Err(why) => return Ok(vec![format!("best: {why}")]),
    };
    let certifier = Certifier {
        fmt: mb,
        hi: subject.reference.as_ref().and_then(|r| r.bounds.as_ref()),
    };
    let grad = GradNet::new(&subject.net);
    let open: Vec<usize> = (0..subject.n())
        .filter(|&i| results[i].verdict.is_err() && subject.predictions[i].is_some())
        .collect();
    let mut tally = Tally {
        open: open.len(),
        ..Tally::default()
    };
    let (start, dim) = (Instant::now(), subject.inputs.dim);
    let over = || {
        options
            .local_budget_s
            .is_some_and(|b| start.elapsed().as_secs_f64() > b)
    };
    let task = progress.task("best: local bounds", open.len() as u64);
    // the local bounds at the block positions `picked` of `chosen` (rows `rows`), each taken as
    // best's source there
    let mut try_at = |picked: &[usize], (chosen, rows): (&[usize], &[f64]), tally: &mut Tally| {
        let points: Vec<Option<LocalPoint>> = picked
            .par_iter()
            .map(|&k| {
                let i = chosen[k];
                let class = subject.predictions[i]?;
                (!over()).then(|| {
                    let x = &rows[k * dim..(k + 1) * dim];
                    model.measure(x, eps[i], class)
                })
            })
            .collect();
        for (&k, point) in picked.iter().zip(points) {
            let i = chosen[k];
            let Some(point) = point else {
                tally.over_budget += 1;
                continue;
            };
            let mut c = subject.centre(i);
            c.local = Some(point.margins(eps[i]));
            let r = certifier.certify(Mode::Best, &c, eps[i]);
            tally.gained += usize::from(r.verdict.is_ok());
            tally.tried += 1;
            results[i] = r;
        }
    };
    subject.visit_rows_while(&open, BLOCK_ROWS, |chosen, rows| {
        // where the first-order estimate is positive until local bounds certify a point; from
        // then on everywhere (on a network not trained for Lipschitz certification they certify
        // most of what best cannot, estimate or not), so best certifies wherever local does
        let proven = tally.gained > 0;
        let picked = if proven {
            (0..chosen.len()).collect()
        } else {
            promising(subject, &grad, eps, (chosen, rows))?
        };
        try_at(&picked, (chosen, rows), &mut tally);
        if !proven && tally.gained > 0 {
            let rest: Vec<usize> = (0..chosen.len()).filter(|k| !picked.contains(k)).collect();
            try_at(&rest, (chosen, rows), &mut tally);
        }
        task.add(chosen.len() as u64);
        tally.gave_up = tally.tried >= LOCAL_PROBE && tally.gained == 0;
        Ok(!tally.gave_up)
    })?;
    task.finish();
    Ok(notes(&tally))
}

/// The notes of a lazy pass.
fn notes(t: &Tally) -> Vec<String> {
    let mut notes = vec![format!(
        "best consulted local bounds at {} of the {} points it did not otherwise certify and \
         certified {} of them (tried where a first-order margin estimate is positive until they \
         certify one, then at every point)",
        t.tried, t.open, t.gained
    )];
    if t.gave_up {
        notes.push(format!(
            "best: local bounds certified none of the first {} promising points, so the others \
             were not tried (local bounds are rarely tighter than the Lipschitz bound on networks \
             trained for it)",
            t.tried
        ));
    }
    if t.over_budget > 0 {
        notes.push(format!(
            "local bounds: the time budget ran out with {} promising points left; they are not \
             certified by local bounds",
            t.over_budget
        ));
    }
    notes
}
