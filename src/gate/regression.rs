//! Per-point regression against a baseline run's certificates: which test points lost (or
//! gained) a verified-robust certificate, by class, and whether the change in VRA is more than
//! noise — McNemar's exact test on the discordant points and Wilson score intervals for each VRA.

use rug::{Integer, Rational};
use serde::Serialize;

use crate::engine::run::{CertifyOutcome, Subject};
use crate::gate::baseline::Baseline;
use crate::gate::verdict::{p_text, pct};

/// `z` of a two-sided 95% interval, `Phi^-1(0.975)`.
const Z95: f64 = 1.959_963_984_540_054;

/// How many lost indices the summaries list (the JSON report and `--regressions` hold all).
pub const SHOWN_INDICES: usize = 20;

/// One VRA with its 95% Wilson score interval, in percent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rate {
    /// Verified-robust points.
    pub count: usize,
    /// VRA in percent.
    pub pct: f64,
    /// Lower end of the 95% Wilson interval, in percent.
    pub wilson_lo_pct: f64,
    /// Upper end, in percent.
    pub wilson_hi_pct: f64,
}

/// A gate's per-point comparison with the same gate in the baseline's certificates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Regression {
    /// The baseline certificate file.
    pub baseline: String,
    /// Test points compared.
    pub n: usize,
    /// The baseline's VRA.
    pub before: Rate,
    /// This run's VRA.
    pub now: Rate,
    /// Test-set indices verified robust in the baseline and not now.
    pub lost: Vec<usize>,
    /// Test-set indices verified robust now and not in the baseline.
    pub gained: Vec<usize>,
    /// Per true class: points lost.
    pub lost_by_class: Vec<usize>,
    /// Per true class: points gained.
    pub gained_by_class: Vec<usize>,
    /// McNemar's exact two-sided p-value on the discordant points (1 when there are none).
    pub p_value: f64,
}

/// McNemar's exact test: with `b` and `c` discordant points, under the null hypothesis each is
/// lost or gained with probability 1/2, so `p = min(1, 2 P[Bin(b + c, 1/2) <= min(b, c)])`,
/// computed exactly (big integers) and rounded up to `f64`.
pub fn mcnemar_exact_p(b: usize, c: usize) -> f64 {
    let n = (b + c) as u32;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c) as u32;
    let tail: Integer = (0..=k)
        .map(|i| Integer::from(Integer::binomial_u(n, i)))
        .sum();
    let p = Rational::from((tail * 2u32, Integer::from(1) << n));
    if p >= 1 {
        return 1.0;
    }
    crate::arith::sound::rational_to_f64_up(&p).min(1.0)
}

/// The 95% Wilson score interval of `k` successes in `n` trials, as fractions `(lo, hi)`:
/// `(k + z^2/2 +- z sqrt(k (n - k) / n + z^2 / 4)) / (n + z^2)`; `(0, 1)` for `n = 0`.
pub fn wilson_interval(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z2) = (k as f64, n as f64, Z95 * Z95);
    let centre = k + z2 / 2.0;
    let half = Z95 * (k * (n - k) / n + z2 / 4.0).sqrt();
    let den = n + z2;
    (
        ((centre - half) / den).max(0.0),
        ((centre + half) / den).min(1.0),
    )
}

/// A VRA of `count` of `n` points with its interval.
fn rate(count: usize, n: usize) -> Rate {
    let (lo, hi) = wilson_interval(count, n);
    Rate {
        count,
        pct: pct(count, n),
        wilson_lo_pct: 100.0 * lo,
        wilson_hi_pct: 100.0 * hi,
    }
}

/// Compare per-point verified robustness `before` and `now` (same test set, same order), with
/// the true classes `labels` for the per-class counts.
pub fn of_verdicts(baseline: &str, before: &[bool], now: &[bool], labels: &[usize]) -> Regression {
    let classes = labels.iter().map(|&l| l + 1).max().unwrap_or(0);
    let (mut lost, mut gained) = (Vec::new(), Vec::new());
    let (mut lost_by_class, mut gained_by_class) = (vec![0; classes], vec![0; classes]);
    for (i, (&b, &a)) in before.iter().zip(now).enumerate() {
        let (list, by_class) = match (b, a) {
            (true, false) => (&mut lost, &mut lost_by_class),
            (false, true) => (&mut gained, &mut gained_by_class),
            _ => continue,
        };
        list.push(i);
        if let Some(&c) = labels.get(i) {
            by_class[c] += 1;
        }
    }
    let n = before.len().min(now.len());
    let count = |v: &[bool]| v.iter().take(n).filter(|&&x| x).count();
    Regression {
        baseline: baseline.to_string(),
        n,
        before: rate(count(before), n),
        now: rate(count(now), n),
        p_value: mcnemar_exact_p(lost.len(), gained.len()),
        lost,
        gained,
        lost_by_class,
        gained_by_class,
    }
}

impl Regression {
    /// The p-value of a *drop*: McNemar's where more points were lost than gained, else 1 (a
    /// rise or no change is never a significant drop).
    pub fn drop_p_value(&self) -> f64 {
        if self.lost.len() > self.gained.len() {
            self.p_value
        } else {
            1.0
        }
    }

    /// `VRA 95.10% [94.66, 95.50] -> 94.80% [94.34, 95.22]: 15 lost / 12 gained (McNemar p =
    /// 0.7011)`.
    pub fn line(&self) -> String {
        let r = |x: &Rate| {
            format!(
                "{:.2}% [{:.2}, {:.2}]",
                x.pct, x.wilson_lo_pct, x.wilson_hi_pct
            )
        };
        format!(
            "VRA {} -> {}: {} lost / {} gained (McNemar p = {})",
            r(&self.before),
            r(&self.now),
            self.lost.len(),
            self.gained.len(),
            p_text(self.p_value)
        )
    }
}

/// The per-point regression of gate `name` in `mode` against `baseline`, when the baseline has
/// per-point data and this run has labels over the same points.
pub fn of_run(
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
    Some(of_verdicts(
        &baseline.path().display().to_string(),
        before,
        &now,
        labels,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact values by hand: `2 C(n, <= k) / 2^n`.
    #[test]
    fn mcnemar_matches_hand_computed_binomial_tails() {
        assert_eq!(mcnemar_exact_p(0, 0), 1.0);
        assert_eq!(mcnemar_exact_p(0, 5), 2.0 / 32.0);
        assert_eq!(mcnemar_exact_p(5, 0), 2.0 / 32.0);
        // 2 (1 + 10) / 1024
        assert_eq!(mcnemar_exact_p(1, 9), 22.0 / 1024.0);
        // symmetric and capped at 1
        assert_eq!(mcnemar_exact_p(3, 3), 1.0);
        assert_eq!(mcnemar_exact_p(7, 8), 1.0);
        // 2 (1 + 20 + 190 + 1140) / 2^20
        assert_eq!(mcnemar_exact_p(3, 17), 2.0 * 1351.0 / 1048576.0);
    }

    /// The Wilson interval solves `|p_hat - p| = z sqrt(p (1 - p) / n)`: both ends satisfy it.
    #[test]
    fn wilson_ends_solve_the_score_equation() {
        for (k, n) in [(0, 10), (3, 10), (81, 263), (9_569, 10_000), (10, 10)] {
            let (lo, hi) = wilson_interval(k, n);
            let p_hat = k as f64 / n as f64;
            for p in [lo, hi] {
                let lhs = (p_hat - p).abs();
                let rhs = Z95 * (p * (1.0 - p) / n as f64).sqrt();
                assert!((lhs - rhs).abs() < 1e-12, "k {k} n {n}: {lhs} vs {rhs}");
            }
            assert!(lo <= p_hat && p_hat <= hi);
        }
    }

    #[test]
    fn lost_and_gained_points_are_counted_by_index_and_class() {
        let before = [true, true, false, true, false];
        let now = [true, false, true, false, false];
        let r = of_verdicts("b.lipfp", &before, &now, &[0, 1, 1, 2, 0]);
        assert_eq!((r.lost.clone(), r.gained.clone()), (vec![1, 3], vec![2]));
        assert_eq!(r.lost_by_class, [0, 1, 1]);
        assert_eq!(r.gained_by_class, [0, 1, 0]);
        assert_eq!((r.before.count, r.now.count), (3, 2));
        assert_eq!(r.p_value, 1.0);
        assert_eq!(r.drop_p_value(), 1.0);
        let r = of_verdicts("b", &[true; 12], &[false; 12], &[0; 12]);
        assert_eq!(r.drop_p_value(), 2.0 / 4096.0);
    }
}
