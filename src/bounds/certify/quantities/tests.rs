//! Unit tests of the format constants and layer error terms against exact rationals.

use super::*;
use rug::Rational;

fn exact(x: f64) -> Rational {
    Rational::from_f64(x).unwrap()
}

fn u(format: Format) -> Rational {
    Rational::from((1, 1u64)) >> format.precision()
}

fn gamma_exact(format: Format, n: u32) -> Rational {
    let base = Rational::from(1) + u(format);
    let mut p = Rational::from(1);
    for _ in 0..n {
        p *= &base;
    }
    p - 1
}

#[test]
fn gamma_is_tight_upper_bound() {
    for format in Format::ALL {
        for n in [1u32, 2, 10, 128, 784] {
            let g = gamma_n(format, n as u64);
            let e = gamma_exact(format, n);
            assert!(exact(g) >= e, "{format} n={n}");
            // tight: within a relative 2^-50 of the exact value
            let rel = (exact(g) - &e) / &e;
            assert!(rel < Rational::from((1, 1u64 << 50)), "{format} n={n}");
        }
    }
    // gamma_1 = u exactly
    assert_eq!(gamma_n(Format::Float32, 1), 2f64.powi(-24));
    // superlinear for n u >= 1 is still finite and an upper bound
    let g = gamma_n(Format::Bfloat16, 1024);
    assert!(g.is_finite() && exact(g) >= gamma_exact(Format::Bfloat16, 1024));
}

fn lambda(format: Format) -> Rational {
    Rational::from((1, 1u64)) >> (-format.emin()) as u32
}

fn a_mul(format: Format) -> Rational {
    lambda(format) * u(format)
}

fn q(x: &Float) -> Rational {
    x.to_rational().unwrap()
}

/// Asserts `got >= exact` and, when `tight`, that `got` is within a relative 2^-50.
fn upper(what: &str, got: Rational, exact: &Rational, tight: bool) {
    assert!(got >= *exact, "{what}: {got} < {exact}");
    if tight && *exact != 0 {
        let rel = (got - exact) / exact;
        assert!(rel < Rational::from((1, 1u64 << 50)), "{what} not tight");
    }
}

#[test]
fn accumulation_error_matches_exact_rationals() {
    for format in Format::ALL {
        for n in [1u32, 3, 128, 784] {
            let e = LayerError::accumulation(format, false, n as u64);
            let tight = format != Format::Float64;
            upper("rel_w", q(&e.rel_w), &gamma_exact(format, n + 1), true);
            upper("rel_b", q(&e.rel_b), &gamma_exact(format, n), true);
            let g = gamma_exact(format, n);
            let abs = (Rational::from(1) + &g) * n * a_mul(format);
            upper("abs", q(&e.abs), &abs, tight);
            upper("a_acc", exact(a_acc(format, false, n as u64)), &abs, false);
            let ftz = LayerError::accumulation(format, true, n as u64);
            let abs_ftz = (Rational::from(1) + &g) * (2 * n) * lambda(format);
            upper("abs ftz", q(&ftz.abs), &abs_ftz, true);
            let fwd = (Rational::from(1) + gamma_exact(format, n - 1)) * n * a_mul(format);
            upper(
                "a_dot_fwd",
                exact(a_dot_fwd(format, false, n as u64)),
                &fwd,
                false,
            );
            upper(
                "a_dot_fwd ftz",
                exact(a_dot_fwd(format, true, n as u64)),
                &abs_ftz,
                false,
            );
        }
    }
}

#[test]
fn one_more_rounding_composes_exactly() {
    // float16 storage after float32 accumulation of n = 784 products and the bias
    let n = 784u32;
    let e = LayerError::accumulation(Format::Float32, false, n as u64)
        .then_rounded(Format::Float16, false);
    let us = u(Format::Float16);
    let one = Rational::from(1);
    let one_us = Rational::from(&one + &us);
    let rel_w = &one_us * (&one + gamma_exact(Format::Float32, n + 1)) - &one;
    let rel_b = &one_us * (&one + gamma_exact(Format::Float32, n)) - &one;
    let abs = &one_us * ((&one + gamma_exact(Format::Float32, n)) * n * a_mul(Format::Float32))
        + a_mul(Format::Float16);
    upper("rel_w", q(&e.rel_w), &rel_w, true);
    upper("rel_b", q(&e.rel_b), &rel_b, true);
    upper("abs", q(&e.abs), &abs, true);
    // under flush-to-zero the rounding's absolute term is float16's lambda
    let f = LayerError::accumulation(Format::Float32, true, n as u64)
        .then_rounded(Format::Float16, true);
    let abs_ftz = &one_us
        * ((&one + gamma_exact(Format::Float32, n)) * (2 * n) * lambda(Format::Float32))
        + lambda(Format::Float16);
    upper("abs ftz", q(&f.abs), &abs_ftz, true);
    // the componentwise maximum keeps each larger term
    let narrow = LayerError::accumulation(Format::Float16, false, n as u64);
    let both = narrow.clone().max(e.clone());
    assert_eq!(both.rel_w, narrow.rel_w.clone().max(&e.rel_w));
    assert_eq!(both.abs, narrow.abs.clone().max(&e.abs));
}

#[test]
fn overflow_checks_follow_every_rounding() {
    let acc = LayerError::accumulation(Format::Float32, false, 10);
    let checks = [
        accumulator_check(Format::Float32, false, 10),
        step_check(&acc, Format::Float16),
    ];
    assert_eq!(checks[0].f_max, Format::Float32.f_max());
    assert_eq!(checks[1].f_max, 65504.0);
    let one = Rational::from(1);
    upper(
        "scale before storage rounding",
        exact(checks[1].scale_w),
        &(&one + gamma_exact(Format::Float32, 11)),
        true,
    );
    upper(
        "accumulator scale",
        exact(checks[0].scale_b),
        &(&one + gamma_exact(Format::Float32, 10)),
        true,
    );
}

#[test]
fn steps_pin_exact_values() {
    // r = 2 * 3 + 0.5 exactly representable: the upward step is at most one ulp above.
    let r = radius_step(2.0, 3.0, 0.5);
    assert!(r >= 6.5 && r <= 6.5f64.next_up().next_up());
    let d = deviation_step(1.5, 0.25, 0.125, 4.0, 0.0625);
    let e = Rational::from((3, 2)) * Rational::from((1, 4))
        + Rational::from((1, 8)) * 4
        + Rational::from((1, 16));
    assert!(exact(d) >= e && exact(d) - &e < Rational::from((1, 1u64 << 48)));
    let f = final_pair_bounds(0.1, 0.2, 0.3, 0.4, 0.5);
    let e = exact(0.1) * exact(0.2) + exact(0.3) * exact(0.4) + exact(0.5);
    assert!(exact(f) >= e && exact(f) - e < Rational::from((1, 1u64 << 48)));
}

#[test]
fn a_separate_bias_add_after_the_storage_rounding_composes_exactly() {
    // float32 accumulation of n products, rounded to float16, then the bias added in float16
    let n = 100u32;
    let e = LayerError::products(Format::Float32, false, n as u64)
        .then_rounded(Format::Float16, false)
        .then_bias_added(Format::Float16, false);
    let one = Rational::from(1);
    let one_us = Rational::from(&one + &u(Format::Float16));
    let rel_w = Rational::from(&one_us * &one_us) * (&one + gamma_exact(Format::Float32, n)) - &one;
    upper("rel_w", q(&e.rel_w), &rel_w, true);
    upper("rel_b", q(&e.rel_b), &u(Format::Float16), true);
    let abs = &one_us
        * (&one_us * ((&one + gamma_exact(Format::Float32, n)) * n * a_mul(Format::Float32))
            + a_mul(Format::Float16));
    upper("abs", q(&e.abs), &abs, true);
    // under flush-to-zero the addition may flush: + lambda of float16
    let f = LayerError::products(Format::Float32, true, n as u64)
        .then_rounded(Format::Float16, true)
        .then_bias_added(Format::Float16, true);
    let abs_ftz = &one_us
        * (&one_us
            * ((&one + gamma_exact(Format::Float32, n)) * (2 * n) * lambda(Format::Float32))
            + lambda(Format::Float16))
        + lambda(Format::Float16);
    upper("abs ftz", q(&f.abs), &abs_ftz, true);
}

#[test]
fn overflow_check_is_strict_and_nan_safe() {
    let check = OverflowCheck {
        scale_w: 1.0,
        scale_b: 1.0,
        abs: 0.0,
        f_max: Format::Float16.f_max(),
    };
    let c = OverflowConstants {
        row_l2_max: 1.0,
        row_inf_max: 1.0,
        bias_inf: 0.0,
        product_f_max: check.f_max,
        checks: vec![check],
        input_f_max: f64::INFINITY,
    };
    assert!(overflow_free(&c, 100.0, 0.0));
    assert!(!overflow_free(&c, check.f_max, 0.0));
    assert!(!overflow_free(&c, f64::NAN, 0.0));
    // S + ||b||_inf reaching F_max fails
    let biased = OverflowConstants {
        bias_inf: 65000.0,
        ..c.clone()
    };
    assert!(!overflow_free(&biased, 504.0, 0.0));
    assert!(overflow_free(&biased, 503.0, 0.0));
    // the bias is scaled like the products: it sits inside the accumulation
    let scaled = OverflowConstants {
        checks: vec![OverflowCheck {
            scale_b: 1.01,
            ..check
        }],
        ..biased.clone()
    };
    assert!(!overflow_free(&scaled, 3.0, 0.0));
    // the product bound M alone can fail
    let m_only = OverflowConstants {
        row_l2_max: 0.0,
        row_inf_max: 1e6,
        ..c.clone()
    };
    assert!(!overflow_free(&m_only, 1.0, 0.0));
    // any failing check refuses
    let two = OverflowConstants {
        checks: vec![
            check,
            OverflowCheck {
                f_max: 10.0,
                ..check
            },
        ],
        ..c.clone()
    };
    assert!(!overflow_free(&two, 20.0, 0.0));
    assert!(overflow_free(&two, 9.0, 0.0));
    // a converted input that may round past the operand format's range refuses
    let input = OverflowConstants {
        input_f_max: 8.0,
        ..c
    };
    assert!(overflow_free(&input, 7.0, 0.5));
    assert!(!overflow_free(&input, 7.5, 0.5));
}

#[test]
fn overflow_bounds_equal_to_f_max_refuse() {
    // the theorem's conditions are strict: a left-hand side that rounds to exactly F_max
    // refuses (with D = 0 the radius is r exactly; each `mul_up` by 1 is one step up)
    let f_max = Format::Float16.f_max();
    let check = OverflowCheck {
        scale_w: 1.0,
        scale_b: 0.0,
        abs: 0.0,
        f_max,
    };
    let c = OverflowConstants {
        row_l2_max: 1.0,
        row_inf_max: 1.0,
        bias_inf: 0.0,
        product_f_max: f64::INFINITY,
        checks: vec![check],
        input_f_max: f64::INFINITY,
    };
    // S scale_w = next_up(next_up(r)) = F_max
    let r = f_max.next_down().next_down();
    assert!(!overflow_free(&c, r, 0.0));
    assert!(overflow_free(&c, r.next_down(), 0.0));
    // M = next_up(r) = F_max
    let m = OverflowConstants {
        checks: vec![],
        product_f_max: f_max,
        ..c.clone()
    };
    assert!(!overflow_free(&m, f_max.next_down(), 0.0));
    assert!(overflow_free(&m, r, 0.0));
    // r + D = the operand format's largest value
    let input = OverflowConstants {
        checks: vec![],
        input_f_max: 8.0,
        ..c
    };
    assert!(!overflow_free(&input, 8.0, 0.0));
    assert!(overflow_free(&input, 8f64.next_down(), 0.0));
}

#[test]
fn the_maximum_of_two_layer_errors_keeps_the_bias_if_either_has_it() {
    let with = LayerError::accumulation(Format::Float32, false, 4);
    let without = LayerError {
        bias_included: false,
        ..with.clone()
    };
    assert!(with.clone().max(without.clone()).bias_included);
    assert!(without.clone().max(with).bias_included);
    assert!(!without.clone().max(without).bias_included);
}
