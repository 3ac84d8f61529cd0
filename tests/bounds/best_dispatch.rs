//! Where `best` takes its sources (src/bounds/certify/modes.rs), pinned on hand-made centres of
//! the exact-points cases: the local bounds are a source of `best` and of no other mode, with or
//! without the float64 reference; without the reference, a verdict the forward passes decided
//! holds only at the radius it was decided for; and an overflowing reference refuses the modes
//! built on it while `best` falls back on its other sources.

use crate::common::exact_points::{cases, points, PCase, Point};
use lipfp::bounds::certify::{
    Centre, Certifier, Decided, LocalMargins, Mode, PointResult, Refusal,
};

/// `mode` at `p` with radius `eps`: with the test's float64 reference when `reference`, the
/// forward passes' `decided` verdict, and local margins `local`.
fn run(
    c: &PCase,
    p: &Point,
    (mode, eps): (Mode, f64),
    (reference, decided, local): (bool, Option<Decided>, Option<LocalMargins<'_>>),
    x_norm: f64,
) -> PointResult {
    let hi = p.hi();
    let centre = Centre {
        logits: &p.logits,
        x_norm,
        hi: reference.then_some(hi),
        decided,
        local,
        cover: lipfp::bounds::ball::Cover::L2,
    };
    Certifier {
        fmt: &c.mb,
        hi: Some(&c.hb),
    }
    .certify(mode, &centre, eps)
}

/// A radius at which nothing but a forged source can certify.
const WIDE: f64 = 40.0;

/// Local margins at `eps` that certify every class pair (a large lower bound, small radii).
fn certifying(eps: f64, classes: usize, hidden: usize) -> (Vec<f64>, Vec<f64>, f64) {
    (vec![1e6; classes], vec![1.0; hidden], eps)
}

#[test]
fn local_bounds_are_a_source_of_best_and_of_no_other_mode() {
    let mut checked = 0;
    for c in cases() {
        let hidden = c.net.layers.len() - 1;
        for p in points(&c.net) {
            let (lower, radii, eps) = certifying(WIDE, c.net.classes(), hidden);
            let local = LocalMargins {
                eps,
                lower: &lower,
                radii: &radii,
            };
            let own = run(&c, &p, (Mode::Best, eps), (true, None, None), p.x_norm);
            if own.verdict.is_ok() && (c.label.contains("huge biases") || c.label.contains("dead"))
            {
                // the network is constant over the ball up to its biases: its own bounds
                // certify at any radius, so there is nothing for a forged source to change
                continue;
            }
            for reference in [true, false] {
                let best = run(&c, &p, (Mode::Best, eps), (reference, None, None), p.x_norm);
                assert!(best.verdict.is_err(), "{}: certified at {eps}", c.label);
                let best = run(
                    &c,
                    &p,
                    (Mode::Best, eps),
                    (reference, None, Some(local)),
                    p.x_norm,
                );
                assert_eq!(best.verdict, Ok(()), "{} reference {reference}", c.label);
            }
            for mode in [
                Mode::Standard,
                Mode::Hybrid,
                Mode::Measured,
                Mode::Float64Centre,
            ] {
                let r = run(&c, &p, (mode, eps), (true, None, Some(local)), p.x_norm);
                assert!(
                    r.verdict.is_err(),
                    "{}: {mode} took the local bounds",
                    c.label
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked}");
}

#[test]
fn a_decided_verdict_holds_only_at_its_own_radius() {
    for c in cases() {
        for p in points(&c.net) {
            let decided = Decided {
                eps: WIDE,
                verdict: Ok(()),
            };
            let at = |eps: f64| {
                run(
                    &c,
                    &p,
                    (Mode::Best, eps),
                    (false, Some(decided), None),
                    p.x_norm,
                )
                .verdict
            };
            assert_eq!(at(WIDE), Ok(()), "{}: the decided verdict", c.label);
            assert!(
                at(1.5 * WIDE).is_err(),
                "{}: decided at another radius",
                c.label
            );
        }
    }
}

#[test]
fn an_overflowing_reference_refuses_its_modes_and_best_falls_back() {
    for c in cases() {
        let p = &points(&c.net)[0];
        let huge = 1.7e308;
        let measured = run(&c, p, (Mode::Measured, 0.1), (true, None, None), huge);
        assert!(
            matches!(measured.verdict, Err(Refusal::ReferenceOverflow(_))),
            "{}: {:?}",
            c.label,
            measured.verdict
        );
        let best = run(&c, p, (Mode::Best, 0.1), (true, None, None), huge);
        assert!(
            matches!(best.verdict, Err(Refusal::Overflow(_))),
            "{}: {:?}",
            c.label,
            best.verdict
        );
    }
}
