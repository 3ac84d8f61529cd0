//! Mode `complete` at a gate's points (issue 31, item 4) against exact answers: on the shape
//! family's networks with one input, the l_inf ball and the l2 ball around a point are the same
//! interval, over which each margin's exact minimum is found in rationals
//! ([`common::exact_margin`]). Every point mode `complete` verifies must have every exact margin
//! above `-delta`, every point it falsifies a counterexample inside the interval whose exact
//! margin is below `delta`, and every point whose exact minimum is farther than `delta` from
//! zero must be decided (`delta = 1e-4 (1 + s)`, `s` the largest pre-activation magnitude: the
//! rounding allowance of `tests/engine/complete.rs`). The l_inf gate searches by splitting the input,
//! the l2 gate by splitting ReLUs only (an l2 ball keeps its whole set).

use crate::common;

use crate::common::exact_margin::{q, with_inputs, Exact};
use crate::common::on_actions::{digits_policy, lipfp_in};
use crate::common::runtime::write_npy;
use crate::common::shape_family::{write_model, Shape};
use lipfp::arith::runtime::RuntimeChoice;
use lipfp::bounds::ball::{BallSpec, Norm};
use lipfp::bounds::certify::{Mode, Refusal};
use lipfp::engine::complete::points::decide_points;
use lipfp::engine::run::{self, CertifyOptions, ReferencePlan, SubjectSpec};
use lipfp::policy::{CompleteBudget, Decision, Radius};
use lipfp::progress::Progress;
use rug::Rational;

/// The radius, as written in a policy.
const EPS: &str = "0.25";

/// The family: every shape and six with three random hidden layers, with one input.
fn family() -> Vec<Shape> {
    with_inputs(40, (6, 700), 1)
}

/// The subject of mode `complete` at `radius` on `model` and its `inputs` (and `labels`) in
/// the set `ball`, in the model's own format, served on `runtime` (`None`: IEEE execution).
fn complete_subject(
    (model, inputs, labels): (
        std::path::PathBuf,
        std::path::PathBuf,
        Option<std::path::PathBuf>,
    ),
    radius: &Radius,
    (ball, runtime): (BallSpec, Option<RuntimeChoice>),
) -> lipfp::engine::run::Subject {
    let spec = SubjectSpec {
        model,
        format: None,
        accumulate: None,
        ftz: false,
        runtime,
        inputs,
        labels,
        gram_iterations: 12,
        reference: ReferencePlan::for_run(&[Mode::Complete], radius, None),
        shard: None,
        decision: Decision::Argmax,
        label_column: None,
        ball,
    };
    run::prepare(&spec, &Progress::silent()).expect("prepared")
}

/// Counts over the family.
#[derive(Debug, Default)]
struct Tally {
    verified: usize,
    falsified: usize,
    searched: usize,
}

/// Mode `complete` on `shape` at 13 points of `[-1.5, 1.5]` in `norm`, checked against the exact
/// minima.
fn check_shape(shape: &Shape, norm: Norm, tally: &mut Tally) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let model = write_model(shape, dir.path());
    let points: Vec<f32> = (0..13).map(|k| -1.5 + 0.25 * k as f32).collect();
    let inputs = dir.path().join("x.npy");
    write_npy(&inputs, &[points.len() as u64, 1], &points);
    let radius = Radius::parse_decimal(EPS).expect("a radius");
    let modes = [Mode::Complete];
    let ball = BallSpec { norm, range: None };
    let subject = complete_subject((model, inputs, None), &radius, (ball, None));
    let silent = Progress::silent();
    let options = CertifyOptions::default();
    let mut outcome =
        run::certify_with_options(&subject, &radius, &modes, &options, &silent).expect("certified");
    let budget = CompleteBudget {
        seconds: 60.0,
        subdomains: 20_000,
        ..CompleteBudget::default()
    };
    let d = decide_points(&subject, &radius, &mut outcome, budget, &silent).expect("decided");
    tally.searched += d.searched;
    let mode = outcome.mode(Mode::Complete).expect("computed");
    let exact = Exact::of(shape);
    let eps = q(0.25);
    let classes = *shape.widths.last().expect("classes");
    for (k, t) in points.iter().enumerate() {
        let Some(i) = subject.predictions[k] else {
            continue;
        };
        let t = q(f64::from(*t));
        let (a, b) = (t.clone() - &eps, t.clone() + &eps);
        let (mut min, mut scale) = (None::<Rational>, Rational::new());
        for j in (0..classes).filter(|&j| j != i) {
            let (m, s) = exact.min_pair_margin((i, j), (&a, &b), &[]);
            scale = scale.max(s);
            min = Some(min.map_or(m.clone(), |v| v.min(m)));
        }
        let Some(min) = min else { continue };
        let delta = q(1e-4) * (Rational::from(1) + scale);
        let what = format!(
            "{} {norm:?} point {k} (t = {}), exact minimum margin {}",
            shape.name(),
            t.to_f64(),
            min.to_f64()
        );
        match (mode.verdicts[k], mode.refusal_of[k]) {
            (true, _) => {
                assert!(min > -delta.clone(), "{what}: verified");
                tally.verified += 1;
            }
            (false, Some(Refusal::Falsified)) => {
                let w = (d.attack.witnesses.iter())
                    .find(|w| w.index == k)
                    .unwrap_or_else(|| panic!("{what}: falsified without a witness"));
                let x = q(w.input[0]);
                assert!(a <= x && x <= b, "{what}: the witness is outside the ball");
                let y = exact.pre(&[x], exact.layers.len() - 1);
                let m = (0..classes)
                    .filter(|&j| j != i)
                    .map(|j| Rational::from(&y[i] - &y[j]))
                    .min()
                    .expect("another class");
                assert!(
                    m < delta,
                    "{what}: the witness's exact margin is {}",
                    m.to_f64()
                );
                tally.falsified += 1;
            }
            (false, why) => assert!(
                -delta.clone() <= min && min <= delta,
                "{what}: left undecided ({why:?})"
            ),
        }
    }
}

/// Both searches (input splitting for the l_inf box, ReLU splitting for the l2 ball) return
/// the exact verdict at every point of every shape, within the rounding allowance.
#[test]
fn complete_decides_every_point_as_the_exact_network_does() {
    for norm in [Norm::Linf, Norm::L2] {
        let mut tally = Tally::default();
        for shape in family() {
            check_shape(&shape, norm, &mut tally);
        }
        eprintln!("{norm:?}: {tally:?}");
        // the search itself is under test: points left by best and the falsifier, both verdicts
        assert!(tally.searched >= 20, "{norm:?}: {tally:?}");
        assert!(
            tally.verified >= 100 && tally.falsified >= 50,
            "{norm:?}: {tally:?}"
        );
    }
}

/// Mode `complete` at l_inf `eps` in `[0, 1]` on `model` and the `rows` inputs of `inputs`
/// (labels in `labels`), served on `runtime`: the subject, the points branch and bound verified
/// and its counterexamples.
fn complete_run(
    (model, inputs, labels): (&std::path::Path, &std::path::Path, &std::path::Path),
    (rows, eps, runtime): (usize, f64, Option<RuntimeChoice>),
    budget: CompleteBudget,
) -> (
    lipfp::engine::run::Subject,
    Vec<usize>,
    Vec<lipfp::engine::attack::Witness>,
) {
    let radius = Radius::parse_decimal(&eps.to_string()).expect("a radius");
    let modes = [Mode::Complete];
    let ball = BallSpec {
        norm: Norm::Linf,
        range: Some(lipfp::bounds::ball::InputRange::new(0.0, 1.0).expect("a range")),
    };
    let files = (
        model.to_path_buf(),
        inputs.to_path_buf(),
        Some(labels.to_path_buf()),
    );
    let subject = complete_subject(files, &radius, (ball, runtime));
    let silent = Progress::silent();
    let options = CertifyOptions::default();
    let mut outcome =
        run::certify_with_options(&subject, &radius, &modes, &options, &silent).expect("certified");
    let before = outcome
        .mode(Mode::Complete)
        .expect("computed")
        .verdicts
        .clone();
    let d = decide_points(&subject, &radius, &mut outcome, budget, &silent).expect("decided");
    let after = &outcome.mode(Mode::Complete).expect("computed").verdicts;
    let searched: Vec<usize> = (0..rows).filter(|&i| after[i] && !before[i]).collect();
    (subject, searched, d.attack.witnesses)
}

/// Points of the l_inf box of radius `eps` in `[0, 1]` around each point of `searched` (the
/// rows of `x`), rounded to float32 inside the box: the iterates of 20 sign steps of length
/// `eps / 4` on the margin to the runner-up, and the box's corner farthest along the final
/// gradient.
fn attacked_points(
    subject: &lipfp::engine::run::Subject,
    (x, dim): (&[f64], usize),
    searched: &[usize],
    eps: f64,
) -> Vec<(usize, Vec<f64>)> {
    use lipfp::engine::attack::GradNet;
    use ndarray::Array2;
    let net = GradNet::new(&subject.net);
    let mut candidates = Vec::new();
    for &i in searched {
        let x0 = &x[i * dim..(i + 1) * dim];
        let c = subject.predictions[i].expect("finite");
        let (lo, hi): (Vec<f64>, Vec<f64>) = (x0.iter())
            .map(|v| ((v - eps).max(0.0), (v + eps).min(1.0)))
            .unzip();
        let inside = |v: f64, k: usize| {
            let f = v.clamp(lo[k], hi[k]) as f32;
            let f = if f64::from(f) < lo[k] { f.next_up() } else { f };
            f64::from(if f64::from(f) > hi[k] {
                f.next_down()
            } else {
                f
            })
        };
        let mut p: Vec<f64> = x0.to_vec();
        for _ in 0..20 {
            let a = Array2::from_shape_vec((1, dim), p.clone()).expect("a row");
            let (_, g) = net.margin_gradient(&a, &[c]);
            p = (p.iter().zip(g.row(0)).enumerate())
                .map(|(k, (v, gk))| inside(v - eps / 4.0 * gk.signum(), k))
                .collect();
            candidates.push((i, p.clone()));
        }
        let a = Array2::from_shape_vec((1, dim), p.clone()).expect("a row");
        let (_, g) = net.margin_gradient(&a, &[c]);
        let corner = (0..dim)
            .map(|k| inside(if g[[0, k]] > 0.0 { lo[k] } else { hi[k] }, k))
            .collect();
        candidates.push((i, corner));
    }
    candidates
}

/// Mode `complete` at l_inf `eps` in `[0, 1]` ([`complete_run`], IEEE execution): every point
/// branch and bound verified survives, under onnxruntime CPU, the [`attacked_points`] of its
/// box, and every counterexample changes onnxruntime's class. Returns the points branch and
/// bound verified and the counterexamples.
fn check_under_onnxruntime(
    files: (&std::path::Path, &std::path::Path, &std::path::Path),
    (x, rows, classes): (&[f64], usize, usize),
    eps: f64,
    budget: CompleteBudget,
) -> (usize, usize) {
    use crate::common::runtime::{argmax, ort_logits, python};
    let py = python();
    let model = files.0;
    let dim = x.len() / rows;
    let (subject, searched, w) = complete_run(files, (rows, eps, None), budget);
    // counterexamples change onnxruntime's class
    let inputs: Vec<f64> = w.iter().flat_map(|w| w.input.clone()).collect();
    let y = ort_logits(&py, model, w.len(), dim, &inputs, &[]);
    for (k, w) in w.iter().enumerate() {
        let class = argmax(&y[k * classes..(k + 1) * classes]);
        let before = subject.predictions[w.index].expect("finite");
        assert_ne!(
            class, before,
            "point {}: onnxruntime keeps the class",
            w.index
        );
    }
    // the verified points survive an attack under onnxruntime
    let candidates = attacked_points(&subject, (x, dim), &searched, eps);
    let inputs: Vec<f64> = candidates.iter().flat_map(|(_, p)| p.clone()).collect();
    let y = ort_logits(&py, model, candidates.len(), dim, &inputs, &[]);
    for (k, (i, _)) in candidates.iter().enumerate() {
        let c = subject.predictions[*i].expect("finite");
        assert_eq!(
            argmax(&y[k * classes..(k + 1) * classes]),
            c,
            "point {i}, verified: onnxruntime changes its class inside the box"
        );
    }
    eprintln!(
        "{}: {} points verified by branch and bound, {} candidates, {} counterexamples",
        model.display(),
        searched.len(),
        candidates.len(),
        w.len()
    );
    (searched.len(), w.len())
}

/// Mode `complete` for the digits example served on onnxruntime-cuda on an H100 (TF32 GEMMs),
/// l_inf 0.1: at every point branch and bound verified for that runtime, the
/// [`attacked_points`] of its box keep the class under every emulated TF32 execution
/// (`tests/conformance/emulate_bundle.py`: both operand roundings, bias first or in the
/// epilogue, split-K, the IEEE GEMM of converted operands; `common::emulated`).
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with numpy for the emulators (set LIPFP_PYTHON)"
)]
fn complete_verdicts_hold_under_emulated_tf32() {
    use crate::common::bundles::write_bundle;
    use crate::common::emulated::tf32_executions;
    use crate::common::runtime::{argmax, python, read_f64_npy, script};
    use lipfp::arith::execution::Gpu;
    use lipfp::arith::runtime::Runtime;
    let (model, x, rows) = common::runtime::example("digits");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/digits");
    let budget = CompleteBudget {
        seconds: 5.0,
        subdomains: 2_000,
        ..CompleteBudget::default()
    };
    let runtime = Some(RuntimeChoice {
        gpu: Some(Gpu::H100),
        ..RuntimeChoice::new(Runtime::OnnxruntimeCuda)
    });
    let files = (
        model.as_path(),
        &*root.join("x_test.npy"),
        &*root.join("y_test.npy"),
    );
    let eps = 0.1;
    let (subject, searched, _) = complete_run(files, (rows, eps, runtime), budget);
    assert!(
        searched.len() >= 20,
        "{} points verified by branch and bound",
        searched.len()
    );
    let dim = x.len() / rows;
    let candidates = attacked_points(&subject, (&x, dim), &searched, eps);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let flat: Vec<f64> = candidates.iter().flat_map(|(_, p)| p.clone()).collect();
    write_bundle(&dir.path().join("bundle"), &subject.net, &flat);
    let executions = tf32_executions(&[Gpu::H100], false);
    let spec = dir.path().join("executions.json");
    std::fs::write(
        &spec,
        serde_json::Value::Array(executions.clone()).to_string(),
    )
    .unwrap();
    let logits = dir.path().join("logits.npy");
    let status = std::process::Command::new(python())
        .arg(script("emulate_bundle.py"))
        .args([&dir.path().join("bundle"), &spec, &logits])
        .status()
        .expect("python runs");
    assert!(status.success(), "emulate_bundle.py failed");
    let y = read_f64_npy(&logits);
    let per = y.len() / executions.len();
    assert_eq!(per, candidates.len() * 10);
    for (e, run) in executions.iter().zip(y.chunks(per)) {
        for (k, (i, _)) in candidates.iter().enumerate() {
            let c = subject.predictions[*i].expect("finite");
            assert_eq!(
                argmax(&run[k * 10..(k + 1) * 10]),
                c,
                "point {i}, verified for onnxruntime-cuda: {} changes its class in the box",
                e["name"]
            );
        }
    }
    eprintln!(
        "{} points verified by branch and bound for TF32, {} candidates x {} emulated executions",
        searched.len(),
        candidates.len(),
        executions.len()
    );
}

/// [`check_under_onnxruntime`] on the digits example (64-32-32-10, float32) at l_inf 0.1.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn complete_verdicts_hold_under_onnxruntime() {
    let (model, x, rows) = common::runtime::example("digits");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/digits");
    let budget = CompleteBudget {
        seconds: 5.0,
        subdomains: 2_000,
        ..CompleteBudget::default()
    };
    let files = (
        model.as_path(),
        &*root.join("x_test.npy"),
        &*root.join("y_test.npy"),
    );
    let (verified, falsified) = check_under_onnxruntime(files, (&x, rows, 10), 0.1, budget);
    assert!(verified >= 50 && falsified >= 50, "{verified} {falsified}");
}

/// [`check_under_onnxruntime`] on VNN-COMP's naturally trained mnistfc 784-256x2-10 at l_inf
/// 0.03, its first 40 MNIST test points.
#[test]
#[cfg_attr(
    not(all(lipfp_shared, lipfp_onnxruntime)),
    ignore = "needs ../shared/benchmarks and a Python with onnxruntime (set LIPFP_PYTHON)"
)]
fn complete_verdicts_on_a_natural_mnist_network_hold_under_onnxruntime() {
    use crate::common::runtime::read_npy;
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/benchmarks");
    let model = shared.join("vnncomp2021/mnistfc/mnist-net_256x2.onnx");
    let (x, _) = read_npy::<f32>(&shared.join("mnist/x_test.npy"));
    let (y, _) = read_npy::<i64>(&shared.join("mnist/y_test.npy"));
    let rows = 40;
    let x: Vec<f32> = x[..rows * 784].to_vec();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (xs, ys) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
    write_npy(&xs, &[rows as u64, 784, 1], &x);
    write_npy(&ys, &[rows as u64], &y[..rows]);
    let x: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
    let budget = CompleteBudget {
        seconds: 10.0,
        subdomains: 2_000,
        ..CompleteBudget::default()
    };
    let (verified, _) = check_under_onnxruntime((&model, &xs, &ys), (&x, rows, 10), 0.03, budget);
    assert!(verified >= 5, "{verified}");
}

/// A gate in mode `complete` states its decisions in the JSON report, on the console, in JUnit
/// and in the step summary, and its figures add up: verified is the mode's certified count,
/// falsified the bracket's, and every correctly classified point is verified, falsified or
/// undecided.
#[test]
fn a_complete_gate_reports_its_decisions_everywhere() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    digits_policy(
        dir.path(),
        "epsilon = \"0.1\"\nnorm = \"linf\"\ninput_range = [0, 1]\nmode = \"complete\"\n\
         complete_subdomains = 300\nmin_vra_pct = 50.0",
    );
    let (code, stdout, stderr) = lipfp_in(
        dir.path(),
        &["check", "--json", "r.json", "--junit", "r.xml"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).expect("read"))
            .expect("JSON");
    let g = &json["gates"][0];
    let c = &g["complete"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {c}"));
    assert_eq!(n(&c["verified"]), n(&g["modes"]["complete"]["certified"]));
    assert_eq!(n(&c["falsified"]), n(&g["attack"]["falsified"]));
    let correct =
        (n(&g["n"]) as f64 * g["accuracy_pct"].as_f64().expect("accuracy") / 100.0).round() as u64;
    assert_eq!(
        n(&c["verified"]) + n(&c["falsified"]) + n(&c["undecided"]),
        correct,
        "{c}"
    );
    let b = &c["branch_and_bound"];
    assert!(n(&b["searched"]) > 0 && n(&b["verified"]) > 0, "{c}");
    assert_eq!(n(&c["budget"]["subdomains"]), 300);
    let line = format!(
        "complete: {} verified, {} falsified, {} undecided",
        c["verified"], c["falsified"], c["undecided"]
    );
    assert!(stdout.contains(&line), "{stdout}");
    let junit = std::fs::read_to_string(dir.path().join("r.xml")).expect("JUnit");
    assert!(junit.contains(&line), "{junit}");
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).expect("summary");
    assert!(summary.contains(&line), "{summary}");
}

/// The budget keys need mode `complete`, and mode `complete` needs one radius and no curve; the
/// errors name the key (and the flags, for `lipfp certify`).
#[test]
fn complete_keys_and_flags_are_validated() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let radii = dir.path().join("r.npy");
    write_npy(&radii, &[450], &[0.1f64; 450]);
    for (extra, expect) in [
        (
            "epsilon = \"0.1\"\ncomplete_budget_s = 5",
            "complete_budget_s is set",
        ),
        (
            "epsilon = \"0.1\"\nmode = \"best\"\ncomplete_subdomains = 9",
            "complete_subdomains is set",
        ),
        (
            "epsilon = \"0.1\"\nmode = \"complete\"\ncurve = true",
            "curve:",
        ),
        ("epsilons = \"r.npy\"\nmode = \"complete\"", "one radius"),
        (
            "epsilon = \"0.1\"\nmode = \"complete\"\ncomplete_subdomains = 0",
            "complete_subdomains: 0",
        ),
        (
            "epsilon = \"0.1\"\nmode = \"complete\"\ncomplete_budget_s = -1.0",
            "complete_budget_s: -1",
        ),
        (
            "epsilon = \"0.1\"\nmode = \"complete\"\ncomplete_total_s = \"1h\"",
            "complete_total_s",
        ),
    ] {
        digits_policy(dir.path(), extra);
        let (code, _, stderr) = lipfp_in(dir.path(), &["check"]);
        assert_eq!(code, Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(expect), "{extra}: {stderr}");
        assert!(stderr.contains("lipfp.toml"), "{extra}: {stderr}");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/digits");
    let (m, x) = (root.join("model.onnx"), root.join("x_test.npy"));
    let base = [
        "certify",
        "--model",
        m.to_str().unwrap(),
        "--inputs",
        x.to_str().unwrap(),
    ];
    for (flags, expect) in [
        (
            &["--epsilon", "0.1", "--complete-budget", "5"][..],
            "need --mode complete",
        ),
        (
            &["--epsilon", "0.1", "--mode", "complete", "--curve"],
            "--curve",
        ),
        (&["--epsilons", "r.npy", "--mode", "complete"], "one radius"),
        (
            &[
                "--epsilon",
                "0.1",
                "--mode",
                "complete",
                "--complete-budget",
                "0",
            ],
            "--complete-budget",
        ),
    ] {
        let (code, _, stderr) = lipfp_in(dir.path(), &[&base[..], flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(expect), "{flags:?}: {stderr}");
    }
}
