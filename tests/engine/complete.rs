//! Complete verification (issue 31) against exact answers: on generated networks small enough
//! to solve exactly in rationals, `lipfp verify`'s branch and bound must return the exact verdict.
//!
//! Each network has one real input `t` (a second family adds 16 inputs pinned to fixed values,
//! which sends the search down the ReLU-splitting path instead of the input-splitting one), so
//! its margin `g(t) = Y_0 - Y_1` is piecewise linear in `t` with breakpoints where a unit's
//! pre-activation crosses zero. Those are found layer by layer in exact rationals, and the
//! minimum `m` of `g` over `[a, b]` is the smallest value at a breakpoint or an end. The
//! property "unsafe if `Y_0 <= Y_1 + c`" then holds for `c = m - delta` and is violated for
//! `c = m + delta`, with `delta = 1e-4 (1 + s)` and `s` the largest magnitude of any
//! pre-activation over the box: the rounding allowance, above the float32 deployment's rounding
//! on networks this small (docs/soundness.md "Complete verification"). Every violated verdict's counterexample lies in the box and its exact-network
//! margin is below `c + delta`.
//!
//! Shapes: the shape family's corners and seeded shapes (no hidden layer, width 1, dead and
//! always-on layers, identity layers, huge output biases), with the input width set to 1.

use crate::common;

use std::path::Path;

use crate::common::exact_margin::{q, with_inputs, Exact};
use crate::common::shape_family::{write_model, Shape};
use lipfp::commands::verify::{self as verify_cmd, VerifyRequest};
use lipfp::engine::complete::{Recompute, RootBranching};
use lipfp::engine::verify::{Verdict, VerifyOptions};
use lipfp::progress::Progress;
use rug::Rational;

/// Inputs pinned to fixed values in the ReLU-splitting family.
const PINNED: usize = 16;

/// A decimal with 15 significant digits near `v` (within `1e-14 |v|`).
fn decimal(v: &Rational) -> String {
    format!("{:.15e}", v.to_f64())
}

/// The property "unsafe if `Y_0 - Y_1 <= c`" over `t` in `[a, b]` and the pinned inputs.
fn property(
    dir: &Path,
    (a, b): (f64, f64),
    pinned: &[f64],
    classes: usize,
    c: &str,
) -> std::path::PathBuf {
    let n = 1 + pinned.len();
    let mut s = String::new();
    for i in 0..n {
        s += &format!("(declare-const X_{i} Real)\n");
    }
    for j in 0..classes {
        s += &format!("(declare-const Y_{j} Real)\n");
    }
    s += &format!("(assert (>= X_0 {a:e}))\n(assert (<= X_0 {b:e}))\n");
    for (i, v) in pinned.iter().enumerate() {
        s += &format!(
            "(assert (>= X_{k} {v:e}))\n(assert (<= X_{k} {v:e}))\n",
            k = i + 1
        );
    }
    s += &format!("(assert (<= (- Y_0 Y_1) {c}))\n");
    let path = dir.join("p.vnnlib");
    std::fs::write(&path, s).expect("written");
    path
}

fn request() -> VerifyRequest {
    let options = VerifyOptions {
        complete: true,
        subdomains: 200_000,
        memory_bytes: 256 << 20,
        recompute: Recompute::Adaptive,
        root_branching: RootBranching::Staged,
        falsifier: true,
    };
    common::verify_request::request(120.0, options)
}

/// The family: every shape, and twelve with three random hidden layers of 8 to 19 units (where
/// the bounds alone rarely decide), with the input width set to `1 + pinned`.
fn family(pinned: usize) -> Vec<Shape> {
    with_inputs(56, (12, 900), 1 + pinned)
}

/// The values the `pinned` extra inputs are pinned to (exact in float32).
fn pinned_values(pinned: usize) -> Vec<f64> {
    (0..pinned)
        .map(|k| f64::from(0.25f32 * (k as f32 - 7.0)))
        .collect()
}

/// The widest shape of a family, written as a model, with its pinned values and its exact
/// margin's minimum `m` over `[-1.5, 2]` and scale `s`.
struct Widest {
    dir: tempfile::TempDir,
    shape: Shape,
    model: std::path::PathBuf,
    pins: Vec<f64>,
    m: Rational,
    scale: Rational,
}

impl Widest {
    fn of(pinned: usize) -> Widest {
        let shape = family(pinned).pop().expect("a wide shape");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let model = write_model(&shape, dir.path());
        let pins = pinned_values(pinned);
        let pins_q: Vec<Rational> = pins.iter().map(|v| q(*v)).collect();
        let (m, scale) = Exact::of(&shape).min_margin((&q(-1.5), &q(2.0)), &pins_q);
        Widest {
            dir,
            shape,
            model,
            pins,
            m,
            scale,
        }
    }

    /// The property `Y_0 - Y_1 <= c` over the box.
    fn property(&self, c: &Rational) -> std::path::PathBuf {
        property(self.dir.path(), (-1.5, 2.0), &self.pins, 3, &decimal(c))
    }
}

/// Whether a property's disjunct also holds a looser copy of its row, written first.
#[derive(Clone, Copy)]
enum Rows {
    One,
    LooserCopyFirst,
}

/// Adds `Y_0 - Y_1 <= c + 1` before the property's last assertion: a constraint the row
/// `Y_0 - Y_1 <= c` implies, so the unsafe region and the exact verdict stay the same while
/// the disjunct has two rows, the one that can exclude it second.
fn with_looser_copy_first(prop: &Path, c: &Rational) {
    let text = std::fs::read_to_string(prop).expect("read");
    let last = text.rfind("(assert").expect("an assertion");
    let copy = format!(
        "(assert (<= (- Y_0 Y_1) {}))\n",
        decimal(&(c.clone() + Rational::from(1)))
    );
    std::fs::write(prop, format!("{}{copy}{}", &text[..last], &text[last..])).expect("written");
}

fn check_family(pinned: usize, (recompute, falsifier, rows): (Recompute, bool, Rows)) {
    check_family_rooted(pinned, (recompute, falsifier, rows), RootBranching::Staged);
}

/// [`check_family`] with the search's roots branching on their units as `root` says.
fn check_family_rooted(
    pinned: usize,
    (recompute, falsifier, rows): (Recompute, bool, Rows),
    root: RootBranching,
) {
    let (a, b) = (-1.5f64, 2.0f64);
    let pins = pinned_values(pinned);
    let pins_q: Vec<Rational> = pins.iter().map(|v| q(*v)).collect();
    let (mut holds, mut violated, mut split, mut infeasible) = (0, 0, 0, 0);
    for shape in family(pinned) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let model = write_model(&shape, dir.path());
        let exact = Exact::of(&shape);
        let (m, scale) = exact.min_margin((&q(a), &q(b)), &pins_q);
        let delta = q(1e-4) * (Rational::from(1) + scale);
        let classes = *shape.widths.last().expect("classes");
        for (sign, want) in [(-1, "unsat"), (1, "sat")] {
            let cq = m.clone() + Rational::from(sign) * &delta;
            let c = decimal(&cq);
            let prop = property(dir.path(), (a, b), &pins, classes, &c);
            if let Rows::LooserCopyFirst = rows {
                with_looser_copy_first(&prop, &cq);
            }
            let mut req = request();
            req.options.recompute = recompute;
            req.options.root_branching = root;
            req.options.falsifier = falsifier;
            let r = verify_cmd::instance(&req, (&model, &prop), 120.0, &Progress::silent())
                .unwrap_or_else(|e| panic!("{}: {e}", shape.name()));
            let what = format!("{} c = {c} (exact minimum {})", shape.name(), m.to_f64());
            assert_eq!(
                r.outcome.verdict.word(),
                want,
                "{what}: {:?}",
                r.outcome.searches
            );
            let bounded: usize = r.outcome.searches.iter().map(|s| s.bounded).sum();
            split += usize::from(bounded > 1);
            infeasible += r
                .outcome
                .searches
                .iter()
                .map(|s| s.infeasible)
                .sum::<usize>();
            match &r.outcome.verdict {
                Verdict::Violated(cx) => {
                    let t = q(cx.input[0]);
                    assert!(q(a) <= t && t <= q(b), "{what}: outside the box");
                    assert_eq!(&cx.input[1..], &pins[..], "{what}: pinned inputs moved");
                    let xs: Vec<Rational> = cx.input.iter().map(|v| q(*v)).collect();
                    let y = exact.pre(&xs, exact.layers.len() - 1);
                    let g = Rational::from(&y[0] - &y[1]);
                    let cq = m.clone() + &delta;
                    assert!(
                        g <= cq.clone() + &delta,
                        "{what}: the exact margin {} is far above c",
                        g.to_f64()
                    );
                    violated += 1;
                }
                Verdict::Holds => holds += 1,
                _ => unreachable!(),
            }
        }
    }
    eprintln!("{holds} shapes: {split} verdicts needed splits, {infeasible} subdomains infeasible");
    assert_eq!(holds, violated);
    assert!(holds >= 70, "{holds} shapes");
    // the bounds alone must not have decided everything: the search itself is under test
    assert!(split >= 8, "{split} verdicts needed splits");
}

#[test]
fn input_splitting_returns_the_exact_verdict_on_every_shape() {
    check_family(0, (Recompute::Adaptive, true, Rows::One));
}

#[test]
fn relu_splitting_returns_the_exact_verdict_on_every_shape() {
    check_family(PINNED, (Recompute::Adaptive, true, Rows::One));
}

/// The same without the falsifier, whose counterexamples would otherwise decide every `sat`
/// case before the search runs: each counterexample comes from the search's own candidates,
/// so bounds that were too tight would close the subdomain holding it and answer `unsat`.
#[test]
fn the_search_alone_returns_the_exact_verdict_on_every_shape() {
    check_family(0, (Recompute::Adaptive, false, Rows::One));
    check_family(PINNED, (Recompute::Adaptive, false, Rows::One));
}

/// A disjunct of two rows, any one of which excludes it, whose looser row comes first: each
/// subdomain's search improves only the row ranked best (docs/soundness.md B6), and the search
/// alone still returns the exact verdict, splitting inputs and splitting ReLUs.
#[test]
fn a_disjunct_of_several_rows_keeps_the_exact_verdict() {
    check_family(0, (Recompute::Adaptive, false, Rows::LooserCopyFirst));
    check_family(PINNED, (Recompute::Adaptive, false, Rows::LooserCopyFirst));
}

/// The search alone with every subdomain's layers above its split computed again, and with
/// none (the parent's bounds kept, the splits clamped): the two paths the adaptive rule chooses
/// between (docs/soundness.md B10), each on its own.
#[test]
fn relu_splitting_returns_the_exact_verdict_whether_or_not_layers_are_computed_again() {
    check_family(PINNED, (Recompute::Always, false, Rows::One));
    check_family(PINNED, (Recompute::Never, false, Rows::One));
}

/// The search alone from a root that branches on its units from the start (docs/soundness.md
/// B12): by default a search branches at its root only after a tenth of its budget left the
/// property open, which these small networks rarely do.
#[test]
fn relu_splitting_returns_the_exact_verdict_from_a_branched_root() {
    let root = RootBranching::Always;
    check_family_rooted(PINNED, (Recompute::Adaptive, false, Rows::One), root);
}

/// Every deployment lipfp models (every format, accumulation, flush-to-zero and runtime preset
/// of `shape_family::executions`), on every sixth shape of both families (the ReLU-splitting
/// family's roots branching on their units):
/// * at `c = m + delta` the verdict is `sat` with a counterexample in the box whose exact
///   margin is below `c + delta`, and at `c = m - delta` it is `unsat`, where `delta` is the
///   deployment's rounding allowance (its format's or TF32's unit roundoff times 200, at least
///   `1e-4`, times `1 + s`): complete on every deployment;
/// * at `c = m`, where the exact network itself reaches the unsafe region (and every deployment
///   covers the exact network), the verdict is never `unsat`: no deployment's rounding charges
///   can turn a reachable region into a proof.
#[test]
fn every_deployment_keeps_the_exact_verdict() {
    use crate::common::shape_family::executions;
    use lipfp::arith::runtime::Runtime;
    let (a, b) = (-1.5f64, 2.0f64);
    let mut checked = 0;
    for pinned in [0, PINNED] {
        let pins: Vec<f64> = (0..pinned)
            .map(|k| f64::from(0.25f32 * (k as f32 - 7.0)))
            .collect();
        let pins_q: Vec<Rational> = pins.iter().map(|v| q(*v)).collect();
        for shape in family(pinned).into_iter().step_by(6) {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let model = write_model(&shape, dir.path());
            let exact = Exact::of(&shape);
            let (m, scale) = exact.min_margin((&q(a), &q(b)), &pins_q);
            let classes = *shape.widths.last().expect("classes");
            for exec in executions() {
                // TF32 operands (10 bits) and OpenVINO's bfloat16 inference precision (7 bits)
                let u = match exec.runtime.map(|r| r.runtime) {
                    Some(Runtime::OnnxruntimeCuda | Runtime::Tensorrt | Runtime::Tensorflow) => {
                        2f64.powi(-11)
                    }
                    Some(Runtime::OpenvinoCpu) => 2f64.powi(-8),
                    _ => exec.format.unit_roundoff(),
                };
                let delta = q((200.0 * u).max(1e-4)) * (Rational::from(1) + &scale);
                let mut req = request();
                req.format = Some(exec.format);
                req.accumulate = exec.accumulate;
                req.ftz = exec.ftz;
                req.runtime = exec.runtime;
                // a ReLU-splitting search's root branches on its units (B12) on every deployment
                req.options.root_branching = match pinned {
                    0 => RootBranching::Staged,
                    _ => RootBranching::Always,
                };
                let what = |c: &str| {
                    format!(
                        "{} on {}, c = {c} (exact {})",
                        shape.name(),
                        exec.name,
                        m.to_f64()
                    )
                };
                for (sign, want) in [(-1, Some("unsat")), (0, None), (1, Some("sat"))] {
                    let c = decimal(&(m.clone() + Rational::from(sign) * &delta));
                    let prop = property(dir.path(), (a, b), &pins, classes, &c);
                    // at c = m the region may be reached only at the exact network: no verdict
                    // is owed, so a small budget
                    req.options.subdomains = if sign == 0 { 2_000 } else { 200_000 };
                    let r = verify_cmd::instance(&req, (&model, &prop), 120.0, &Progress::silent())
                        .unwrap_or_else(|e| panic!("{}: {e}", what(&c)));
                    let word = r.outcome.verdict.word();
                    match want {
                        Some(w) => assert_eq!(word, w, "{}: {:?}", what(&c), r.outcome.searches),
                        None => assert_ne!(word, "unsat", "{}", what(&c)),
                    }
                    if let Verdict::Violated(cx) = &r.outcome.verdict {
                        let xs: Vec<Rational> = cx.input.iter().map(|v| q(*v)).collect();
                        assert!(
                            q(a) <= xs[0] && xs[0] <= q(b),
                            "{}: outside the box",
                            what(&c)
                        );
                        let y = exact.pre(&xs, exact.layers.len() - 1);
                        let g = Rational::from(&y[0] - &y[1]);
                        let bound = m.clone() + Rational::from(sign.max(0) + 1) * &delta;
                        assert!(
                            g <= bound,
                            "{}: exact margin {} at the counterexample",
                            what(&c),
                            g.to_f64()
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 12 * 20, "{checked} shape-deployment pairs");
}

/// For a budget of subdomains, the verdict and the search itself (subdomains bounded, the
/// deepest, the queue's peak) are the same with one thread and with two, on properties that
/// need splits on both paths, one stopped by the budget, one from a root that branches on its
/// units.
#[test]
fn the_search_does_not_depend_on_the_thread_count() {
    let mut compared = 0;
    let staged = RootBranching::Staged;
    for (pinned, budget, root) in [
        (0, 200_000, staged),
        (PINNED, 200_000, staged),
        (PINNED, 40, staged),
        (PINNED, 200_000, RootBranching::Always),
    ] {
        let w = Widest::of(pinned);
        let (shape, model) = (&w.shape, &w.model);
        let prop = w.property(&(w.m.clone() - q(1e-4) * (Rational::from(1) + &w.scale)));
        let mut req = request();
        req.options.subdomains = budget;
        req.options.root_branching = root;
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool");
            let r = pool.install(|| {
                verify_cmd::instance(&req, (model, &prop), 120.0, &Progress::silent())
                    .expect("decided")
            });
            let s: Vec<_> = (r.outcome.searches.iter())
                .map(|s| {
                    (
                        s.bounded,
                        s.depth,
                        s.peak_queue,
                        s.infeasible,
                        s.unknown.clone(),
                    )
                })
                .collect();
            (r.outcome.verdict.word(), s)
        };
        let one = run(1);
        assert!(
            one.1.iter().any(|s| s.0 > 1),
            "{}: no split needed",
            shape.name()
        );
        assert_eq!(one, run(2), "{}", shape.name());
        // both stages' subdomains count against the budget, checked after each batch of 16
        assert!(one.1.iter().all(|s| s.0 < budget + 16), "{}", shape.name());
        compared += 1;
    }
    assert_eq!(compared, 4);
}

/// The memory cap stops a search that must split with `unknown`, naming the cap (the queue and
/// the root's bounds count against it, docs/soundness.md B6), and never turns a property the
/// root's bounds decide into `unknown`, however small the cap.
#[test]
fn the_memory_cap_stops_a_search_but_not_a_decided_root() {
    let w = Widest::of(PINNED);
    let (shape, model, m, scale) = (&w.shape, &w.model, &w.m, &w.scale);
    let verdict = |margin: Rational, memory_bytes: usize| {
        let prop = w.property(&margin);
        let mut req = request();
        req.options.memory_bytes = memory_bytes;
        let r = verify_cmd::instance(&req, (model, &prop), 120.0, &Progress::silent())
            .expect("a verdict");
        let bounded: usize = r.outcome.searches.iter().map(|s| s.bounded).sum();
        let why: Vec<String> = (r.outcome.searches.iter())
            .filter_map(|s| s.unknown.clone())
            .collect();
        (r.outcome.verdict.word(), bounded, why)
    };
    let close = m.clone() - q(1e-4) * (Rational::from(1) + scale);
    let (word, bounded, _) = verdict(close.clone(), 256 << 20);
    assert_eq!((word, bounded > 1), ("unsat", true), "{}", shape.name());
    let (word, _, why) = verdict(close, 1);
    assert_eq!(word, "unknown", "{}", shape.name());
    assert!(why.iter().any(|w| w.contains("memory cap")), "{why:?}");
    // far below the minimum, the bounds alone exclude the region (at the search's root, or
    // before any search)
    let far = m.clone() - Rational::from(1000) * (Rational::from(1) + scale);
    let (word, bounded, _) = verdict(far, 1);
    assert_eq!((word, bounded <= 1), ("unsat", true), "{}", shape.name());
}

/// An execution that overflows is never proven safe: over `X_0` in `[4e36, 8e36]` the hidden
/// unit `100 X_0` is at least `4e38`, past float32's largest value, so the deployed execution
/// computes `inf` there and `Y_0 = -2e-38 h + 17` is `-inf`, inside the unsafe region `Y_0 <= 0`;
/// in real arithmetic `Y_0` lies in `[1, 9]`. The local bounds assume every rounding is
/// relative (no overflow), so they alone would exclude the region: the verdict must not be
/// `unsat`, with or without branch and bound (docs/soundness.md "Complete verification", B7).
#[test]
fn an_execution_that_overflows_is_never_proven_safe() {
    use crate::common::onnx_builder::{attr_int, ModelBuilder};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut b = ModelBuilder::new();
    b.input_f32("x", &[1]);
    b.init_f32("W0", &[1, 1], &[100.0]);
    b.init_f32("b0", &[1], &[0.0]);
    b.init_f32("W1", &[2, 1], &[-2e-38, 1e-30]);
    b.init_f32("b1", &[2], &[17.0, 0.0]);
    let gemm = |b: &mut ModelBuilder, n: &str, i: &[&str], o: &str| {
        b.node("Gemm", n, i, &[o], vec![attr_int("transB", 1)]);
    };
    gemm(&mut b, "/fc0/Gemm", &["x", "W0", "b0"], "z0");
    b.node("Relu", "/act0/Relu", &["z0"], &["h0"], vec![]);
    gemm(&mut b, "/fc1/Gemm", &["h0", "W1", "b1"], "logits");
    b.output_f32("logits", 2);
    let model = b.write(dir.path(), "overflow.onnx");
    let prop = dir.path().join("p.vnnlib");
    std::fs::write(
        &prop,
        "(declare-const X_0 Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n\
         (assert (>= X_0 4e36))\n(assert (<= X_0 8e36))\n(assert (<= Y_0 0.0))\n",
    )
    .expect("written");
    for complete in [false, true] {
        let mut req = request();
        req.options.complete = complete;
        req.options.subdomains = 200;
        let r =
            verify_cmd::instance(&req, (&model, &prop), 60.0, &Progress::silent()).expect("read");
        assert_ne!(
            r.outcome.verdict.word(),
            "unsat",
            "complete = {complete}: {:?}",
            r.outcome
        );
    }
}
