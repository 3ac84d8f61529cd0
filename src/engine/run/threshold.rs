//! A point's threshold in one mode: a sound lower bound on the largest radius its certificate
//! holds at, bracketed and narrowed by running the certificate (module docs of [`super::curve`]:
//! every certificate but `local` is monotone in `eps`).

use crate::bounds::certify::{margin_lower, predicted_class, Centre, Certifier, Mode};

/// Relative width at which the bisection of a point's threshold stops.
const RELATIVE_WIDTH: f64 = 1e-4;

/// At most this many doublings or halvings while bracketing a threshold.
const BRACKET_STEPS: usize = 64;

/// One point's threshold in one mode: certified at `lo` and below (`None`: not known certified
/// even at 0), not certified at `hi` and above; a radius in between is decided by running the
/// certificate there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Threshold {
    pub(super) lo: Option<f64>,
    pub(super) hi: f64,
}

/// A first guess of a point's threshold: its real-arithmetic radius `min_j m_hat_ij / L_ij`, in
/// the set's norm.
pub(super) fn guess(certifier: &Certifier<'_>, c: &Centre<'_>) -> f64 {
    let Some(i) = predicted_class(c.logits) else {
        return 1.0;
    };
    let mut g = f64::INFINITY;
    for j in (0..certifier.fmt.classes).filter(|&j| j != i) {
        g = g.min(margin_lower(c.logits, i, j) / certifier.fmt.pair(i, j).lip);
    }
    // the Lipschitz certificates check the cover's l2 radius: the set's radius is `scale` times less
    let g = g / c.cover.scale();
    if g.is_finite() && g > 0.0 {
        g
    } else {
        1.0
    }
}

/// A bracket `[lo, hi]` of a point's threshold: certified at `lo` with slack `s_lo > 0`, not at
/// `hi` (slack `s_hi`, when the certificate computed one).
#[derive(Clone, Copy, Debug)]
struct Bracket {
    lo: f64,
    s_lo: f64,
    hi: f64,
    s_hi: Option<f64>,
}

impl Bracket {
    /// The next radii to try: around the false-position root when both slacks are known (the
    /// slack is piecewise affine in `eps`, so the root is usually exact and the two probes
    /// `RELATIVE_WIDTH / 4` either side close the bracket), else the midpoint.
    fn probes(&self) -> Vec<f64> {
        let width = self.hi - self.lo;
        match self.s_hi {
            Some(s_hi) if s_hi.is_finite() && self.s_lo - s_hi > 0.0 => {
                let root = self.lo + width * (self.s_lo / (self.s_lo - s_hi));
                let delta = RELATIVE_WIDTH / 4.0 * root;
                [root - delta, root + delta]
                    .into_iter()
                    .filter(|&e| e > self.lo && e < self.hi)
                    .collect()
            }
            _ => vec![self.lo + width / 2.0],
        }
    }
}

/// The threshold of one point in `mode`: bracketed from the real-arithmetic radius by doubling
/// or halving, then narrowed by false position (bisection where a slack is unknown) to a
/// relative width of [`RELATIVE_WIDTH`]; every `lo` is a radius the certificate holds at.
pub(super) fn threshold(certifier: &Certifier<'_>, mode: Mode, c: &Centre<'_>) -> Threshold {
    let run = |eps: f64| {
        let r = certifier.certify(mode, c, eps);
        (r.verdict.is_ok(), r.slack.filter(|s| !s.is_nan()))
    };
    threshold_by(run, guess(certifier, c))
}

/// [`threshold`] for any certificate `run(eps) -> (certified, slack)`, starting from the radius
/// `first`.
pub(super) fn threshold_by(run: impl Fn(f64) -> (bool, Option<f64>), first: f64) -> Threshold {
    let (ok0, s0) = run(0.0);
    if !ok0 {
        return Threshold { lo: None, hi: 0.0 };
    }
    let mut b = Bracket {
        lo: 0.0,
        s_lo: s0.unwrap_or(f64::MIN_POSITIVE),
        hi: f64::INFINITY,
        s_hi: None,
    };
    let mut e = first;
    for _ in 0..BRACKET_STEPS {
        let (ok, s) = run(e);
        if ok {
            (b.lo, b.s_lo) = (e, s.unwrap_or(f64::MIN_POSITIVE));
            e *= 2.0;
        } else {
            (b.hi, b.s_hi) = (e, s);
            break;
        }
    }
    let mut evaluations = 0;
    while b.hi.is_finite() && b.hi - b.lo > RELATIVE_WIDTH * b.hi && evaluations < 4 * BRACKET_STEPS
    {
        for e in b.probes() {
            evaluations += 1;
            let (ok, s) = run(e);
            if ok && e > b.lo {
                (b.lo, b.s_lo) = (e, s.unwrap_or(f64::MIN_POSITIVE));
            } else if !ok && e < b.hi {
                (b.hi, b.s_hi) = (e, s);
            }
        }
    }
    Threshold {
        lo: Some(b.lo),
        hi: b.hi,
    }
}
