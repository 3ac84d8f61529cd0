//! Inputs the fuzzers (`fuzz/`, README "Fuzzing") found to break a reader, minimised, each
//! replayed through the fuzz target's entry point (`fuzz/src/lib.rs`) and checked against the
//! library directly. Inputs too large to read inline live in `tests/fuzz/<target>/`.
//!
//! Integer overflows panic only where overflow checks are on (debug builds, `cargo test`
//! without `--release`, and the fuzzers); in release builds the same inputs must be refused
//! the same way, which these tests check too.

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::Path;

use lipfp::policy::{parse_decimal_exact, Policy, Radius};

/// `policy`: an epsilon whose exponent is near `i32::MIN` and that has a fractional part made
/// `exponent - fraction digits` overflow `i32` (a panic with overflow checks). Such a radius is
/// refused as out of range, like any scale beyond `10^±10000`.
#[test]
fn epsilon_exponent_overflow_is_refused() {
    let text = "[model]\npath = \"m.onnx\"\n[data]\ninputs = \"x.npy\"\n\n\
                [[gate]]\nname = \"g\"\nepsilon = \"1.5e-2147483648\"\n";
    let e = harness::policy(text.as_bytes()).unwrap_err();
    assert!(
        e.contains("epsilon") && e.contains("1.5e-2147483648"),
        "{e}"
    );
    let e = Policy::parse(Path::new("p.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("p.toml: [[gate]] #1"), "{e}");
    for s in [
        "1.5e-2147483648",
        "0.0001e-2147483645",
        "1e2147483647",
        "12e2147483647",
        "1e-10001",
        "1e10001",
    ] {
        assert_eq!(parse_decimal_exact(s), None, "{s}");
        assert!(Radius::parse_decimal(s).is_err(), "{s}");
    }
    // the bounds themselves are accepted
    assert!(parse_decimal_exact("1e10000").is_some());
    assert!(parse_decimal_exact("1e-10000").is_some());
    assert!(parse_decimal_exact(&format!("0.{}1", "0".repeat(9_998))).is_some());
}

/// `policy`: a decimal of a million digits is refused before any digit is converted (the
/// exponent bound was checked only after converting them; certificate files, read up to 1 GiB,
/// hold epsilons too).
#[test]
fn decimals_with_too_many_digits_are_refused_before_conversion() {
    let many = "1".repeat(1_000_000);
    let start = std::time::Instant::now();
    assert_eq!(parse_decimal_exact(&many), None);
    assert_eq!(parse_decimal_exact(&format!("0.{many}")), None);
    assert!(start.elapsed().as_secs_f64() < 0.5, "{:?}", start.elapsed());
    assert!(parse_decimal_exact(&"1".repeat(10_000)).is_some());
}
