//! The README's first command on the embedded examples: `lipfp check` on the root policy passes,
//! and each example model meets the figures its README states.

use std::path::Path;
use std::process::Command;

use lipfp::arith::format::Format;
use lipfp::bounds::certify::Mode;
use lipfp::engine::run::{self, ReferencePlan, SubjectSpec};
use lipfp::policy::Radius;
use lipfp::progress::Progress;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn root_policy_passes() {
    let cache = tempfile::tempdir().unwrap();
    let json = cache.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .current_dir(root())
        .args(["check", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    let gates = report["gates"].as_array().unwrap();
    assert!(gates.len() >= 3);
    assert!(gates.iter().all(|g| g["passed"] == true));
    // a float32 standard gate, a pre-deployment gate and a lower-precision gate
    assert!(gates
        .iter()
        .any(|g| g["format"] == "float32" && g["mode"] == "standard"));
    assert!(gates.iter().any(|g| g["mode"] == "best"));
    assert!(gates.iter().any(|g| g["format"] == "float16"));
}

fn figures(example: &str, eps: &str) -> (f64, f64) {
    let dir = root().join("examples").join(example);
    let spec = SubjectSpec {
        model: dir.join("model.onnx"),
        format: Some(Format::Float32),
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: dir.join("x_test.npy"),
        labels: Some(dir.join("y_test.npy")),
        gram_iterations: 12,
        reference: ReferencePlan::None,
        shard: None,
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    let subject = run::prepare(&spec, &Progress::silent()).unwrap();
    let out = run::certify(
        &subject,
        &Radius::parse_decimal(eps).unwrap(),
        &[Mode::Standard],
    )
    .unwrap();
    let n = out.n as f64;
    let acc = 100.0 * out.correct.unwrap() as f64 / n;
    let vra = 100.0 * out.mode(Mode::Standard).unwrap().vra.unwrap() as f64 / n;
    (acc, vra)
}

#[test]
fn digits_example_is_accurate_and_robust() {
    let (acc, vra) = figures("digits", "0.3");
    eprintln!("digits: accuracy {acc:.2}%, standard VRA {vra:.2}%");
    assert!(acc >= 90.0 && vra >= 50.0);
}

#[test]
fn breast_cancer_example_is_accurate_and_robust() {
    let (acc, vra) = figures("breast-cancer", "0.25");
    eprintln!("breast-cancer: accuracy {acc:.2}%, standard VRA {vra:.2}%");
    assert!(acc >= 90.0 && vra >= 50.0);
}
