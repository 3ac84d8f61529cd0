//! Robustness curves: for every point and mode, a sound lower bound on the largest radius the
//! certificate holds at, and the certified and VRA counts over a grid of radii from one run.
//!
//! Every certificate is monotone in `eps`: `L eps` and the ball bounds grow with it through
//! operations that round up (each monotone), so a point certified at `eps` is certified at every
//! smaller radius. Per point the search brackets the threshold between a radius it certifies
//! (`lo`, confirmed by running the certificate there) and one it does not (`hi`); a grid radius
//! at or below `lo` is certified, one at or above `hi` is not, and one in between is decided by
//! running the certificate at it — so the counts at every grid radius are exactly those of a
//! fixed-radius run.

use rayon::prelude::*;

use super::best_curve::{best_thresholds, extend_for_grid, Centres};
use super::best_local;
use super::local_curve::{self, LocalBudget};
use super::subject::CertifyOptions;
use super::subject::Subject;
use super::threshold::{threshold, Threshold};
use crate::bounds::certify::{Certifier, Mode};
use crate::error::LipfpError;
use crate::policy::{CurveGrid, Radius};

/// Certified and VRA counts at one radius.
#[derive(Clone, Debug, PartialEq)]
pub struct CurvePoint {
    /// The radius as written (decimal).
    pub epsilon: String,
    /// Points certified at this radius.
    pub certified: usize,
    /// Points certified and correctly classified (`None` without labels).
    pub vra: Option<usize>,
}

/// One mode's curve.
#[derive(Clone, Debug)]
pub struct ModeCurve {
    /// The mode.
    pub mode: Mode,
    /// Per point, the largest radius confirmed certified (0 when certified only at 0;
    /// `None` when not certified even at radius 0).
    pub radii: Vec<Option<f64>>,
    /// Counts at every grid radius.
    pub points: Vec<CurvePoint>,
}

impl ModeCurve {
    /// The `q`-quantile (`0 <= q <= 1`, nearest rank) of the per-point radii, counting a point
    /// not certified at 0 as radius 0.
    pub fn radius_quantile(&self, q: f64) -> f64 {
        let mut r: Vec<f64> = self.radii.iter().map(|r| r.unwrap_or(0.0)).collect();
        if r.is_empty() {
            return 0.0;
        }
        r.sort_by(f64::total_cmp);
        let k = ((q * r.len() as f64).ceil() as usize).clamp(1, r.len()) - 1;
        r[k]
    }
}

/// Curves of every mode.
#[derive(Clone, Debug)]
pub struct CurveOutcome {
    /// One curve per mode, the real ceiling first.
    pub modes: Vec<ModeCurve>,
    /// Seconds spent.
    pub seconds: f64,
    /// Points the local curve's time budget left without local bounds (never certified there).
    pub local_over_budget: usize,
    /// Points where the curve ran the float64 reference beyond the subject's own pass (for the
    /// automatic grid over `best`).
    pub reference_extra: usize,
    /// Whether `best`'s curve took local bounds as a source (with `local` among the modes, whose
    /// certificate runs at every grid radius anyway); without, it holds its Lipschitz sources.
    pub best_with_local: Option<bool>,
}

impl CurveOutcome {
    /// The notes a report carries about how the curve was computed: the float64 reference run
    /// for the automatic grid, and a spent local budget.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.reference_extra > 0 {
            notes.push(format!(
                "robustness curve: the float64 reference ran at {} further points, where the automatic grid's radii left best undecided",
                self.reference_extra
            ));
        }
        if self.best_with_local == Some(false) {
            notes.push(
                "robustness curve: best's curve takes its Lipschitz sources only (best_local = false)"
                    .to_string(),
            );
        }
        if self.local_over_budget > 0 {
            notes.push(format!(
                "robustness curve: local bounds not computed at {} points within local_budget_s; they are not certified by local at any radius",
                self.local_over_budget
            ));
        }
        notes
    }
}

/// The grid radii as `(text, upper bound)`, given or chosen from the thresholds.
fn grid_radii(
    grid: &CurveGrid,
    thresholds: &[Vec<Threshold>],
) -> Result<Vec<(String, f64)>, LipfpError> {
    let given = match grid {
        CurveGrid::Given(r) => r.clone(),
        CurveGrid::Auto => auto_grid(thresholds)?,
    };
    given
        .iter()
        .map(|r| match r {
            Radius::Uniform { text, up } => Ok((text.clone(), *up)),
            Radius::PerInstance(p) => Err(LipfpError::Usage(format!(
                "a curve needs uniform radii, not the radii file {}",
                p.display()
            ))),
        })
        .collect()
}

/// Ten radii `0, s, ..., 9s` with `9s` about twice the median point's threshold of the mode
/// certifying most, `s` rounded to two significant digits.
fn auto_grid(thresholds: &[Vec<Threshold>]) -> Result<Vec<Radius>, LipfpError> {
    let median = thresholds
        .iter()
        .map(|t| {
            let mut r: Vec<f64> = t.iter().filter_map(|t| t.lo).collect();
            r.sort_by(f64::total_cmp);
            r.get(r.len() / 2).copied().unwrap_or(0.0)
        })
        .fold(0.0, f64::max);
    let span = if median > 0.0 && median.is_finite() {
        2.0 * median
    } else {
        1.0
    };
    // s = m 10^e with m in 10..=99
    let step = span / 9.0;
    let e = step.log10().floor() as i32 - 1;
    let m = (step / 10f64.powi(e)).round().clamp(10.0, 99.0) as u64;
    (0..10u64)
        .map(|k| Radius::parse_decimal(&decimal_text(k * m, e)).map_err(LipfpError::Usage))
        .collect()
}

/// The decimal text of `digits * 10^exp` (`"0.33"` for 33, -2; `"120"` for 12, 1).
pub fn decimal_text(digits: u64, exp: i32) -> String {
    if digits == 0 {
        return "0".into();
    }
    if exp >= 0 {
        return format!("{digits}{}", "0".repeat(exp as usize));
    }
    let s = digits.to_string();
    let shift = (-exp) as usize;
    let padded = if s.len() <= shift {
        format!("{}{s}", "0".repeat(shift + 1 - s.len()))
    } else {
        s
    };
    let (int, frac) = padded.split_at(padded.len() - shift);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    }
}

/// The curves of `subject` in `modes` (the real ceiling always included) over `grid`; a local
/// curve's bounds stop after the options' `local_budget_s` seconds, and with `best_local` `best`
/// consults local bounds at every grid radius as at a gate's own radius.
pub fn certify_curve(
    subject: &Subject,
    grid: &CurveGrid,
    modes: &[Mode],
    options: &CertifyOptions,
) -> Result<CurveOutcome, LipfpError> {
    let local_budget_s = options.local_budget_s;
    let start = std::time::Instant::now();
    let mut all = vec![Mode::Real];
    all.extend(modes.iter().copied().filter(|m| *m != Mode::Real));
    all.dedup();
    let Ok(mb) = &subject.bounds else {
        let thresholds = vec![vec![Threshold { lo: None, hi: 0.0 }; subject.n()]; all.len()];
        return finish(subject, (grid, &all), thresholds, None, (start, options));
    };
    let certifier = Certifier {
        fmt: mb,
        hi: subject.reference.as_ref().and_then(|r| r.bounds.as_ref()),
    };
    let mut centres = Centres::new(subject);
    let of_mode = |mode: Mode| -> Vec<Threshold> {
        (0..subject.n())
            .into_par_iter()
            .with_min_len(64)
            .map(|i| threshold(&certifier, mode, &subject.centre(i)))
            .collect()
    };
    let budget = LocalBudget::new(local_budget_s, subject.n());
    let standard = all.contains(&Mode::Best).then(|| of_mode(Mode::Standard));
    let mut thresholds: Vec<Vec<Threshold>> = all
        .iter()
        .map(|&mode| match (mode, &standard) {
            (Mode::Standard, Some(std)) => Ok(std.clone()),
            (Mode::Best, Some(std)) => Ok(best_thresholds(&centres, &certifier, std)),
            (Mode::Local, _) => local_curve::thresholds(subject, &certifier, &budget),
            _ => Ok(of_mode(mode)),
        })
        .collect::<Result<Vec<_>, LipfpError>>()?;
    // the automatic grid over a lazy reference: choose it, then run the reference where one of
    // its radii needs it (best_curve)
    let mut extra = 0;
    let grid = match grid {
        CurveGrid::Auto if all.contains(&Mode::Best) && centres.lazy() => {
            let radii = auto_grid(&thresholds)?;
            let ups: Vec<f64> = (radii.iter())
                .filter_map(|r| match r {
                    Radius::Uniform { up, .. } => Some(*up),
                    Radius::PerInstance(_) => None,
                })
                .collect();
            let std = standard.as_deref().unwrap_or_default();
            if let Some(b) = all.iter().position(|&m| m == Mode::Best) {
                let best = &mut thresholds[b];
                extra = extend_for_grid(&mut centres, &certifier, &ups, (std, best))?;
            }
            CurveGrid::Given(radii)
        }
        _ => grid.clone(),
    };
    let context = (&certifier, &budget, &centres);
    let mut out = finish(
        subject,
        (&grid, &all),
        thresholds,
        Some(context),
        (start, options),
    )?;
    out.local_over_budget = budget.skipped();
    out.reference_extra = extra;
    Ok(out)
}

/// Counts at every grid radius from the thresholds (certificates run where they decide).
fn finish(
    subject: &Subject,
    (grid, all): (&CurveGrid, &[Mode]),
    thresholds: Vec<Vec<Threshold>>,
    context: Option<(&Certifier<'_>, &LocalBudget, &Centres<'_>)>,
    (start, options): (std::time::Instant, &CertifyOptions),
) -> Result<CurveOutcome, LipfpError> {
    let (certifier, budget, centres) = match context {
        Some((c, b, p)) => (Some(c), Some(b), Some(p)),
        None => (None, None, None),
    };
    let radii = grid_radii(grid, &thresholds)?;
    let mut modes = Vec::with_capacity(all.len());
    let mut all_verdicts = Vec::with_capacity(all.len());
    for (&mode, th) in all.iter().zip(&thresholds) {
        // local bounds are computed per radius and need not be monotone in it: every grid
        // radius runs the certificate (local_curve); the others use the brackets
        let verdicts: Vec<Vec<bool>> = match (mode, certifier) {
            (Mode::Local, Some(c)) => match budget {
                Some(b) => local_curve::grid_points(subject, c, &radii, b)?,
                None => vec![vec![false; subject.n()]; radii.len()],
            },
            (Mode::Local, None) => vec![vec![false; subject.n()]; radii.len()],
            _ => radii
                .iter()
                .map(|(_, eps)| {
                    (0..subject.n())
                        .into_par_iter()
                        .with_min_len(256)
                        .map(|i| match th[i].lo {
                            Some(lo) if *eps <= lo => true,
                            _ if *eps >= th[i].hi => false,
                            _ => match (certifier, centres) {
                                (Some(c), Some(p)) => {
                                    c.certify(mode, &p.at(i), *eps).verdict.is_ok()
                                }
                                _ => false,
                            },
                        })
                        .collect()
                })
                .collect(),
        };
        all_verdicts.push(verdicts);
    }
    // best takes the local bounds as a source: where local ran at a radius, best certifies where
    // it does (Certifier::combine)
    let local_at = all.iter().position(|&m| m == Mode::Local);
    let best_at = all.iter().position(|&m| m == Mode::Best);
    if let (Some(b), Some(l)) = (best_at, local_at) {
        let local = all_verdicts[l].clone();
        for (best, local) in all_verdicts[b].iter_mut().zip(local) {
            best.iter_mut().zip(local).for_each(|(v, w)| *v |= w);
        }
    }
    // without local's verdicts, best consults local bounds lazily at each grid radius
    let lazy_local = local_at.is_none() && options.best_local && certifier.is_some();
    if let (Some(b), true) = (best_at, lazy_local) {
        for ((_, eps), verdicts) in radii.iter().zip(all_verdicts[b].iter_mut()) {
            best_local::consult_at(subject, *eps, verdicts, options)?;
        }
    }
    for ((&mode, th), verdicts) in all.iter().zip(&thresholds).zip(all_verdicts) {
        let points = radii
            .iter()
            .zip(verdicts)
            .map(|((text, _), ok)| CurvePoint {
                epsilon: text.clone(),
                certified: ok.iter().filter(|&&b| b).count(),
                vra: subject.count_correct(&ok),
            })
            .collect();
        let own = th.iter().map(|t| t.lo);
        let radii = match (mode, local_at) {
            (Mode::Best, Some(l)) => (own.zip(&thresholds[l]))
                .map(|(b, t)| match (b, t.lo) {
                    (Some(b), Some(l)) => Some(b.max(l)),
                    (b, l) => b.or(l),
                })
                .collect(),
            _ => own.collect(),
        };
        modes.push(ModeCurve {
            mode,
            radii,
            points,
        });
    }
    Ok(CurveOutcome {
        modes,
        seconds: start.elapsed().as_secs_f64(),
        local_over_budget: 0,
        reference_extra: 0,
        best_with_local: best_at.map(|_| local_at.is_some() || lazy_local),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_text_places_the_point() {
        assert_eq!(decimal_text(33, -2), "0.33");
        assert_eq!(decimal_text(330, -2), "3.3");
        assert_eq!(decimal_text(12, 1), "120");
        assert_eq!(decimal_text(5, -3), "0.005");
        assert_eq!(decimal_text(40, -1), "4");
        assert_eq!(decimal_text(0, -4), "0");
    }

    #[test]
    fn the_auto_grid_spans_twice_the_median_threshold() {
        let t = |lo: f64| Threshold {
            lo: Some(lo),
            hi: lo * 1.0001,
        };
        let grid = auto_grid(&[vec![t(0.1), t(0.3), t(0.5)]]).unwrap();
        let texts: Vec<String> = grid.iter().map(|r| r.fields().0.unwrap()).collect();
        assert_eq!(texts[0], "0");
        assert_eq!(texts[1], "0.067");
        assert_eq!(texts[9], "0.603");
    }
}
