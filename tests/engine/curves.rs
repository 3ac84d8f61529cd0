//! Robustness curves (issue 12, item 5): the counts at every radius equal fixed-radius runs, the
//! per-point radii are confirmed lower bounds, the JSON, console, Mermaid chart (checked by
//! Mermaid's own parser) and SVG plot carry them, and a policy's `curve` is validated.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use lipfp::bounds::certify::{Certifier, Mode};
use lipfp::engine::run::{self, ReferencePlan, SubjectSpec};
use lipfp::policy::{CurveGrid, Radius};
use lipfp::progress::Progress;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn digits(file: &str) -> PathBuf {
    root().join("examples/digits").join(file)
}

fn spec(model: &Path, x: &Path, y: &Path, reference: bool) -> SubjectSpec {
    SubjectSpec {
        model: model.to_path_buf(),
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: x.to_path_buf(),
        labels: Some(y.to_path_buf()),
        gram_iterations: 12,
        reference: if reference {
            ReferencePlan::Every { products: true }
        } else {
            ReferencePlan::None
        },
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    }
}

const MODES: [Mode; 3] = [Mode::Standard, Mode::Hybrid, Mode::Best];

/// The curve's counts at every radius equal those of a fixed-radius run at that radius, in every
/// mode (the real ceiling included), for `radii` on the subject of `spec`.
fn curve_equals_fixed_runs(spec: &SubjectSpec, radii: &[&str]) {
    let subject = run::prepare(spec, &Progress::silent()).unwrap();
    let grid = CurveGrid::given(radii).unwrap();
    let curve = run::certify_curve(&subject, &grid, &MODES, &Default::default()).unwrap();
    assert_eq!(curve.modes.len(), 4, "real and the three modes");
    for (k, text) in radii.iter().enumerate() {
        let radius = Radius::parse_decimal(text).unwrap();
        let fixed = run::certify(&subject, &radius, &MODES).unwrap();
        for m in &curve.modes {
            let f = fixed.mode(m.mode).unwrap();
            let p = &m.points[k];
            assert_eq!(p.epsilon, *text);
            assert_eq!(
                (p.certified, p.vra),
                (f.certified, f.vra),
                "{} at {text}",
                m.mode
            );
        }
    }
}

#[test]
fn curve_counts_equal_fixed_runs_on_the_digits_example() {
    let s = spec(
        &digits("model.onnx"),
        &digits("x_test.npy"),
        &digits("y_test.npy"),
        true,
    );
    curve_equals_fixed_runs(&s, &["0", "0.05", "0.1", "0.2", "0.3", "0.4", "0.6", "1"]);
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "needs ../shared/benchmarks/mnist (the published benchmark)"
)]
fn curve_counts_equal_fixed_runs_on_mnist() {
    let dir = root().join("../shared/benchmarks/mnist");
    let s = spec(
        &dir.join("model.onnx"),
        &dir.join("x_test.npy"),
        &dir.join("y_test.npy"),
        true,
    );
    curve_equals_fixed_runs(&s, &["0.1", "0.2", "0.3", "0.4"]);
}

/// Every per-point radius is certified when the certificate is run at it, and the bisection
/// left it within its relative width of a radius that is not certified.
#[test]
fn per_point_radii_are_confirmed_lower_bounds() {
    let s = spec(
        &digits("model.onnx"),
        &digits("x_test.npy"),
        &digits("y_test.npy"),
        true,
    );
    let subject = run::prepare(&s, &Progress::silent()).unwrap();
    let curve =
        run::certify_curve(&subject, &CurveGrid::Auto, &MODES, &Default::default()).unwrap();
    let bounds = subject.bounds.as_ref().unwrap();
    let reference = subject.reference.as_ref().unwrap();
    let certifier = Certifier {
        fmt: bounds,
        hi: reference.bounds.as_ref(),
    };
    for m in &curve.modes {
        for (i, r) in m.radii.iter().enumerate() {
            let centre = subject.centre(i);
            let ok = |eps: f64| certifier.certify(m.mode, &centre, eps).verdict.is_ok();
            match r {
                None => assert!(!ok(0.0), "{} point {i}", m.mode),
                Some(r) => {
                    assert!(ok(*r), "{} point {i}: not certified at {r}", m.mode);
                    assert!(!ok(r * 1.001 + 1e-12), "{} point {i}: far below", m.mode);
                }
            }
        }
    }
    let q = curve.modes[1].radius_quantile(0.5);
    assert!(q > 0.0 && q.is_finite(), "median radius {q}");
}

/// Run `lipfp -q <args>` in `dir`; with `gha`, under GitHub Actions with the step summary there.
fn lipfp(dir: &Path, args: &[&str], gha: bool) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.current_dir(dir)
        .arg("-q")
        .args(args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_OUTPUT");
    if gha {
        cmd.env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
            .env("GITHUB_OUTPUT", dir.join("outputs.txt"));
    }
    let out = cmd.output().expect("run lipfp");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn certify_args(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "certify".into(),
        "--model".into(),
        digits("model.onnx").display().to_string(),
        "--inputs".into(),
        digits("x_test.npy").display().to_string(),
        "--labels".into(),
        digits("y_test.npy").display().to_string(),
        "--epsilon".into(),
        "0.3".into(),
        "--mode".into(),
        "standard,best".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn certify_curve_writes_json_console_plot_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let args = certify_args(&[
        "--curve",
        "0.1,0.2,0.3",
        "--plot",
        "curve.svg",
        "--json",
        "r.json",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = lipfp(dir.path(), &args, true);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("curve (VRA %)"), "{stdout}");
    assert!(stdout.contains("median radius"), "{stdout}");

    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    let gate = &json["gates"][0];
    let curve = &gate["curve"];
    for mode in ["real", "standard", "best"] {
        let points = curve[mode]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: {curve}"));
        let eps: Vec<&str> = points
            .iter()
            .map(|p| p["epsilon"].as_str().unwrap())
            .collect();
        assert_eq!(eps, ["0.1", "0.2", "0.3"]);
        // the curve at the run's radius is the run itself
        assert_eq!(
            points[2]["certified"], gate["modes"][mode]["certified"],
            "{mode}"
        );
        assert_eq!(points[2]["vra"], gate["modes"][mode]["vra"], "{mode}");
        let q = &curve["radius_quantiles"][mode];
        let (p10, p50, p90) = (q["p10"].as_f64(), q["p50"].as_f64(), q["p90"].as_f64());
        assert!(p10 <= p50 && p50 <= p90 && p90.is_some(), "{q}");
    }
    let classes = gate["modes"]["standard"]["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 10);
    let n: u64 = classes.iter().map(|c| c["n"].as_u64().unwrap()).sum();
    assert_eq!(n, gate["n"].as_u64().unwrap());
    let vra: u64 = classes.iter().map(|c| c["vra"].as_u64().unwrap()).sum();
    assert_eq!(vra, gate["modes"]["standard"]["vra"].as_u64().unwrap());

    let svg = std::fs::read_to_string(dir.path().join("curve.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let lines = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "polyline")
        .count();
    assert!(lines >= 3, "a line per mode: {lines}");
    let texts: String = doc.descendants().filter_map(|n| n.text()).collect();
    for label in ["robustness curve", "standard", "best", "radius"] {
        assert!(texts.contains(label), "{label}: {texts}");
    }

    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        summary.contains("### Robustness curve: certify"),
        "{summary}"
    );
    assert!(summary.contains("```mermaid"), "{summary}");
    assert!(summary.contains("### Per class: certify"), "{summary}");
    if common::mermaid::mermaid_available() {
        let types = common::mermaid::check_mermaid(&dir.path().join("summary.md"));
        assert_eq!(types, Ok(vec!["xychart".to_string()]));
    }
}

/// The step summary's chart parses with Mermaid's own parser, the baseline's curve beside it.
#[test]
#[cfg_attr(
    not(lipfp_mermaid),
    ignore = "needs node and `npm ci --prefix tests/mermaid`"
)]
fn a_gate_curve_and_its_baseline_are_charted_and_parse_with_mermaid() {
    let dir = tempfile::tempdir().unwrap();
    let policy = format!(
        "[model]\npath = \"{}\"\n[data]\ninputs = \"{}\"\nlabels = \"{}\"\n[baseline]\nreport = \"base.json\"\n\
         [[gate]]\nname = \"digits \\\"curve\\\" gate\"\nepsilon = \"0.3\"\nmode = \"standard,best\"\n\
         curve = [\"0\", \"0.15\", \"0.3\", \"0.45\"]\n",
        digits("model.onnx").display(),
        digits("x_test.npy").display(),
        digits("y_test.npy").display()
    );
    std::fs::write(dir.path().join("lipfp.toml"), policy).unwrap();
    let (code, _, stderr) = lipfp(dir.path(), &["check", "--json", "base.json"], false);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = lipfp(dir.path(), &["check"], true);
    assert_eq!(code, Some(0), "{stderr}");
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(summary.contains("standard (baseline)"), "{summary}");
    let chart = summary.split("```mermaid").nth(1).unwrap();
    assert_eq!(chart.matches("    line [").count(), 6, "{summary}");
    assert_eq!(
        common::mermaid::check_mermaid(&dir.path().join("summary.md")),
        Ok(vec!["xychart".to_string()])
    );
}

#[test]
fn a_policy_curve_is_validated_naming_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    for (curve, needle) in [
        ("[0.1, 0.2]", "write each radius as a decimal string"),
        (
            "\"yes\"",
            "expected true, false or a list of decimal strings",
        ),
        ("[\"-0.1\"]", "curve"),
        ("[]", "give 1 to 64 radii"),
    ] {
        let policy = format!(
            "[model]\npath = \"m.onnx\"\n[data]\ninputs = \"x.npy\"\n[[gate]]\nname = \"g\"\nepsilon = \"0.3\"\ncurve = {curve}\n"
        );
        std::fs::write(dir.path().join("lipfp.toml"), policy).unwrap();
        let (code, _, stderr) = lipfp(dir.path(), &["check"], false);
        assert_eq!(code, Some(2), "{curve}: {stderr}");
        assert!(
            stderr.contains("`g`") && stderr.contains(needle),
            "{curve}: {stderr}"
        );
    }
    let (code, _, stderr) = lipfp(
        dir.path(),
        &certify_args(&["--curve", "0.1,x"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        false,
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--curve"), "{stderr}");
}
