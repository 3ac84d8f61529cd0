//! Radii: a decimal read exactly (its smallest `f64` upper bound is what certificates use) or a
//! file of per-instance radii.

use std::path::PathBuf;

use rug::Rational;

use crate::arith::sound::rational_to_f64_up;

/// The perturbation radius of a gate.
#[derive(Clone, Debug, PartialEq)]
pub enum Radius {
    /// One radius for every point, read exactly from a decimal string.
    Uniform {
        /// The decimal as written.
        text: String,
        /// The smallest `f64` at or above the exact value.
        up: f64,
    },
    /// Per-instance radii from a float64 `.npy` `[N]`.
    PerInstance(PathBuf),
}

impl Radius {
    /// `(epsilon as written, per-instance radii file)`: exactly one is set.
    pub fn fields(&self) -> (Option<String>, Option<String>) {
        match self {
            Radius::Uniform { text, .. } => (Some(text.clone()), None),
            Radius::PerInstance(p) => (None, Some(p.display().to_string())),
        }
    }

    /// Parse a decimal string (e.g. `"0.3"`, `"1e-6"`) exactly; it must be finite and `>= 0`.
    pub fn parse_decimal(text: &str) -> Result<Radius, String> {
        let q = parse_decimal_exact(text).ok_or_else(|| {
            format!("`{text}` is not a decimal number (write e.g. \"0.3\" or \"1e-6\")")
        })?;
        if q < 0 {
            return Err(format!("`{text}` is negative"));
        }
        Ok(Radius::Uniform {
            text: text.to_string(),
            up: rational_to_f64_up(&q),
        })
    }
}

/// The most digits a decimal may have, and the largest power of ten its exponent may scale it
/// by: far beyond any radius, small enough that parsing stays cheap.
const MAX_DECIMAL_DIGITS: usize = 10_000;

/// Parse `[-]digits[.digits][e[-+]digits]` into an exact rational (`None` beyond
/// `MAX_DECIMAL_DIGITS` digits or a scale of `10^±MAX_DECIMAL_DIGITS`).
pub fn parse_decimal_exact(s: &str) -> Option<Rational> {
    let s = s.trim();
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(k) => (&s[..k], s[k + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant.strip_prefix('+').unwrap_or(mant)),
    };
    let (int, frac) = match mant.split_once('.') {
        Some((a, b)) => (a, b),
        None => (mant, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    // in i64: an i32 exponent minus the fraction's length can leave the i32 range; and both
    // bounds are checked before any digit is converted (a file may hold millions of them)
    let scale = i64::from(exp) - i64::try_from(frac.len()).ok()?;
    if scale.unsigned_abs() > MAX_DECIMAL_DIGITS as u64
        || int.len() + frac.len() > MAX_DECIMAL_DIGITS
    {
        return None;
    }
    let digits = format!("{int}{frac}");
    let num =
        rug::Integer::from_str_radix(if digits.is_empty() { "0" } else { &digits }, 10).ok()?;
    let power = rug::Integer::from(rug::Integer::u_pow_u(
        10,
        u32::try_from(scale.unsigned_abs()).ok()?,
    ));
    let mut q = Rational::from(num);
    if scale >= 0 {
        q *= Rational::from(power);
    } else {
        q /= Rational::from(power);
    }
    Some(if neg { -q } else { q })
}

/// The radii of a robustness curve.
#[derive(Clone, Debug, PartialEq)]
pub enum CurveGrid {
    /// The given radii (decimal strings read exactly), in the order given.
    Given(Vec<Radius>),
    /// Ten radii from 0 to about twice the median point's certified radius of the mode
    /// certifying most, at two significant digits.
    Auto,
}

impl CurveGrid {
    /// `auto`, or comma-separated decimal radii (1 to 64).
    pub fn parse_list(text: &str) -> Result<CurveGrid, String> {
        if text.trim() == "auto" {
            return Ok(CurveGrid::Auto);
        }
        let radii: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        CurveGrid::given(&radii)
    }

    /// The radii `texts` (1 to 64 decimals).
    pub fn given(texts: &[&str]) -> Result<CurveGrid, String> {
        if texts.is_empty() || texts.len() > 64 {
            return Err(format!("give 1 to 64 radii (got {})", texts.len()));
        }
        let radii = texts
            .iter()
            .map(|t| Radius::parse_decimal(t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CurveGrid::Given(radii))
    }

    /// A policy's `curve` value: `true` (automatic grid), `false` (none) or a list of decimal
    /// strings.
    pub fn from_toml(v: &toml::Value) -> Result<Option<CurveGrid>, String> {
        match v {
            toml::Value::Boolean(b) => Ok(b.then_some(CurveGrid::Auto)),
            toml::Value::Array(items) => {
                let texts = items
                    .iter()
                    .map(|i| match i {
                        toml::Value::String(s) => Ok(s.as_str()),
                        other => Err(format!(
                            "write each radius as a decimal string (\"{other}\") so it is read exactly"
                        )),
                    })
                    .collect::<Result<Vec<&str>, String>>()?;
                CurveGrid::given(&texts).map(Some)
            }
            other => Err(format!(
                "expected true, false or a list of decimal strings, found {}",
                other.type_str()
            )),
        }
    }
}
