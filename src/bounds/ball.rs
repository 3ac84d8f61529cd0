//! The set a certificate speaks about at a point `x` and radius `eps` (docs/soundness.md
//! "Input sets"): the l2 ball `||x' - x||_2 <= eps` or the l_inf ball `||x' - x||_inf <= eps`,
//! either intersected with the valid input range `[lo, hi]` of every feature when one is declared.
//!
//! The local bounds hold over the set itself (an l_inf ball clipped to the range is a box,
//! [`clipped_box`]). The Lipschitz certificates hold over an l2 ball around `x`; for an l_inf ball
//! they use the smallest l2 ball around `x` containing the unclipped box, of radius
//! `eps sqrt(n)` ([`Cover`]). Every such ball contains the set, so every certificate of the ball
//! holds on the set. A range only shrinks the set, so a certificate that ignores it stays sound.

use crate::arith::format::{pow2, Format};
use crate::arith::sound::{add_down, add_up, mul_up, sqrt_up, sub_down};

/// The norm a radius is measured in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Norm {
    /// Euclidean.
    #[default]
    L2,
    /// Largest coordinate.
    Linf,
}

impl Norm {
    /// The name in policies, flags and reports: `l2` or `linf`.
    pub fn name(self) -> &'static str {
        match self {
            Norm::L2 => "l2",
            Norm::Linf => "linf",
        }
    }

    /// The norm named `text` (`l2`, `linf`), else a message listing both.
    pub fn parse(text: &str) -> Result<Norm, String> {
        match text {
            "l2" => Ok(Norm::L2),
            "linf" => Ok(Norm::Linf),
            other => Err(format!("`{other}` is not a norm: use \"l2\" or \"linf\"")),
        }
    }
}

impl std::fmt::Display for Norm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The valid range `[lo, hi]` of every input feature (e.g. pixels in `[0, 1]`): finite, `lo <= hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputRange {
    /// Smallest valid value.
    pub lo: f64,
    /// Largest valid value.
    pub hi: f64,
}

impl InputRange {
    /// The range `[lo, hi]`, or why it is not one.
    pub fn new(lo: f64, hi: f64) -> Result<InputRange, String> {
        if !(lo.is_finite() && hi.is_finite()) {
            return Err(format!("[{lo}, {hi}]: both ends must be finite numbers"));
        }
        if lo > hi {
            return Err(format!(
                "[{lo}, {hi}]: the lower end is above the upper end"
            ));
        }
        // `+ 0.0` turns `-0.0` into `0.0`, so that equal ranges have equal bits ([`Hash`])
        Ok(InputRange {
            lo: lo + 0.0,
            hi: hi + 0.0,
        })
    }

    /// Whether `v` lies in the range.
    pub fn contains(self, v: f64) -> bool {
        self.lo <= v && v <= self.hi
    }
}

// ranges are finite and their zeros positive ([`InputRange::new`]): equality is bitwise
impl Eq for InputRange {}

impl std::hash::Hash for InputRange {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.lo.to_bits().hash(state);
        self.hi.to_bits().hash(state);
    }
}

impl std::fmt::Display for InputRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}]", self.lo, self.hi)
    }
}

/// How a radius becomes a set of inputs around each point: the norm, and the valid range the
/// set is clipped to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BallSpec {
    /// The norm of the radius.
    pub norm: Norm,
    /// The valid input range, when declared.
    pub range: Option<InputRange>,
}

impl BallSpec {
    /// The Lipschitz certificates' cover of this set in `dim` input dimensions.
    pub fn cover(self, dim: usize) -> Cover {
        match self.norm {
            Norm::L2 => Cover::L2,
            Norm::Linf => Cover::linf(dim),
        }
    }

    /// For an l_inf ball, the note saying which sets the certificates check in `dim` dimensions
    /// (docs/soundness.md "Input sets"); `None` for an l2 ball.
    pub fn cover_note(self, dim: usize) -> Option<String> {
        (self.norm == Norm::Linf).then(|| {
            let clipped = self
                .range
                .map_or(String::new(), |r| format!(" clipped to {r}"));
            format!(
                "input set: the l_inf ball{clipped}; the Lipschitz certificates check the l2 ball \
                 of radius eps x {} (sqrt({dim}) rounded up) around each point, which contains \
                 it; local bounds hold over the clipped box itself",
                self.cover(dim).scale()
            )
        })
    }

    /// The set a description names, when it is exactly one [`BallSpec::describe`] writes (a
    /// certificate file's claim is checked against it before any report shows it).
    pub fn from_description(text: &str) -> Option<BallSpec> {
        let (norm, range) = match text.split_once(" in ") {
            None => (text, None),
            Some((norm, range)) => {
                let inner = range.strip_prefix('[')?.strip_suffix(']')?;
                let (lo, hi) = inner.split_once(", ")?;
                let r = InputRange::new(lo.parse().ok()?, hi.parse().ok()?).ok()?;
                (norm, Some(r))
            }
        };
        let spec = BallSpec {
            norm: Norm::parse(norm).ok()?,
            range,
        };
        (spec.describe() == text).then_some(spec)
    }

    /// How reports name the set: `l2`, `linf`, with ` in [lo, hi]` when clipped.
    pub fn describe(self) -> String {
        match self.range {
            Some(r) => format!("{} in {r}", self.norm),
            None => self.norm.to_string(),
        }
    }
}

/// The l2 ball around the point that the Lipschitz certificates check for a radius `eps` of the
/// set: radius `scale * eps`, rounded up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cover {
    scale: f64,
}

impl Cover {
    /// The l2 ball itself (`scale = 1`).
    pub const L2: Cover = Cover { scale: 1.0 };

    /// For the l_inf ball in `dim` dimensions: every `x'` with `|x'_k - x_k| <= eps` has
    /// `||x' - x||_2 <= eps sqrt(dim)`, attained at a vertex; `scale = sqrt(dim)` rounded up
    /// (`dim` is exact in `f64` below `2^53`).
    pub fn linf(dim: usize) -> Cover {
        Cover {
            scale: sqrt_up(dim as f64),
        }
    }

    /// The factor from the set's radius to the l2 radius.
    pub fn scale(self) -> f64 {
        self.scale
    }

    /// The l2 radius covering the set of radius `eps` (an upper bound): `eps` itself for the l2
    /// ball, `eps * scale` rounded up for the l_inf ball.
    pub fn l2_radius(self, eps: f64) -> f64 {
        if self == Cover::L2 {
            eps
        } else {
            mul_up(eps, self.scale)
        }
    }
}

/// The l_inf ball of radius `eps` around `x` clipped to `range`, as a box `[lo, hi]` containing
/// it: per feature `max(range.lo, x_k - eps)` rounded down and `min(range.hi, x_k + eps)` rounded
/// up. Every `x_k` must lie in the range (the caller checks the data), so the box is never empty.
pub fn clipped_box(x: &[f64], eps: f64, range: Option<InputRange>) -> (Vec<f64>, Vec<f64>) {
    let (lo_end, hi_end) = range.map_or((f64::NEG_INFINITY, f64::INFINITY), |r| (r.lo, r.hi));
    let lo = x.iter().map(|&v| sub_down(v, eps).max(lo_end)).collect();
    let hi = x.iter().map(|&v| add_up(v, eps).min(hi_end)).collect();
    (lo, hi)
}

/// One end of a box that holds the deployment-format rounding of every point of a real box,
/// from the float64 values `d <= v` around the real end (equal when it is a float64 value):
/// `RN(x) >= RN(lo) >= lo - u |lo| - a_mul` for `x >= lo` (round to nearest is monotone; its
/// error is at most `u |v|` for normal and `a_mul` for subnormal results), rounded outward, and
/// symmetrically above; no widening where the end is itself a value of the format.
pub fn conversion_end(format: Format, (d, v): (f64, f64), down: bool) -> f64 {
    let (u, a_mul) = (
        format.unit_roundoff(),
        // float64's 2^-1075 is below the smallest double: 2^-1074 bounds it above
        pow2(format.a_mul_exponent().max(-1074)),
    );
    let exact = d == v && format.round(d) == d;
    let slack = add_up(mul_up(u, d.abs().max(v.abs())), a_mul);
    match (exact, down) {
        (true, _) => d,
        (false, true) => add_down(d, -slack),
        (false, false) => add_up(v, slack),
    }
}

/// The box `[lo, hi]` (float64 ends) widened by [`conversion_end`] to hold the deployment-format
/// rounding of each of its points.
pub fn conversion_hull(format: Format, lo: &[f64], hi: &[f64]) -> (Vec<f64>, Vec<f64>) {
    (
        lo.iter()
            .map(|&l| conversion_end(format, (l, l), true))
            .collect(),
        hi.iter()
            .map(|&h| conversion_end(format, (h, h), false))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Rational;

    fn q(v: f64) -> Rational {
        Rational::from_f64(v).unwrap()
    }

    #[test]
    fn the_linf_cover_contains_the_box_corner() {
        // ||(eps, .., eps)||_2 = eps sqrt(n): the cover's radius squared is at least n eps^2
        for (dim, eps) in [(1, 0.3), (2, 0.1), (784, 0.011), (3, 1e-300), (10, 7.0)] {
            let r = Cover::linf(dim).l2_radius(eps);
            assert!(
                q(r) * q(r) >= Rational::from(dim) * q(eps) * q(eps),
                "{dim} {eps}"
            );
            // and not by more than a few ulps (1 ulp for the root, 1 for the product)
            assert!(r <= eps * (dim as f64).sqrt() * (1.0 + 4.0 * f64::EPSILON) || eps < 1e-290);
        }
        assert_eq!(Cover::L2.l2_radius(0.3), 0.3);
        assert_eq!(Cover::linf(4).scale(), 2.0f64.next_up());
    }

    #[test]
    fn the_clipped_box_contains_the_clipped_ball() {
        let x = [0.0, 0.5, 1.0, 0.1, 0.3];
        let eps = 0.1;
        let range = InputRange::new(0.0, 1.0).unwrap();
        let (lo, hi) = clipped_box(&x, eps, Some(range));
        assert_eq!(lo[0], 0.0);
        assert_eq!(hi[2], 1.0);
        for k in 0..x.len() {
            // the exact ends max(0, x - eps) and min(1, x + eps) are inside
            let want_lo = (q(x[k]) - q(eps)).max(Rational::new());
            let want_hi = (q(x[k]) + q(eps)).min(Rational::from(1));
            assert!(q(lo[k]) <= want_lo && want_hi <= q(hi[k]), "{k}");
            assert!(range.contains(lo[k]) && range.contains(hi[k]));
        }
        let (lo, hi) = clipped_box(&[2.0], 0.5, None);
        assert!(lo[0] <= 1.5 && hi[0] >= 2.5);
    }

    #[test]
    fn norms_and_ranges_are_read_and_refused_by_name() {
        assert_eq!(Norm::parse("linf"), Ok(Norm::Linf));
        assert_eq!(Norm::parse("l2"), Ok(Norm::L2));
        assert!(Norm::parse("l1").unwrap_err().contains("\"linf\""));
        assert!(InputRange::new(1.0, 0.0).is_err());
        assert!(InputRange::new(0.0, f64::INFINITY).is_err());
        let spec = BallSpec {
            norm: Norm::Linf,
            range: Some(InputRange::new(0.0, 1.0).unwrap()),
        };
        assert_eq!(spec.describe(), "linf in [0, 1]");
        assert_eq!(BallSpec::default().describe(), "l2");
        // descriptions read back exactly; anything else is refused
        for text in ["l2", "linf", "linf in [0, 1]", "l2 in [-0.5, 2.25]"] {
            assert_eq!(BallSpec::from_description(text).unwrap().describe(), text);
        }
        for text in [
            "",
            "l1",
            "linf in [1, 0]",
            "linf in [0,1]",
            "linf\nin [0, 1]",
            "linf in [0, inf]",
        ] {
            assert!(BallSpec::from_description(text).is_none(), "{text:?}");
        }
    }

    /// A value of the format is kept; any other end moves outward by `u |v| + a_mul`
    /// (float32: `u = 2^-24`, `a_mul = 2^-150`), past the rounding of every point of the box.
    #[test]
    fn the_conversion_hull_holds_every_rounding_of_the_box() {
        use crate::arith::format::Format;
        let (lo, hi) = conversion_hull(Format::Float32, &[0.5, 0.1, -0.1], &[1.0, 0.3, 0.0]);
        assert_eq!((lo[0], hi[0], hi[2]), (0.5, 1.0, 0.0));
        let slack = |v: f64| v.abs() * 2f64.powi(-24) + 2f64.powi(-150);
        assert!(lo[1] <= 0.1 - slack(0.1) && lo[1] >= (0.1 - slack(0.1)).next_down());
        assert!(hi[1] >= 0.3 + slack(0.3) && hi[1] <= (0.3 + slack(0.3)).next_up());
        assert!(lo[2] <= -0.1 - slack(0.1));
        // the float32 roundings of the ends lie inside
        for (v, l, h) in [
            (0.1f64, lo[1], hi[1]),
            (0.3, lo[1], hi[1]),
            (-0.1, lo[2], hi[2]),
        ] {
            let r = f64::from(v as f32);
            assert!(l <= r && r <= h, "{v}");
        }
        // float64 ends in float64 are kept
        assert_eq!(conversion_end(Format::Float64, (0.1, 0.1), true), 0.1);
        // a real end between two doubles widens from the outer one
        let d = 0.1f64;
        assert!(conversion_end(Format::Float32, (d, d.next_up()), false) > d.next_up());
    }
}
