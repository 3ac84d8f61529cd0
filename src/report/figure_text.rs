//! How a figure is written for people: percentages ([`fmt_pct`]) and conservatism ratios
//! ([`fmt_ratio`]), shared by the console and JUnit reporters.

/// A percentage for people: two decimals and `%`, or `missing` when there is none.
pub fn fmt_pct(x: Option<f64>, missing: &str) -> String {
    x.map_or_else(|| missing.to_string(), |v| format!("{v:.2}%"))
}

/// A conservatism ratio for people: three decimals, or scientific notation from a million on
/// (a tiny `L eps` makes the ratio huge but finite).
pub fn fmt_ratio(r: f64) -> String {
    if r.abs() >= 1e6 {
        format!("{r:.3e}")
    } else {
        format!("{r:.3}")
    }
}
