//! Deployment floating-point formats: the constants of the paper's standard model
//! (sec. 3.2 "Floating-Point Error"; Appendix "Flush-to-Zero Execution") and round-to-nearest-even
//! conversion into each format.
//!
//! Every value of every supported format is exactly representable as an `f64`, so the
//! project stores converted weights, inputs and logits as `f64` holding exact format values.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A floating-point format a model can be deployed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// IEEE-754 binary64.
    Float64,
    /// IEEE-754 binary32.
    Float32,
    /// IEEE-754 binary16.
    Float16,
    /// Brain floating point: binary32's exponent range with an 8-bit significand.
    Bfloat16,
}

/// The names accepted on the command line and in the policy.
pub const FORMAT_NAMES: &str = "float64, float32, float16, bfloat16";

impl Format {
    /// All formats, widest first.
    pub const ALL: [Format; 4] = [
        Format::Float64,
        Format::Float32,
        Format::Float16,
        Format::Bfloat16,
    ];

    /// The format's name as written in policies and reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Float64 => "float64",
            Format::Float32 => "float32",
            Format::Float16 => "float16",
            Format::Bfloat16 => "bfloat16",
        }
    }

    /// Significand precision `p` in bits (including the implicit bit).
    pub fn precision(self) -> u32 {
        match self {
            Format::Float64 => 53,
            Format::Float32 => 24,
            Format::Float16 => 11,
            Format::Bfloat16 => 8,
        }
    }

    /// Exponent of the smallest positive normal number: `lambda = 2^emin`.
    pub fn emin(self) -> i32 {
        match self {
            Format::Float64 => -1022,
            Format::Float32 | Format::Bfloat16 => -126,
            Format::Float16 => -14,
        }
    }

    /// Exponent of the largest finite number's leading bit.
    pub fn emax(self) -> i32 {
        match self {
            Format::Float64 => 1023,
            Format::Float32 | Format::Bfloat16 => 127,
            Format::Float16 => 15,
        }
    }

    /// Unit roundoff `u = 2^-p` (exact).
    pub fn unit_roundoff(self) -> f64 {
        pow2(-(self.precision() as i32))
    }

    /// Smallest positive normal number `lambda = 2^emin` (exact).
    pub fn lambda(self) -> f64 {
        pow2(self.emin())
    }

    /// Exponent `e` with `a_mul = u * lambda = 2^e`: half the smallest subnormal.
    ///
    /// For float64 `a_mul = 2^-1075` is itself below the smallest `f64` subnormal, so the bound
    /// code works from this exponent with rug (see `certify::quantities`).
    pub fn a_mul_exponent(self) -> i32 {
        self.emin() - self.precision() as i32
    }

    /// Largest finite value `F_max = (2 - 2^(1-p)) * 2^emax` (exact).
    pub fn f_max(self) -> f64 {
        match self {
            Format::Float64 => f64::MAX,
            _ => (2.0 - pow2(1 - self.precision() as i32)) * pow2(self.emax()),
        }
    }

    /// Round an `f64` to this format, round-to-nearest ties-to-even, with gradual underflow
    /// and overflow to infinity; the result is returned as the (exact) `f64` of that value.
    pub fn round(self, x: f64) -> f64 {
        match self {
            Format::Float64 => x,
            Format::Float32 => x as f32 as f64,
            Format::Float16 | Format::Bfloat16 => self.round_narrow(x),
        }
    }

    /// Round-to-nearest-even onto the grid of a format narrower than float32.
    ///
    /// (`half`'s `from_f64` does not round correctly in the float16 subnormal range, so the
    /// project rounds itself.) For `|x|` in binade `[2^e, 2^(e+1))` the format's spacing is
    /// `q = 2^(max(e, emin) - p + 1)`; `x / q` and the product back are exact power-of-two
    /// scalings in `f64`, and `round_ties_even` is exact, so the result is the correctly
    /// rounded value. Magnitudes above `F_max` after rounding become infinities.
    fn round_narrow(self, x: f64) -> f64 {
        if x == 0.0 || !x.is_finite() {
            return x;
        }
        let p = self.precision() as i32;
        // exponent of the leading bit; f64 subnormals are far below every format's range
        let e = if x.abs() >= f64::MIN_POSITIVE {
            ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
        } else {
            -1023
        };
        let q = pow2(e.max(self.emin()) - p + 1);
        let r = (x / q).round_ties_even() * q;
        if r.abs() > self.f_max() {
            f64::INFINITY.copysign(x)
        } else {
            r
        }
    }

    /// Round an `f32` to this format, round-to-nearest-even (identity for float32 and
    /// float64): the one rounding of a float32-accumulated layer output to its storage format.
    pub fn round_f32(self, x: f32) -> f32 {
        match self {
            Format::Float64 | Format::Float32 => x,
            Format::Float16 => round_f32_to_f16(x),
            Format::Bfloat16 => round_f32_to_bf16(x),
        }
    }

    /// True when every value of `other` is a value of `self` (at least the precision and the
    /// exponent range): converting `other` to `self` is exact.
    pub fn contains(self, other: Format) -> bool {
        self.precision() >= other.precision()
            && self.emin() <= other.emin()
            && self.emax() >= other.emax()
    }

    /// The next wider format a runtime accumulates this storage format in, if any: float16 and
    /// bfloat16 layers run in float32 (onnxruntime CPU, cuBLAS), float32 may run in float64.
    pub fn next_wider(self) -> Option<Format> {
        match self {
            Format::Float16 | Format::Bfloat16 => Some(Format::Float32),
            Format::Float32 => Some(Format::Float64),
            Format::Float64 => None,
        }
    }

    /// True when `x` is a nonzero subnormal number of this format.
    pub fn is_subnormal(self, x: f64) -> bool {
        x != 0.0 && x.abs() < self.lambda()
    }
}

/// Round-to-nearest-even of an `f32` onto the float16 grid, returned as `f32`; branch-free so
/// the emulation loops vectorise (checked against [`Format::round`] in the tests).
///
/// * Normal float16 range (`|x| >= 2^-14`): drop the 13 low significand bits with RNE by
///   adding `0xFFF` plus the lowest kept bit, then masking (a carry moves into the exponent,
///   which is the correct rounding up to the next binade).
/// * Subnormal range: `(|x| + 0.5) - 0.5`; in `[0.5, 1)` the float32 spacing is `2^-24`, the
///   float16 subnormal spacing, and `0.5` is an even multiple of it, so the float32 addition
///   rounds `|x|` to the float16 grid with ties to even, and the subtraction is exact.
/// * Results above 65504 (after rounding) become infinity; NaN stays NaN.
#[inline]
pub fn round_f32_to_f16(x: f32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7FFF_FFFF;
    let normal = (abs + 0x0FFF + ((abs >> 13) & 1)) & !0x1FFF;
    let sub = ((f32::from_bits(abs) + 0.5) - 0.5).to_bits();
    let r = if abs < 0x3880_0000 { sub } else { normal };
    let r = if r > 0x477F_E000 { 0x7F80_0000 } else { r };
    let r = if abs > 0x7F80_0000 { abs } else { r };
    f32::from_bits(r | sign)
}

/// Round-to-nearest-even of an `f32` onto the bfloat16 grid (float32's exponent range, 8-bit
/// significand): drop the 16 low bits with RNE (subnormals included: bfloat16 subnormals are
/// truncated float32 subnormals; a carry into the exponent rounds to the next binade or to
/// infinity); NaN stays NaN.
#[inline]
pub fn round_f32_to_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7FFF_FFFF;
    let r = (abs + 0x7FFF + ((abs >> 16) & 1)) & 0xFFFF_0000;
    let r = if abs > 0x7F80_0000 { abs } else { r };
    f32::from_bits(r | sign)
}

/// `2^e` for `e` in the `f64` range (normal or subnormal), exactly.
pub fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        assert!(e <= 1023, "pow2 exponent out of range");
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        assert!(e >= -1074, "pow2 exponent out of range");
        f64::from_bits(1u64 << (e + 1074))
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown format `{s}` (supported: {FORMAT_NAMES})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::float::Round;
    use rug::Float;

    #[test]
    fn containment_and_widening() {
        assert!(Format::Float32.contains(Format::Float16));
        assert!(Format::Float32.contains(Format::Bfloat16));
        assert!(Format::Float64.contains(Format::Float32));
        assert!(!Format::Float16.contains(Format::Bfloat16));
        assert!(!Format::Bfloat16.contains(Format::Float16));
        assert!(!Format::Float16.contains(Format::Float32));
        for f in Format::ALL {
            assert!(f.contains(f));
            if let Some(w) = f.next_wider() {
                assert!(w.contains(f) && w != f);
            }
        }
    }

    /// Nonzero values below `lambda` (the smallest normal) are subnormal, in either sign; zero
    /// and `lambda` itself are not (read by the flush-to-zero weight conversion).
    #[test]
    fn subnormals_are_the_nonzero_values_below_lambda() {
        for f in Format::ALL {
            let lambda = f.lambda();
            assert!(
                f.is_subnormal(lambda / 2.0) && f.is_subnormal(-lambda / 2.0),
                "{f}"
            );
            assert!(!f.is_subnormal(lambda) && !f.is_subnormal(-lambda), "{f}");
            assert!(!f.is_subnormal(0.0) && !f.is_subnormal(-0.0), "{f}");
        }
        assert!(Format::Float16.is_subnormal(pow2(-15)));
        assert!(!Format::Float32.is_subnormal(pow2(-15)));
    }

    /// `pow2` is exact over the whole range, the subnormal end included.
    #[test]
    fn powers_of_two_are_exact_down_to_the_smallest_subnormal() {
        assert_eq!(pow2(-1074), f64::from_bits(1));
        assert_eq!(pow2(-1073), f64::from_bits(2));
        assert_eq!(pow2(-1023), f64::from_bits(1 << 51));
        assert_eq!(pow2(-1022), f64::MIN_POSITIVE);
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(1023), f64::MAX / (2.0 - f64::EPSILON));
    }

    #[test]
    fn constants_match_design_table() {
        assert_eq!(Format::Float64.unit_roundoff(), pow2(-53));
        assert_eq!(Format::Float32.unit_roundoff(), pow2(-24));
        assert_eq!(Format::Float16.unit_roundoff(), pow2(-11));
        assert_eq!(Format::Bfloat16.unit_roundoff(), pow2(-8));
        assert_eq!(Format::Float64.lambda(), f64::MIN_POSITIVE);
        assert_eq!(Format::Float32.lambda(), f32::MIN_POSITIVE as f64);
        assert_eq!(Format::Float16.lambda(), pow2(-14));
        assert_eq!(Format::Bfloat16.lambda(), pow2(-126));
        assert_eq!(Format::Float32.a_mul_exponent(), -150);
        assert_eq!(Format::Float16.a_mul_exponent(), -25);
        assert_eq!(Format::Bfloat16.a_mul_exponent(), -134);
        assert_eq!(Format::Float64.a_mul_exponent(), -1075);
        assert_eq!(Format::Float32.f_max(), f32::MAX as f64);
        assert_eq!(Format::Float16.f_max(), 65504.0);
        assert_eq!(Format::Bfloat16.f_max(), half::bf16::MAX.to_f64());
        assert_eq!(Format::Float64.f_max(), f64::MAX);
    }

    /// Reference rounding with rug: snap to the subnormal grid below lambda, otherwise round
    /// to `p` significant bits; overflow past the format's range gives infinity.
    fn reference_round(f: Format, x: f64) -> f64 {
        let p = f.precision();
        if x.abs() < f.lambda() {
            let spacing = pow2(f.emin() + 1 - p as i32);
            let q = Float::with_val(200, x) / spacing;
            let (r, _) = q.to_integer_round(Round::Nearest).unwrap(); // ties to even
            return r.to_f64() * spacing;
        }
        let v = Float::with_val_round(p, x, Round::Nearest).0.to_f64();
        if v.abs() > f.f_max() {
            f64::INFINITY.copysign(x)
        } else {
            v
        }
    }

    #[test]
    fn fast_f32_rounding_matches_the_reference_on_a_stride_of_all_f32() {
        // every 251st bit pattern (17 million values, both signs, every exponent), plus edges
        let mut patterns: Vec<u32> = (0..=u32::MAX).step_by(251).collect();
        for base in [
            0x3880_0000u32,
            0x477F_E000,
            0x4780_0000,
            0x7F7F_FFFF,
            0x7F80_0000,
            0x0000_0001,
        ] {
            for d in 0..0x4000u32 {
                patterns.push(base.wrapping_sub(0x2000).wrapping_add(d));
            }
        }
        for &b in &patterns {
            for f in [Format::Float16, Format::Bfloat16] {
                let x = f32::from_bits(b);
                let fast = f.round_f32(x);
                let slow = f.round(x as f64);
                if x.is_nan() {
                    assert!(fast.is_nan());
                } else {
                    assert_eq!(
                        fast.to_bits(),
                        (slow as f32).to_bits(),
                        "{f} {b:#010x} {x:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn round_is_nearest_even_incl_ties_and_subnormals() {
        let mut cases = vec![
            0.1,
            1.0 / 3.0,
            65504.0,
            65520.0,
            65519.99,
            1e-8,
            3e-8,
            1e-40,
        ];
        for f in [Format::Float16, Format::Bfloat16, Format::Float32] {
            let p = f.precision() as i32;
            // exact ties in the normal and subnormal ranges
            cases.push(1.0 + pow2(-p));
            cases.push(1.0 + 3.0 * pow2(-p));
            cases.push(pow2(f.emin() - p) * 3.0);
            cases.push(pow2(f.emin() - p));
            cases.push(-pow2(f.emin() - p) * 5.0);
        }
        let mut seed = 0x9E3779B97F4A7C15u64;
        for _ in 0..20000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let e = (seed % 80) as i32 - 60;
            let m = (seed >> 11) as f64 / (1u64 << 53) as f64;
            cases.push((1.0 + m) * pow2(e) * if seed & 1 == 0 { 1.0 } else { -1.0 });
        }
        for f in [Format::Float16, Format::Bfloat16, Format::Float32] {
            for &x in &cases {
                assert_eq!(f.round(x), reference_round(f, x), "{f} {x:e}");
                let x32 = x as f32;
                assert_eq!(
                    f.round_f32(x32) as f64,
                    f.round(x32 as f64),
                    "{f} f32 {x32:e}"
                );
            }
        }
    }
}
