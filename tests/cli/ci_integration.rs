//! CI integration end to end: a policy with a passing and a failing gate under GitHub Actions
//! (exit code, JUnit, step summary, annotations, outputs), the composite action, and baseline
//! regression on retrained weights.

use crate::common;

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const TWO_GATES: &str = r#"
[model]
path = "MODEL"

[data]
inputs = "INPUTS"
labels = "LABELS"

[[gate]]
name = "digits-pass"
epsilon = "0.3"
min_vra_pct = 50.0

[[gate]]
name = "digits-fail"
epsilon = "0.3"
min_vra_pct = 99.5
"#;

#[test]
fn github_actions_run_with_one_passing_and_one_failing_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let d = root().join("examples/digits");
    let policy = TWO_GATES
        .replace("MODEL", &d.join("model.onnx").display().to_string())
        .replace("INPUTS", &d.join("x_test.npy").display().to_string())
        .replace("LABELS", &d.join("y_test.npy").display().to_string());
    let policy_path = tmp.path().join("lipfp.toml");
    std::fs::write(&policy_path, policy).unwrap();
    let (junit, summary, outputs) = (
        tmp.path().join("junit.xml"),
        tmp.path().join("summary.md"),
        tmp.path().join("outputs.txt"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["-q", "check", "--config"])
        .arg(&policy_path)
        .arg("--junit")
        .arg(&junit)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &outputs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 2, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    assert!(xml.contains("message=\"standard VRA"), "{xml}");
    assert!(xml.contains("min_vra_pct 99.5"), "{xml}");

    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.lines().any(|l| l.starts_with('|') && l.contains("---")),
        "{md}"
    );
    assert!(
        md.contains("digits-pass") && md.contains("digits-fail"),
        "{md}"
    );

    let error_line = stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.starts_with("::error"))
        .unwrap_or_else(|| panic!("no ::error line:\n{stdout}\n{stderr}"));
    assert!(
        error_line.contains("file=") && error_line.contains("line=15"),
        "{error_line}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("::error")).count(),
        1
    );

    let outs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outs.lines().any(|l| l == "passed=false"), "{outs}");
    assert!(
        outs.lines().any(|l| l.starts_with("digits_pass_vra_pct=")),
        "{outs}"
    );
}

#[test]
fn the_action_is_composite_and_passes_inputs_through_env() {
    let action = std::fs::read_to_string(root().join("ci/action.yml")).unwrap();
    assert!(action.contains("using: composite") || action.contains("using: \"composite\""));
    // inputs reach scripts only through env:, never interpolated into run: blocks
    let mut in_run = false;
    for line in action.lines() {
        let t = line.trim_start();
        if t.starts_with("run:") {
            in_run = true;
        } else if t.starts_with("- name:") || t.starts_with("env:") || t.starts_with("with:") {
            in_run = false;
        }
        if in_run {
            assert!(
                !line.contains("${{"),
                "expression inside a run: script: {line}"
            );
        }
    }
    assert!(root().join("ci/workflow-example.yml").exists());
}

/// The base MNIST model's report as the baseline, the biased model as "retrained weights".
#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "../shared/benchmarks not found: the benchmark data is not part of the repository"
)]
fn baseline_regression_names_the_vra_drop() {
    let s = root().join("../shared/benchmarks");
    let tmp = tempfile::tempdir().unwrap();
    let policy = |model: &Path, baseline: Option<&Path>| {
        let mut p = format!(
            "[model]\npath = \"{}\"\n[data]\ninputs = \"{}\"\nlabels = \"{}\"\n",
            model.display(),
            s.join("mnist/x_test.npy").display(),
            s.join("mnist/y_test.npy").display()
        );
        if let Some(b) = baseline {
            p += &format!(
                "[baseline]\nreport = \"{}\"\nrequired = true\n",
                b.display()
            );
        }
        p += "[[gate]]\nname = \"mnist\"\nepsilon = \"0.3\"\nmode = \"standard\"\nmax_vra_drop_pp = 1.0\n";
        p
    };
    let run = |text: String, json: &Path| {
        let path = tmp.path().join("p.toml");
        std::fs::write(&path, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_lipfp"))
            .args(["-q", "check", "--config"])
            .arg(&path)
            .arg("--json")
            .arg(json)
            .output()
            .unwrap()
    };
    let base_json = tmp.path().join("base.json");
    let out = run(policy(&s.join("mnist/model.onnx"), None), &base_json);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new_json = tmp.path().join("new.json");
    let out = run(
        policy(&s.join("mnist-biased-1e6/model.onnx"), Some(&base_json)),
        &new_json,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("VRA dropped") && stdout.contains("baseline 95.17%"),
        "{stdout}"
    );
    // a required baseline that is missing is an input error
    let out = run(
        policy(
            &s.join("mnist/model.onnx"),
            Some(&tmp.path().join("missing.json")),
        ),
        &tmp.path().join("x.json"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
}

/// `--pr-comment`: the body a workflow posts, written beside the other reports: the marker, one
/// row per gate with its verdict; after a policy error, the error and no verdict.
#[test]
fn pr_comment_body_is_written_for_a_run_and_for_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let d = root().join("examples/digits");
    let policy = TWO_GATES
        .replace("MODEL", &d.join("model.onnx").display().to_string())
        .replace("INPUTS", &d.join("x_test.npy").display().to_string())
        .replace("LABELS", &d.join("y_test.npy").display().to_string());
    let policy_path = tmp.path().join("lipfp.toml");
    std::fs::write(&policy_path, policy).unwrap();
    let comment = tmp.path().join("comment.md");
    let run = |config: &Path| {
        Command::new(env!("CARGO_BIN_EXE_lipfp"))
            .args(["check", "-q", "--config"])
            .arg(config)
            .arg("--pr-comment")
            .arg(&comment)
            .env_remove("GITHUB_ACTIONS")
            .output()
            .unwrap()
    };
    let out = run(&policy_path);
    assert_eq!(out.status.code(), Some(1));
    let body = std::fs::read_to_string(&comment).unwrap();
    assert!(body.starts_with("<!-- lipfp-pr-comment -->"), "{body}");
    assert!(
        body.contains("digits-pass") && body.contains("digits-fail"),
        "{body}"
    );
    assert!(body.contains("❌"), "{body}");
    let out = run(&tmp.path().join("missing.toml"));
    assert_eq!(out.status.code(), Some(2));
    let body = std::fs::read_to_string(&comment).unwrap();
    assert!(
        body.starts_with("<!-- lipfp-pr-comment -->") && body.contains("⛔"),
        "{body}"
    );
    assert!(!body.contains("✅"), "{body}");
}

/// A retrained digits model that keeps its mean VRA above the gate but lost its certificates on
/// one class (class 3's output row halved by `tests/conformance/scale_class.py`) fails a
/// `min_class_vra_pct` gate that names the class, while `min_vra_pct` alone passes.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnx (set LIPFP_PYTHON) to write the retrained model"
)]
fn a_class_that_lost_its_certificates_fails_the_per_class_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = retrained_digits_policy(tmp.path(), "min_vra_pct = 80\nmin_class_vra_pct = 50\n");
    let json = tmp.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["check", "-q", "--config"])
        .arg(&policy)
        .arg("--json")
        .arg(&json)
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let gates = report["gates"].as_array().unwrap();
    assert_eq!(gates[0]["status"], "pass", "{}", gates[0]);
    assert_eq!(gates[1]["status"], "fail", "{}", gates[1]);
    let failure = gates[1]["failures"][0].as_str().unwrap();
    assert!(
        failure.contains("min_class_vra_pct") && failure.contains("class 3"),
        "{failure}"
    );
}

/// The same retrained model under `warn_min_class_vra_pct`: the gate warns (status `warn`, a
/// `::warning` annotation naming the class, the output `passed=true`) and the run exits 0.
#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnx (set LIPFP_PYTHON) to write the retrained model"
)]
fn the_same_class_under_a_warn_threshold_warns_and_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = retrained_digits_policy(
        tmp.path(),
        "min_vra_pct = 80\nwarn_min_class_vra_pct = 50\n",
    );
    let (json, summary, outputs) = (
        tmp.path().join("r.json"),
        tmp.path().join("summary.md"),
        tmp.path().join("outputs"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["check", "-q", "--config"])
        .arg(&policy)
        .arg("--json")
        .arg(&json)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &outputs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let gate = &report["gates"][1];
    assert_eq!(gate["status"], "warn", "{gate}");
    assert_eq!(gate["failures"].as_array().unwrap().len(), 0, "{gate}");
    let warning = gate["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("warn_min_class_vra_pct") && warning.contains("class 3"),
        "{warning}"
    );
    let annotation = stdout
        .lines()
        .find(|l| l.starts_with("::warning file="))
        .unwrap_or_else(|| panic!("no warning annotation in {stdout}"));
    assert!(
        annotation.contains("title=lipfp gate per-class warned") && annotation.contains("class 3"),
        "{annotation}"
    );
    assert!(!stdout.contains("::error"), "{stdout}");
    let outputs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outputs.contains("passed=true\n"), "{outputs}");
    assert!(outputs.contains("per_class_status=warn\n"), "{outputs}");
    assert!(std::fs::read_to_string(&summary)
        .unwrap()
        .contains("⚠️ warn"));
}

/// A policy over the digits model with class 3's output scaled by 0.5 (most of its certificates
/// lost, the mean VRA kept): gate `mean` (`min_vra_pct = 80`) and gate `per-class` with
/// `per_class` as its thresholds. Returns the policy's path.
fn retrained_digits_policy(dir: &Path, per_class: &str) -> std::path::PathBuf {
    let d = root().join("examples/digits");
    let model = dir.join("retrained.onnx");
    common::runtime::scale_class(&d.join("model.onnx"), &model, 3, "0.5");
    let policy = format!(
        "[model]\npath = {model:?}\n[data]\ninputs = {:?}\nlabels = {:?}\n\n\
         [[gate]]\nname = \"mean\"\nepsilon = \"0.1\"\nmin_vra_pct = 80\n\n\
         [[gate]]\nname = \"per-class\"\nepsilon = \"0.1\"\n{per_class}",
        d.join("x_test.npy"),
        d.join("y_test.npy")
    );
    let path = dir.join("lipfp.toml");
    std::fs::write(&path, policy).unwrap();
    path
}
