//! Inputs the fuzzers (`fuzz/`, docs/fuzzing.md) found to break a reader, minimised, each
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

/// A minimal `.npy` file: format 1.0, `header` padded as numpy pads it, then `data`.
fn npy_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    let total = (10 + h.len() + 1).div_ceil(64) * 64;
    h.push_str(&" ".repeat(total - 10 - h.len() - 1));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

/// `npy` (`tests/fuzz/npy/shape-product-overflow.npy`, as the fuzzer found it): a shape whose
/// product overflows `u64`. npyz multiplies the dimensions unchecked when it reads the header
/// (a panic with overflow checks, a wrapped element count without); the header's shape is now
/// checked before npyz sees it, by every reader.
#[test]
fn npy_shape_product_overflow_is_refused_before_npyz_reads_it() {
    let scratch = harness::Scratch::new();
    let found = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/npy/shape-product-overflow.npy"),
    )
    .unwrap();
    let e = harness::npy(&scratch, &found).unwrap_err();
    assert!(e.contains("more elements than can be counted"), "{e}");
    for (shape, descr) in [
        ("(4, 1, 4467440737095516157, 8)", "<f4"),
        ("(4294967296, 4294967296)", "<f8"),
        ("[18446744073709551615, 2, 0]", "<i8"),
    ] {
        let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let path = scratch.write("overflow.npy", &npy_file(&header, &[0; 64]));
        for e in [
            lipfp::engine::data::load_labels(&path, None, 4, 10).unwrap_err(),
            lipfp::engine::data::load_epsilons(&path, 4).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.starts_with(&path.display().to_string())
                    && e.contains("more elements than can be counted"),
                "{shape}: {e}"
            );
        }
    }
    // a large shape whose product fits is still refused for the data it lacks
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 2), }";
    let path = scratch.write("large.npy", &npy_file(header, &[0; 64]));
    let e = lipfp::engine::data::load_epsilons(&path, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("file holds only"), "{e}");
    // a repeated key: npyz keeps the last; both are checked
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (4294967296, 4294967296), }";
    let path = scratch.write("repeated.npy", &npy_file(header, &[0; 16]));
    let e = lipfp::engine::data::load_epsilons(&path, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more elements than can be counted"), "{e}");
}

/// `vnnlib`: an `or` whose only argument is commented out, `(assert (or\n; ...\n))`, parsed as
/// an unsafe region without disjuncts, which `verify` would have answered `unsat` for any model.
/// An empty `or` (and an empty `and`) is refused with its line.
#[test]
fn an_empty_or_is_refused() {
    let text =
        "; a\u{16}3-inpuX_2 0.5))\n(assert (or\n;   (and  Y_0) (<= Y_2 Y_0i (<= Y_0 Y_1))\n))\n";
    let e = harness::vnnlib(text.as_bytes()).unwrap_err();
    assert!(
        e.contains("line 2") && e.contains("`(or)` without arguments"),
        "{e}"
    );
}
