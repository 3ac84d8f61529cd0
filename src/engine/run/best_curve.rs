//! Robustness curves over `best` with a lazy float64 reference (docs/soundness.md "Lazy float64
//! reference"). Where the reference did not run, `best` certifies exactly where the standard
//! certificate does and is undecided up to the radius where it is refuted, so standard's bracket
//! is `best`'s there. On given radii the reference pass already ran wherever one of them needs it;
//! on the automatic grid, which is known only once the thresholds are, the grid is chosen first
//! and the reference then runs at the points one of its radii leaves undecided
//! ([`extend_for_grid`]), so it need not run everywhere.

use rayon::prelude::*;

use super::passes::reference_at;
use super::reference::ReferenceData;
use super::subject::Subject;
use super::threshold::{threshold, Threshold};
use crate::bounds::certify::{Centre, Certifier, Mode};
use crate::error::LipfpError;

/// The centres of a subject's points, with the float64 reference measured for the curve at
/// points the subject's own pass skipped.
pub(super) struct Centres<'a> {
    /// The subject.
    pub(super) subject: &'a Subject,
    /// The reference at further points (indexed like the subject's).
    extra: Option<ReferenceData>,
}

impl<'a> Centres<'a> {
    /// The subject's own centres.
    pub(super) fn new(subject: &'a Subject) -> Self {
        Centres {
            subject,
            extra: None,
        }
    }

    /// Point `i`'s centre, with the reference's measurements where either pass ran there.
    pub(super) fn at(&self, i: usize) -> Centre<'_> {
        let mut c = self.subject.centre(i);
        if c.hi.is_none() {
            let net = &self.subject.net;
            c.hi = (self.extra.as_ref()).and_then(|r| r.at(i, net.classes(), net.layers.len()));
        }
        c
    }

    /// Whether the subject's reference pass ran at point `i`.
    fn has_reference(&self, i: usize) -> bool {
        let ran = |r: &ReferenceData| r.slot.get(i).copied().flatten().is_some();
        self.subject.reference.as_ref().is_some_and(ran)
    }

    /// Whether the subject's reference pass ran at a selection of its points only.
    pub(super) fn lazy(&self) -> bool {
        (self.subject.reference.as_ref()).is_some_and(|r| r.points() < self.subject.n())
    }
}

/// `best`'s thresholds: searched where the subject's float64 reference ran; elsewhere the standard
/// certificate's (`std`): `lo` is certified by `best` (which takes every standard source), and
/// a grid radius inside the bracket is decided by running `best` there.
pub(super) fn best_thresholds(
    centres: &Centres<'_>,
    certifier: &Certifier<'_>,
    std: &[Threshold],
) -> Vec<Threshold> {
    (0..centres.subject.n())
        .into_par_iter()
        .with_min_len(64)
        .map(|i| {
            if centres.has_reference(i) {
                threshold(certifier, Mode::Best, &centres.at(i))
            } else {
                std[i]
            }
        })
        .collect()
}

/// Runs the float64 reference at every point without it that some radius of `grid` leaves
/// undecided by the standard certificate (thresholds `std`) and adds it to `centres`; returns
/// how many points it ran at. `best`'s threshold there keeps standard's `lo` (certified, a sound
/// lower bound on its radius) and its upper end moves to the radius from which `best` is refused
/// ([`reference_window`]): with the reference `best` may certify past standard, so every grid
/// radius in between is decided by running `best` there, and the counts are the full pass's.
pub(super) fn extend_for_grid(
    centres: &mut Centres<'_>,
    certifier: &Certifier<'_>,
    grid: &[f64],
    (std, best): (&[Threshold], &mut [Threshold]),
) -> Result<usize, LipfpError> {
    let subject = centres.subject;
    let mut grid = grid.to_vec();
    grid.sort_by(f64::total_cmp);
    let (needed, refused): (Vec<usize>, Vec<f64>) = (0..subject.n())
        .into_par_iter()
        .with_min_len(64)
        .filter_map(|i| {
            let c = centres.at(i);
            let window =
                c.hi.is_none()
                    .then(|| reference_window(certifier, &c, &grid, std[i].lo));
            window.flatten().map(|hi| (i, hi))
        })
        .unzip();
    if !needed.is_empty() {
        centres.extra = Some(reference_at(subject, &needed)?);
    }
    for (&i, hi) in needed.iter().zip(refused) {
        // certified at standard's `lo`; refused from `hi`; in between running `best` decides
        best[i].hi = hi;
    }
    Ok(needed.len())
}

/// Where `best` needs the reference at `c` among the ascending radii `grid`: `None` when at none
/// of them, else the smallest radius from which it is refused without it (infinite when none):
/// standard certifies at and below its threshold `lo`, and once `best` is refused without the
/// reference it is at every larger radius too, with it or not (refuted: the bound
/// `m_hat + E_ctr - L eps - g` only falls as `eps` grows and no source certifies past it;
/// non-finite logits or a vacuous model at any radius).
fn reference_window(
    certifier: &Certifier<'_>,
    c: &Centre<'_>,
    grid: &[f64],
    lo: Option<f64>,
) -> Option<f64> {
    let mut needed = false;
    for &eps in grid.iter().filter(|&&eps| lo.is_none_or(|lo| eps > lo)) {
        match certifier.best_without_reference(c, eps) {
            None => needed = true,
            Some(Ok(())) => {}
            Some(Err(_)) => return needed.then_some(eps),
        }
    }
    needed.then_some(f64::INFINITY)
}
