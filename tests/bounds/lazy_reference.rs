//! The float64 reference plan (issue 13, item 3): when `best` is the only mode reading the
//! reference, the float64 pass runs only where the standard certificate neither certifies nor
//! refutes, and every verdict and refusal reason is the one the full pass gives (the refutation
//! checked in exact rationals); without `best`, the pass skips the componentwise products and
//! the other modes' figures do not change.

use std::path::{Path, PathBuf};

use crate::common::runtime::{read_npy, write_npy};

use lipfp::arith::format::Format;
use lipfp::arith::sound::mul_up;
use lipfp::bounds::certify::modes::refuted;
use lipfp::bounds::certify::quantities::final_pair_bounds;
use lipfp::bounds::certify::{predicted_class, Mode, Refusal};
use lipfp::engine::run::{self, ReferencePlan, Shard, Subject, SubjectSpec, STREAM_ROWS};
use lipfp::policy::{CurveGrid, Radius};
use lipfp::progress::Progress;
use rug::Rational;

fn example(name: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
        .join(file)
}

fn shared_mnist() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/benchmarks/mnist")
}

/// `model` on `inputs` in `format` (with `accumulate`), the reference run as `plan` says.
fn subject(
    files: (PathBuf, PathBuf, PathBuf),
    format: (Format, Option<Format>),
    plan: ReferencePlan,
) -> Subject {
    shard_subject(files, format, plan, None)
}

/// [`subject`] on shard `shard` of the test set.
fn shard_subject(
    (model, inputs, labels): (PathBuf, PathBuf, PathBuf),
    (format, accumulate): (Format, Option<Format>),
    plan: ReferencePlan,
    shard: Option<Shard>,
) -> Subject {
    let spec = SubjectSpec {
        model,
        format: Some(format),
        accumulate,
        ftz: false,
        runtime: None,
        inputs,
        labels: Some(labels),
        gram_iterations: 12,
        reference: plan,
        shard,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    run::prepare(&spec, &Progress::silent()).unwrap()
}

fn files(dir: &str) -> (PathBuf, PathBuf, PathBuf) {
    (
        example(dir, "model.onnx"),
        example(dir, "x_test.npy"),
        example(dir, "y_test.npy"),
    )
}

/// How the lazy run's points split: reference run, certified without it, refuted without it.
#[derive(Debug, Default, PartialEq)]
struct Split {
    reference: usize,
    certified: usize,
    refuted: usize,
}

/// `best` at `radius` with the lazy plan equals `best` with the reference everywhere: the same
/// verdicts and refusal reasons at every point, bit-equal slacks wherever the reference ran (NaN
/// elsewhere), and a conservatism ratio only from the full pass.
fn lazy_equals_full(
    files: (PathBuf, PathBuf, PathBuf),
    format: (Format, Option<Format>),
    radius: &Radius,
) -> Split {
    lazy_equals_full_on(files, format, radius, None)
}

/// [`lazy_equals_full`] on shard `shard` of the test set.
fn lazy_equals_full_on(
    files: (PathBuf, PathBuf, PathBuf),
    format: (Format, Option<Format>),
    radius: &Radius,
    shard: Option<Shard>,
) -> Split {
    let lazy_plan = ReferencePlan::for_run(&[Mode::Best], radius, None);
    assert!(matches!(lazy_plan, ReferencePlan::Undecided(_)));
    let lazy = shard_subject(files.clone(), format, lazy_plan, shard);
    let full = shard_subject(
        files,
        format,
        ReferencePlan::Every { products: true },
        shard,
    );
    let l = run::certify(&lazy, radius, &[Mode::Best]).unwrap();
    let f = run::certify(&full, radius, &[Mode::Best]).unwrap();
    let (lb, fb) = (l.mode(Mode::Best).unwrap(), f.mode(Mode::Best).unwrap());
    assert_eq!(lb.verdicts, fb.verdicts, "verdicts at {radius:?}");
    assert_eq!(lb.refusal_of, fb.refusal_of, "refusals at {radius:?}");
    assert_eq!(lb.by_class, fb.by_class);
    let mut split = Split::default();
    for i in 0..lazy.n() {
        let (ls, fs) = (lb.slacks[i], fb.slacks[i]);
        if lazy.centre(i).hi.is_some() {
            split.reference += 1;
            assert!(
                ls.to_bits() == fs.to_bits(),
                "slack at point {i}: {ls} vs {fs}"
            );
        } else {
            assert!(ls.is_nan(), "point {i} has a slack without the reference");
            if lb.verdicts[i] {
                split.certified += 1;
            } else {
                split.refuted += 1;
            }
        }
    }
    if split.reference < lazy.n() {
        assert_eq!(lb.conservatism, None, "a ratio over part of the points");
    }
    assert_eq!(full.reference.as_ref().unwrap().points(), full.n());
    split
}

#[test]
fn lazy_best_gives_the_full_verdicts_on_the_examples() {
    let mut totals = Split::default();
    for (dir, format) in [
        ("digits", (Format::Float32, None)),
        ("digits", (Format::Float16, Some(Format::Float32))),
        ("breast-cancer", (Format::Float32, None)),
    ] {
        for eps in ["0.05", "0.2", "0.3", "0.6"] {
            let radius = Radius::parse_decimal(eps).unwrap();
            let s = lazy_equals_full(files(dir), format, &radius);
            eprintln!("{dir} {format:?} eps {eps}: {s:?}");
            totals.reference += s.reference;
            totals.certified += s.certified;
            totals.refuted += s.refuted;
        }
    }
    // every branch of the selection is exercised
    assert!(
        totals.reference > 0 && totals.certified > 0 && totals.refuted > 0,
        "{totals:?}"
    );
}

/// Writes float64 radii `[n]` to `path`.
fn write_radii(path: &Path, radii: &[f64]) {
    write_npy(path, &[radii.len() as u64], radii);
}

#[test]
fn lazy_best_gives_the_full_verdicts_with_per_instance_radii() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("radii.npy");
    let radii: Vec<f64> = (0..450)
        .map(|k| 0.02 + 0.9 * ((k * 37) % 101) as f64 / 100.0)
        .collect();
    write_radii(&path, &radii);
    let radius = Radius::PerInstance(path);
    let s = lazy_equals_full(files("digits"), (Format::Float32, None), &radius);
    eprintln!("digits per-instance radii: {s:?}");
    assert!(s.reference > 0 && s.certified > 0 && s.refuted > 0, "{s:?}");
}

/// A test set larger than two read blocks (the digits points repeated), sharded so that the
/// shard starts mid-file and spans a block boundary, with per-instance radii: the selection's
/// and the slots' offsets must line up with the radii and the points.
/// The rows a subject keeps in memory after its forward passes are the ones its file gives
/// again (over read-block boundaries of a shard), in the same blocks of a chosen stride.
fn kept_rows_are_the_files(files: &(PathBuf, PathBuf, PathBuf), shard: Shard) {
    let mut s = shard_subject(
        files.clone(),
        (Format::Float32, None),
        ReferencePlan::None,
        Some(shard),
    );
    assert!(s.rows.is_some(), "a small test set is kept");
    let picks: Vec<usize> = (0..s.n())
        .filter(|i| i % 997 == 3 || *i == s.n() - 1)
        .collect();
    let collect = |s: &Subject| {
        let mut seen = Vec::new();
        s.visit_rows_while(&picks, 700, |chosen, rows| {
            seen.push((chosen.to_vec(), rows.to_vec()));
            Ok(true)
        })
        .unwrap();
        seen
    };
    let from_memory = collect(&s);
    s.rows = None;
    let from_file = collect(&s);
    assert_eq!(from_memory.len(), from_file.len());
    assert!(from_memory == from_file, "kept rows differ from the file's");
}

#[test]
fn lazy_best_gives_the_full_verdicts_on_a_streamed_shard() {
    let dir = tempfile::tempdir().unwrap();
    let (x, x_shape) = read_npy::<f32>(&example("digits", "x_test.npy"));
    let (y, _) = read_npy::<i64>(&example("digits", "y_test.npy"));
    let total = 2 * STREAM_ROWS + 2000;
    let dim = x.len() / y.len();
    let xs: Vec<f32> = x.iter().copied().cycle().take(total * dim).collect();
    let ys: Vec<i64> = y.iter().copied().cycle().take(total).collect();
    let mut shape = x_shape.clone();
    shape[0] = total as u64;
    let files = (
        example("digits", "model.onnx"),
        dir.path().join("x.npy"),
        dir.path().join("y.npy"),
    );
    write_npy(&files.1, &shape, &xs);
    write_npy(&files.2, &[total as u64], &ys);
    let radii: Vec<f64> = (0..total)
        .map(|k| 0.02 + ((k * 37) % 101) as f64 / 100.0)
        .collect();
    let radii_path = dir.path().join("radii.npy");
    write_radii(&radii_path, &radii);
    let shard = Shard::parse("2/2").unwrap();
    assert!(
        shard.range(total).1 > STREAM_ROWS,
        "the shard spans two read blocks"
    );
    let radius = Radius::PerInstance(radii_path);
    kept_rows_are_the_files(&files, shard);
    let s = lazy_equals_full_on(files, (Format::Float32, None), &radius, Some(shard));
    eprintln!("digits x{total} shard 2/2, per-instance radii: {s:?}");
    assert!(s.reference > 0 && s.certified > 0 && s.refuted > 0, "{s:?}");
}

/// Wherever `refuted` holds, some competing class has, in exact rationals,
/// `m_hat_ij + E_ctr_j - mul_up(L_ij, eps) - g <= 0`: the bound every certificate's slack is under.
#[test]
fn refutation_is_sound_in_exact_rationals() {
    let s = subject(
        files("digits"),
        (Format::Float16, Some(Format::Float32)),
        ReferencePlan::None,
    );
    let fmt = s.bounds.as_ref().unwrap();
    let q = |v: f64| Rational::from_f64(v).unwrap();
    let mut checked = 0;
    for eps in [0.0, 0.1, 0.3, 0.45, 0.6, 1.0] {
        for k in 0..s.n() {
            let c = s.centre(k);
            let Some(i) = predicted_class(c.logits) else {
                continue;
            };
            let Ok((r, d)) = fmt.hidden_chain(c.x_norm) else {
                continue;
            };
            if !refuted(fmt, c.logits, i, eps, (d, r)) {
                continue;
            }
            let below = (0..fmt.classes).filter(|&j| j != i).any(|j| {
                let p = fmt.pair(i, j);
                let e = final_pair_bounds(p.alpha, d, p.kappa_abs, r, p.beta_const);
                let upper = q(c.logits[i]) - q(c.logits[j]) + q(e)
                    - q(mul_up(p.lip, eps))
                    - q(fmt.head_margin);
                upper <= 0
            });
            assert!(
                below,
                "point {k} refuted at eps {eps} without an exact witness"
            );
            checked += 1;
        }
    }
    eprintln!("refutations checked exactly: {checked}");
    assert!(checked > 0);
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "../shared/benchmarks not found: the benchmark data is not part of the repository"
)]
fn lazy_best_gives_the_full_verdicts_on_mnist() {
    let m = shared_mnist();
    let files = (
        m.join("model.onnx"),
        m.join("x_test.npy"),
        m.join("y_test.npy"),
    );
    let radius = Radius::parse_decimal("0.3").unwrap();
    let s = lazy_equals_full(files, (Format::Float32, None), &radius);
    eprintln!("mnist eps 0.3: {s:?}");
    assert_eq!(s.certified, 9550, "the points standard certifies");
    assert!(s.reference < 100, "{s:?}");
}

/// Without `best`, the reference pass skips the componentwise products: the other
/// pre-deployment modes give the same verdicts and slacks, and `best` on such a pass refuses
/// every point it would need them for instead of certifying without them.
#[test]
fn componentwise_products_are_measured_only_for_best() {
    let radius = Radius::parse_decimal("0.3").unwrap();
    let format = (Format::Float16, Some(Format::Float32));
    let modes = [Mode::Hybrid, Mode::Measured, Mode::Float64Centre];
    let plan = ReferencePlan::for_run(&modes, &radius, None);
    assert_eq!(plan, ReferencePlan::Every { products: false });
    let without = subject(files("digits"), format, plan);
    let with = subject(
        files("digits"),
        format,
        ReferencePlan::Every { products: true },
    );
    assert!(!without.reference.as_ref().unwrap().has_products());
    let a = run::certify(&without, &radius, &modes).unwrap();
    let b = run::certify(&with, &radius, &modes).unwrap();
    for m in modes {
        let (x, y) = (a.mode(m).unwrap(), b.mode(m).unwrap());
        assert_eq!(x.verdicts, y.verdicts, "{m}");
        assert_eq!(x.refusal_of, y.refusal_of, "{m}");
        let bits = |v: &[f64]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&x.slacks), bits(&y.slacks), "{m}");
    }
    let best = run::certify(&without, &radius, &[Mode::Best]).unwrap();
    let best = best.mode(Mode::Best).unwrap();
    let full = run::certify(&with, &radius, &[Mode::Best]).unwrap();
    let full = full.mode(Mode::Best).unwrap();
    for i in 0..without.n() {
        if best.verdicts[i] {
            assert!(
                full.verdicts[i],
                "point {i} certified without the products only"
            );
        } else if full.verdicts[i] {
            assert_eq!(best.refusal_of[i], Some(Refusal::NoReference), "point {i}");
        }
    }
    assert!(best.refusal_of.contains(&Some(Refusal::NoReference)));
}

#[test]
fn plans_combine_as_the_modes_need() {
    let r = Radius::parse_decimal("0.1").unwrap();
    let s = Radius::parse_decimal("0.2").unwrap();
    let best = |r: &Radius| ReferencePlan::for_run(&[Mode::Best], r, None);
    let hybrid = ReferencePlan::for_run(&[Mode::Standard, Mode::Hybrid], &r, None);
    assert_eq!(
        ReferencePlan::for_run(&[Mode::Standard], &r, Some(&CurveGrid::Auto)),
        ReferencePlan::None
    );
    assert_eq!(best(&r), ReferencePlan::Undecided(vec![r.clone()]));
    // the automatic grid: the pass plans the radius, the curve the rest
    assert_eq!(
        ReferencePlan::for_run(&[Mode::Best], &r, Some(&CurveGrid::Auto)),
        ReferencePlan::Undecided(vec![r.clone()])
    );
    // a given grid: undecided at the radius or at any grid radius (each once)
    let grid = CurveGrid::given(&["0.2", "0.1", "0.3"]).unwrap();
    let t = Radius::parse_decimal("0.3").unwrap();
    assert_eq!(
        ReferencePlan::for_run(&[Mode::Best], &r, Some(&grid)),
        ReferencePlan::Undecided(vec![r.clone(), s.clone(), t])
    );
    assert_eq!(hybrid, ReferencePlan::Every { products: false });
    assert_eq!(
        best(&r).union(best(&s)).union(best(&r)),
        ReferencePlan::Undecided(vec![r.clone(), s.clone()])
    );
    assert_eq!(
        best(&r).union(hybrid.clone()),
        ReferencePlan::Every { products: true }
    );
    assert_eq!(hybrid.clone().union(ReferencePlan::None), hybrid);
}

/// One pass planned for two radii (two gates on one target): the reference runs where either
/// radius needs it, and `best` at each radius gives the full pass's verdicts (re-deciding the
/// skipped points, since no single decision was kept).
#[test]
fn lazy_best_planned_for_two_radii_gives_the_full_verdicts_at_both() {
    let format = (Format::Float16, Some(Format::Float32));
    let (r1, r2) = (
        Radius::parse_decimal("0.2").unwrap(),
        Radius::parse_decimal("0.45").unwrap(),
    );
    let plan = ReferencePlan::for_run(&[Mode::Best], &r1, None).union(ReferencePlan::for_run(
        &[Mode::Best],
        &r2,
        None,
    ));
    let lazy = subject(files("digits"), format, plan);
    let full = subject(
        files("digits"),
        format,
        ReferencePlan::Every { products: true },
    );
    let run_points = lazy.reference.as_ref().unwrap().points();
    assert!(0 < run_points && run_points < lazy.n(), "{run_points}");
    assert!((0..lazy.n()).all(|i| lazy.centre(i).decided.is_none()));
    for r in [&r1, &r2] {
        let l = run::certify(&lazy, r, &[Mode::Best]).unwrap();
        let f = run::certify(&full, r, &[Mode::Best]).unwrap();
        let (l, f) = (l.mode(Mode::Best).unwrap(), f.mode(Mode::Best).unwrap());
        assert_eq!(l.verdicts, f.verdicts, "{r:?}");
        assert_eq!(l.refusal_of, f.refusal_of, "{r:?}");
    }
}

/// A curve over `best` on given radii runs the reference only where standard leaves a radius
/// undecided, and its counts at every grid radius equal those of the curve with the full pass;
/// its per-point radii are lower bounds of the full ones (standard's, where the reference did
/// not run).
#[test]
fn lazy_curve_counts_equal_the_full_curve() {
    use lipfp::engine::run::certify_curve;
    let grid = CurveGrid::given(&["0.05", "0.1", "0.2", "0.3", "0.45"]).unwrap();
    let r = Radius::parse_decimal("0.1").unwrap();
    for format in [
        (Format::Float32, None),
        (Format::Float16, Some(Format::Float32)),
    ] {
        let modes = [Mode::Standard, Mode::Best];
        let plan = ReferencePlan::for_run(&modes, &r, Some(&grid));
        let lazy = subject(files("digits"), format, plan);
        let full = subject(
            files("digits"),
            format,
            ReferencePlan::Every { products: true },
        );
        let ran = lazy.reference.as_ref().unwrap().points();
        assert!(ran < lazy.n(), "{format:?}: the reference ran everywhere");
        let (a, b) = (
            certify_curve(&lazy, &grid, &modes, &Default::default()).unwrap(),
            certify_curve(&full, &grid, &modes, &Default::default()).unwrap(),
        );
        for (ma, mb) in a.modes.iter().zip(&b.modes) {
            assert_eq!(ma.mode, mb.mode);
            assert_eq!(ma.points, mb.points, "{format:?} {}", ma.mode);
            for (ra, rb) in ma.radii.iter().zip(&mb.radii) {
                assert!(
                    ra.unwrap_or(0.0) <= rb.unwrap_or(0.0) * (1.0 + 1e-3),
                    "{format:?} {}",
                    ma.mode
                );
            }
        }
        eprintln!("{format:?}: reference at {ran} of {} points", lazy.n());
    }
}

/// A curve over `best` on the automatic grid no longer needs the reference everywhere: the pass
/// plans the certified radius, the curve chooses its grid and runs the reference at the points
/// one of its radii leaves undecided; its counts equal those of the full pass's curve on the
/// same radii.
#[test]
fn lazy_automatic_curve_counts_equal_the_full_curve_on_its_grid() {
    use lipfp::engine::run::certify_curve;
    let r = Radius::parse_decimal("0.1").unwrap();
    let modes = [Mode::Standard, Mode::Best];
    let plan = ReferencePlan::for_run(&modes, &r, Some(&CurveGrid::Auto));
    assert_eq!(plan, ReferencePlan::Undecided(vec![r.clone()]));
    let format = (Format::Float32, None);
    let lazy = subject(files("digits"), format, plan);
    let full = subject(
        files("digits"),
        format,
        ReferencePlan::Every { products: true },
    );
    let a = certify_curve(&lazy, &CurveGrid::Auto, &modes, &Default::default()).unwrap();
    let ran = lazy.reference.as_ref().unwrap().points() + a.reference_extra;
    assert!(
        a.reference_extra > 0,
        "the grid needed no further reference point"
    );
    assert!(
        ran < lazy.n(),
        "the reference ran at {ran} of {} points",
        lazy.n()
    );
    let texts: Vec<String> = a.modes[0]
        .points
        .iter()
        .map(|p| p.epsilon.clone())
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let grid = CurveGrid::given(&texts).unwrap();
    let b = certify_curve(&full, &grid, &modes, &Default::default()).unwrap();
    for (ma, mb) in a.modes.iter().zip(&b.modes) {
        assert_eq!(ma.mode, mb.mode);
        assert_eq!(ma.points, mb.points, "{}", ma.mode);
    }
    eprintln!(
        "automatic grid {texts:?}: reference at {ran} of {} points",
        lazy.n()
    );
}
