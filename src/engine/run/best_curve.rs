//! Robustness curves over `best` with a lazy float64 reference (docs/soundness.md "Lazy float64
//! reference"). Where the reference did not run, `best` certifies exactly where the standard
//! certificate does and is undecided up to the radius where it is refuted, so standard's bracket
//! is `best`'s there. On given radii the reference pass already ran wherever one of them needs it;
//! on the automatic grid, which is known only once the thresholds are, the grid is chosen first
//! and the reference then runs at the points one of its radii leaves undecided
//! ([`extend_for_grid`]), so no point needs it everywhere.

use rayon::prelude::*;

use super::certify::centre_of;
use super::curve::{threshold, Threshold};
use super::passes::reference_at;
use super::{ReferenceData, Subject};
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
        let mut c = centre_of(self.subject, i);
        if c.hi.is_none() {
            let net = &self.subject.net;
            c.hi = (self.extra.as_ref()).and_then(|r| r.at(i, net.classes(), net.layers.len()));
        }
        c
    }

    /// Whether the reference ran at point `i`.
    fn has_reference(&self, i: usize) -> bool {
        let ran = |r: &ReferenceData| r.slot.get(i).copied().flatten().is_some();
        self.subject.reference.as_ref().is_some_and(ran) || self.extra.as_ref().is_some_and(ran)
    }

    /// Whether the subject's reference pass ran at a selection of its points only.
    pub(super) fn lazy(&self) -> bool {
        (self.subject.reference.as_ref()).is_some_and(|r| r.points() < self.subject.n())
    }
}

/// `best`'s thresholds: searched where the float64 reference ran; elsewhere the standard
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
/// undecided by the standard certificate, adds it to `centres` and re-searches `best`'s
/// thresholds there (`best` is replaced). Returns how many points it ran at.
pub(super) fn extend_for_grid(
    centres: &mut Centres<'_>,
    certifier: &Certifier<'_>,
    grid: &[f64],
    best: &mut [Threshold],
) -> Result<usize, LipfpError> {
    let subject = centres.subject;
    let needed: Vec<usize> = (0..subject.n())
        .into_par_iter()
        .filter(|&i| {
            let c = centres.at(i);
            c.hi.is_none()
                && (grid.iter()).any(|&eps| certifier.best_without_reference(&c, eps).is_none())
        })
        .collect();
    if needed.is_empty() {
        return Ok(0);
    }
    centres.extra = Some(reference_at(subject, &needed)?);
    let searched: Vec<Threshold> = (needed.par_iter())
        .map(|&i| threshold(certifier, Mode::Best, &centres.at(i)))
        .collect();
    for (&i, t) in needed.iter().zip(searched) {
        best[i] = t;
    }
    Ok(needed.len())
}
