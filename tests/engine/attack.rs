//! The falsifier (issue 13, item 2): every falsified point is checked here, independently of the
//! attack's code, to be classified differently by the deployed forward pass and to lie in the
//! ball (exact rational arithmetic); certified points are never attacked, and even when they
//! are forced into the search none is falsified; results repeat across runs and thread counts;
//! the JSON, console, JUnit and step summary carry the bracket; the policy key is validated.

use std::path::{Path, PathBuf};

use crate::common::on_actions::{digits_policy as policy, lipfp_in as lipfp};
use crate::common::runtime::write_npy;

use lipfp::bounds::certify::{predicted_class, Mode};
use lipfp::engine::attack::{self, AttackOutcome};
use lipfp::engine::data;
use lipfp::engine::exec::{Executor, Hidden};
use lipfp::engine::run::{self, CertifyOutcome, ReferencePlan, Subject, SubjectSpec};
use lipfp::policy::{parse_decimal_exact, Radius};
use lipfp::progress::Progress;
use ndarray::ArrayView2;
use rug::Rational;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn digits(file: &str) -> PathBuf {
    root().join("examples/digits").join(file)
}

fn mnist(file: &str) -> PathBuf {
    root().join("../shared/benchmarks/mnist").join(file)
}

fn prepare(model: &Path, x: &Path, y: &Path) -> Subject {
    let spec = SubjectSpec {
        model: model.to_path_buf(),
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: x.to_path_buf(),
        labels: Some(y.to_path_buf()),
        gram_iterations: 12,
        reference: ReferencePlan::None,
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    run::prepare(&spec, &Progress::silent()).unwrap()
}

fn radius() -> Radius {
    Radius::parse_decimal("0.3").unwrap()
}

fn certify_and_attack(subject: &Subject) -> (CertifyOutcome, AttackOutcome) {
    let outcome = run::certify(subject, &radius(), &[Mode::Standard]).unwrap();
    let a = attack::attack(
        subject,
        &radius(),
        Mode::Standard,
        &outcome,
        &Progress::silent(),
    )
    .unwrap();
    (outcome, a)
}

/// `||x - x0||_2^2 <= 0.3^2` in rationals, written here without the attack's helpers.
fn exactly_within(x: &[f64], x0: &[f64]) -> bool {
    let mut sum = Rational::new();
    for (a, b) in x.iter().zip(x0) {
        let d = Rational::from_f64(*a).unwrap() - Rational::from_f64(*b).unwrap();
        sum += Rational::from(&d * &d);
    }
    let eps = parse_decimal_exact("0.3").unwrap();
    sum <= Rational::from(&eps * &eps)
}

/// Every witness: a value of the format, in the ball around the centre read afresh from the
/// file, classified differently from the centre by the deployed forward pass, and on a point
/// the standard mode did not certify.
fn check_witnesses(subject: &Subject, outcome: &CertifyOutcome, a: &AttackOutcome, x: &Path) {
    let inputs = data::load_inputs(x, &subject.net, subject.net.format).unwrap();
    let exec = Executor::new(&subject.net, &subject.execution);
    let verdicts = &outcome.mode(Mode::Standard).unwrap().verdicts;
    for w in &a.witnesses {
        let i = w.index;
        assert!(!verdicts[i], "point {i} is certified yet falsified");
        assert!(
            a.attacked.contains(&i),
            "point {i} falsified but not attacked"
        );
        assert!(w.input.iter().all(|v| subject.net.format.round(*v) == *v));
        assert!(
            exactly_within(&w.input, inputs.row(i)),
            "point {i} outside the ball"
        );
        let view = ArrayView2::from_shape((1, w.input.len()), &w.input).unwrap();
        let logits: Vec<f64> = exec
            .forward_block(view, Hidden::None)
            .0
            .into_iter()
            .collect();
        let k = subject.net.classes();
        let centre = predicted_class(&subject.logits[i * k..(i + 1) * k]);
        let now = predicted_class(&logits);
        assert!(
            now.is_some() && now != centre,
            "point {i}: {now:?} vs {centre:?}"
        );
        assert_eq!(now, Some(w.class));
        assert_eq!(centre, subject.labels.as_ref().map(|y| y[i]));
    }
}

#[test]
fn digits_witnesses_are_misclassified_in_the_ball_and_uncertified() {
    let subject = prepare(
        &digits("model.onnx"),
        &digits("x_test.npy"),
        &digits("y_test.npy"),
    );
    let (outcome, a) = certify_and_attack(&subject);
    assert!(!a.witnesses.is_empty(), "nothing falsified on digits");
    let verdicts = &outcome.mode(Mode::Standard).unwrap().verdicts;
    assert!(
        a.attacked.iter().all(|&i| !verdicts[i]),
        "a certified point was attacked"
    );
    check_witnesses(&subject, &outcome, &a, &digits("x_test.npy"));
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "needs ../shared/benchmarks/mnist (the published benchmark)"
)]
fn mnist_witnesses_are_misclassified_in_the_ball_and_uncertified() {
    let subject = prepare(
        &mnist("model.onnx"),
        &mnist("x_test.npy"),
        &mnist("y_test.npy"),
    );
    let (outcome, a) = certify_and_attack(&subject);
    assert!(!a.witnesses.is_empty(), "nothing falsified on MNIST");
    check_witnesses(&subject, &outcome, &a, &mnist("x_test.npy"));
}

/// Force the certified points among the first `limit` into the search (their verdicts cleared):
/// the certificate is sound, so none of them may be falsified.
fn certified_points_resist(subject: &Subject, limit: usize) {
    let outcome = run::certify(subject, &radius(), &[Mode::Standard]).unwrap();
    let truth = outcome.mode(Mode::Standard).unwrap().verdicts.clone();
    let mut forced = outcome.clone();
    let m = forced
        .modes
        .iter_mut()
        .find(|m| m.mode == Mode::Standard)
        .unwrap();
    for v in m.verdicts.iter_mut().take(limit) {
        *v = false;
    }
    let a = attack::attack(
        subject,
        &radius(),
        Mode::Standard,
        &forced,
        &Progress::silent(),
    )
    .unwrap();
    let certified_attacked = a.attacked.iter().filter(|&&i| truth[i]).count();
    assert!(certified_attacked > 0, "no certified point was searched");
    for w in &a.witnesses {
        assert!(!truth[w.index], "certified point {} falsified", w.index);
    }
}

#[test]
fn certified_points_are_never_falsified_on_digits() {
    let subject = prepare(
        &digits("model.onnx"),
        &digits("x_test.npy"),
        &digits("y_test.npy"),
    );
    certified_points_resist(&subject, usize::MAX);
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "needs ../shared/benchmarks/mnist (the published benchmark)"
)]
fn certified_points_are_never_falsified_on_mnist() {
    let subject = prepare(
        &mnist("model.onnx"),
        &mnist("x_test.npy"),
        &mnist("y_test.npy"),
    );
    certified_points_resist(&subject, 400);
}

#[test]
fn the_attack_repeats_across_runs_and_thread_counts() {
    let subject = prepare(
        &digits("model.onnx"),
        &digits("x_test.npy"),
        &digits("y_test.npy"),
    );
    let key = |a: &AttackOutcome| -> Vec<(usize, usize, Vec<u64>)> {
        a.witnesses
            .iter()
            .map(|w| {
                (
                    w.index,
                    w.class,
                    w.input.iter().map(|v| v.to_bits()).collect(),
                )
            })
            .collect()
    };
    let run_with = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| key(&certify_and_attack(&subject).1))
    };
    let one = run_with(1);
    assert!(!one.is_empty());
    assert_eq!(one, run_with(1), "two runs differ");
    assert_eq!(one, run_with(3), "1 and 3 threads differ");
}

#[test]
fn every_report_states_the_bracket() {
    let dir = tempfile::tempdir().unwrap();
    let (m, x, y) = (
        digits("model.onnx"),
        digits("x_test.npy"),
        digits("y_test.npy"),
    );
    let args = [
        "certify",
        "--model",
        m.to_str().unwrap(),
        "--inputs",
        x.to_str().unwrap(),
        "--labels",
        y.to_str().unwrap(),
        "--epsilon",
        "0.3",
        "--mode",
        "standard",
        "--attack",
        "--json",
        "r.json",
        "--junit",
        "r.xml",
    ];
    let (code, stdout, stderr) = lipfp(dir.path(), &args);
    assert_eq!(code, Some(0), "{stderr}");
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    let gate = &json["gates"][0];
    let a = &gate["attack"];
    let (n, falsified) = (
        gate["n"].as_f64().unwrap(),
        a["falsified"].as_f64().unwrap(),
    );
    assert!(falsified >= 1.0, "{a}");
    assert!(a["attacked"].as_u64().unwrap() >= falsified as u64);
    assert!(a["seconds"].as_f64().unwrap() >= 0.0);
    let accuracy = gate["accuracy_pct"].as_f64().unwrap();
    let misclassified = (n * (100.0 - accuracy) / 100.0).round();
    let upper = (n - misclassified - falsified) / n * 100.0;
    let reported = a["robust_upper_pct"].as_f64().unwrap();
    assert!((reported - upper).abs() < 1e-3, "{reported} vs {upper}");
    let vra = gate["modes"]["standard"]["vra_pct"].as_f64().unwrap();
    assert!(
        vra <= reported,
        "certified VRA {vra} above the upper bound {reported}"
    );
    let line = format!("{vra:.2}% <= robust accuracy <= {reported:.2}%");
    assert!(stdout.contains(&line), "{stdout}");
    let junit = std::fs::read_to_string(dir.path().join("r.xml")).unwrap();
    assert!(
        junit.contains(&line.replace('<', "&lt;")) || junit.contains(&line),
        "{junit}"
    );
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(summary.contains("≤ robust accuracy ≤"), "{summary}");
}

#[test]
fn a_gate_with_attack_reports_the_bracket() {
    let dir = tempfile::tempdir().unwrap();
    policy(dir.path(), "epsilon = \"0.3\"\nattack = true");
    let (code, stdout, stderr) = lipfp(dir.path(), &["check", "--json", "r.json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("<= robust accuracy <="), "{stdout}");
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    assert!(json["gates"][0]["attack"]["falsified"].as_u64().unwrap() >= 1);
}

#[test]
fn the_attack_key_and_flag_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let radii = dir.path().join("r.npy");
    write_npy(&radii, &[450], &[0.1f64; 450]);
    for (extra, expect) in [
        ("epsilons = \"r.npy\"\nattack = true", "per-instance radii"),
        (
            "epsilon = \"0.3\"\nmode = \"real\"\nattack = true",
            "unsound",
        ),
        ("epsilon = \"0.3\"\nattack = \"yes\"", "attack"),
    ] {
        policy(dir.path(), extra);
        let (code, _, stderr) = lipfp(dir.path(), &["check"]);
        assert_eq!(code, Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(expect), "{extra}: {stderr}");
    }
    let (m, x) = (digits("model.onnx"), digits("x_test.npy"));
    let base = [
        "certify",
        "--model",
        m.to_str().unwrap(),
        "--inputs",
        x.to_str().unwrap(),
    ];
    let (code, _, stderr) = lipfp(
        dir.path(),
        &[&base[..], &["--epsilons", "r.npy", "--attack"]].concat(),
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--attack: the falsifier needs one radius"),
        "{stderr}"
    );
}

#[test]
fn the_witnesses_file_holds_the_falsified_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let (m, x, y) = (
        digits("model.onnx"),
        digits("x_test.npy"),
        digits("y_test.npy"),
    );
    let args = [
        "certify",
        "--model",
        m.to_str().unwrap(),
        "--inputs",
        x.to_str().unwrap(),
        "--labels",
        y.to_str().unwrap(),
        "--epsilon",
        "0.3",
        "--mode",
        "standard",
        "--attack",
        "--attack-witnesses",
        "w.npy",
        "--json",
        "r.json",
    ];
    let (code, _, stderr) = lipfp(dir.path(), &args);
    assert_eq!(code, Some(0), "{stderr}");
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    let falsified = json["gates"][0]["attack"]["falsified"].as_u64().unwrap() as usize;
    let (w_bytes, i_bytes) = (
        std::fs::read(dir.path().join("w.npy")).unwrap(),
        std::fs::read(dir.path().join("w.indices.npy")).unwrap(),
    );
    let w = npyz::NpyFile::new(&w_bytes[..]).unwrap();
    let shape = w.shape().to_vec();
    let values: Vec<f64> = w.into_vec().unwrap();
    let indices: Vec<i64> = npyz::NpyFile::new(&i_bytes[..])
        .unwrap()
        .into_vec()
        .unwrap();
    assert_eq!(shape[0] as usize, falsified);
    assert_eq!(indices.len(), falsified);
    let subject = prepare(&m, &x, &y);
    let inputs = data::load_inputs(&x, &subject.net, subject.net.format).unwrap();
    let exec = Executor::new(&subject.net, &subject.execution);
    let dim = inputs.dim;
    for (k, &i) in indices.iter().enumerate() {
        let row = &values[k * dim..(k + 1) * dim];
        assert!(exactly_within(row, inputs.row(i as usize)), "witness {k}");
        let view = ArrayView2::from_shape((1, dim), row).unwrap();
        let logits: Vec<f64> = exec
            .forward_block(view, Hidden::None)
            .0
            .into_iter()
            .collect();
        assert_ne!(predicted_class(&logits), subject.predictions[i as usize]);
    }
}
