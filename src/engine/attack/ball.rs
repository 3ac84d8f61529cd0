//! The exact side of the falsifier: candidates rounded onto the deployment format without
//! leaving the ball, the exact membership test, and the seeded random numbers of the restarts.

use rug::{Assign, Rational};

use crate::arith::format::Format;
use crate::bounds::ball::{BallSpec, Norm};

/// The format value next to `r` (a value of `fmt`) towards `+inf` (`up`) or `-inf`.
fn neighbour(fmt: Format, r: f64, up: bool) -> f64 {
    // sign-magnitude encodings: away from zero is `bits + 1`, towards zero `bits - 1`
    let step16 = |bits: u16| -> u16 {
        let negative = bits & 0x8000 != 0;
        if bits & 0x7fff == 0 {
            return if up { 0x0001 } else { 0x8001 };
        }
        if up != negative {
            bits + 1
        } else {
            bits - 1
        }
    };
    match fmt {
        Format::Float64 => {
            if up {
                r.next_up()
            } else {
                r.next_down()
            }
        }
        Format::Float32 => {
            let v = r as f32;
            f64::from(if up { v.next_up() } else { v.next_down() })
        }
        Format::Float16 => half::f16::from_bits(step16(half::f16::from_f64(r).to_bits())).to_f64(),
        Format::Bfloat16 => {
            half::bf16::from_bits(step16(half::bf16::from_f64(r).to_bits())).to_f64()
        }
    }
}

/// `v` rounded onto `fmt` towards the centre `x0` (values of `fmt`): coordinate by coordinate the
/// nearest format value, or its neighbour towards `x0` when the nearest one lies farther from
/// `x0` than `v` does. Every `|c_i - x0_i| <= |v_i - x0_i|`, so the candidate is no farther from
/// the centre than `v`. `None` when a coordinate of `v` is not finite.
pub fn round_towards_centre(fmt: Format, v: &[f64], x0: &[f64]) -> Option<Vec<f64>> {
    v.iter()
        .zip(x0)
        .map(|(&v, &c)| {
            if !v.is_finite() {
                return None;
            }
            let r = fmt.round(v);
            let away = (v >= c && r > v) || (v <= c && r < v);
            let r = if away { neighbour(fmt, r, r < v) } else { r };
            r.is_finite().then_some(r)
        })
        .collect()
}

/// Whether `||x - x0||_2 <= eps` holds exactly: the squared distance summed in rational
/// arithmetic (every `f64` is a rational) against `eps^2`.
pub fn in_ball_exact(x: &[f64], x0: &[f64], eps: &Rational) -> bool {
    if x.len() != x0.len() || *eps < 0 {
        return false;
    }
    let mut sum = Rational::new();
    let mut d = Rational::new();
    for (&a, &b) in x.iter().zip(x0) {
        let (Some(a), Some(b)) = (Rational::from_f64(a), Rational::from_f64(b)) else {
            return false;
        };
        d.assign(&a - &b);
        d.square_mut();
        sum += &d;
    }
    let eps2 = Rational::from(eps * eps);
    sum <= eps2
}

/// Whether `||x - x0||_inf <= eps` holds exactly: every difference formed in rational arithmetic.
pub fn in_box_exact(x: &[f64], x0: &[f64], eps: &Rational) -> bool {
    if x.len() != x0.len() || *eps < 0 {
        return false;
    }
    let mut d = Rational::new();
    x.iter().zip(x0).all(|(&a, &b)| {
        let (Some(a), Some(b)) = (Rational::from_f64(a), Rational::from_f64(b)) else {
            return false;
        };
        d.assign(&a - &b);
        d.abs_mut();
        d <= *eps
    })
}

/// Whether `x` lies in the set of radius `eps` around `x0` that `ball` describes, exactly: in the
/// input range (when declared) and within `eps` in the set's norm.
pub fn in_set_exact(x: &[f64], x0: &[f64], eps: &Rational, ball: BallSpec) -> bool {
    if let Some(r) = ball.range {
        if !x.iter().all(|v| r.contains(*v)) {
            return false;
        }
    }
    match ball.norm {
        Norm::L2 => in_ball_exact(x, x0, eps),
        Norm::Linf => in_box_exact(x, x0, eps),
    }
}

/// SplitMix64: a small deterministic generator, seeded per point and restart.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// The generator of restart `restart` at global point `index`.
    pub fn new(index: usize, restart: usize) -> SplitMix {
        SplitMix(
            (index as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((restart as u64).wrapping_mul(0xD1B5_4A32_D192_ED03))
                ^ 0x6C69_7066_7061_7474,
        )
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal deviate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_towards_the_centre_never_moves_away() {
        for fmt in Format::ALL {
            let x0 = [0.5, -0.25, 0.0, 1.0];
            let v = [0.5 + 1e-3 / 3.0, -0.25 - 7e-4, 1e-9, 1.0 - 1e-5];
            let c = round_towards_centre(fmt, &v, &x0).unwrap();
            for k in 0..4 {
                assert_eq!(fmt.round(c[k]), c[k], "{fmt}: a format value");
                assert!((c[k] - x0[k]).abs() <= (v[k] - x0[k]).abs(), "{fmt} {k}");
            }
        }
        assert!(round_towards_centre(Format::Float32, &[f64::NAN], &[0.0]).is_none());
    }

    #[test]
    fn the_box_and_range_tests_are_exact() {
        let eps = crate::policy::parse_decimal_exact("0.1").unwrap();
        // 0.1 as f64 is above the decimal: a difference of exactly that f64 is outside
        assert!(!in_box_exact(&[0.1], &[0.0], &eps));
        assert!(in_box_exact(
            &[0.1f64.next_down(), -0.05],
            &[0.0, 0.0],
            &eps
        ));
        // 0.3 - 0.2 in rationals is just below 0.1 (the f64 subtraction rounds to 0.1)
        let q = |x: f64| Rational::from_f64(x).unwrap();
        let exact = (q(0.3) - q(0.2)).abs() <= eps;
        assert_eq!(in_box_exact(&[0.3], &[0.2], &eps), exact);
        let ball = BallSpec {
            norm: Norm::Linf,
            range: Some(crate::bounds::ball::InputRange::new(0.0, 1.0).unwrap()),
        };
        assert!(!in_set_exact(&[-1e-300, 0.5], &[0.0, 0.5], &eps, ball));
        assert!(in_set_exact(&[0.0, 0.55], &[0.0, 0.5], &eps, ball));
        let l2 = BallSpec::default();
        assert!(!in_set_exact(&[0.08, 0.08], &[0.0, 0.0], &eps, l2));
        assert!(in_set_exact(&[0.07, 0.07], &[0.0, 0.0], &eps, l2));
    }

    #[test]
    fn the_ball_test_is_exact() {
        let eps = crate::policy::parse_decimal_exact("0.3").unwrap();
        // the f64 nearest 0.3 is just below the decimal, the next one above it: the radius
        // certificates use (`Radius::Uniform::up`) is outside the ball
        assert!(in_ball_exact(&[0.3], &[0.0], &eps));
        assert!(!in_ball_exact(&[0.3f64.next_up()], &[0.0], &eps));
        let up = match crate::policy::Radius::parse_decimal("0.3").unwrap() {
            crate::policy::Radius::Uniform { up, .. } => up,
            _ => unreachable!(),
        };
        assert!(!in_ball_exact(&[-up], &[0.0], &eps));
        // 0.18 and 0.24 as f64 are not the decimals: the answer is the exact comparison
        let q = |x: f64| Rational::from_f64(x).unwrap();
        let sum = q(0.18) * q(0.18) + q(0.24) * q(0.24);
        let expected = sum <= Rational::from(&eps * &eps);
        assert_eq!(in_ball_exact(&[0.18, 0.24], &[0.0, 0.0], &eps), expected);
    }
}
