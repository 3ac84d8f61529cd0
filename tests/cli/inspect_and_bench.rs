//! `lipfp inspect` and `lipfp bench` end to end (the benchmark on a tiny generated set: this
//! checks that the command works and reports every phase, not how fast it is).

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn inspect_reports_the_chain_norms_and_vacuity() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
        cmd.args(["-q", "inspect"])
            .arg(root().join("examples/digits/model.onnx"));
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = run(false);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/fc0/Gemm (Gemm)") && text.contains("/act0/Relu (Relu)"),
        "{text}"
    );
    assert!(
        text.contains("bfloat16") && text.contains("float16"),
        "{text}"
    );
    let out = run(true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 3);
    for l in layers {
        let (s, a) = (
            l["spectral"].as_f64().unwrap(),
            l["abs_spectral"].as_f64().unwrap(),
        );
        assert!(s > 0.0 && a >= s * (1.0 - 1e-9), "|||W||| >= ||W||: {l}");
    }
    assert_eq!(v["model_hash"].as_str().unwrap().len(), 64);
    // a model that is not a dense ReLU classifier is an input error
    let bad = tmp.path().join("bad.onnx");
    std::fs::write(&bad, b"not onnx").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["inspect"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.onnx"));
}

#[test]
fn bench_reports_every_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["-q", "bench", "--shared"])
        .arg(tmp.path().join("no-shared-here"))
        .args(["--higgs-points", "300", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let phases: Vec<String> = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["suite"].as_str().unwrap(),
                p["phase"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        phases,
        [
            "higgs-scale/norms",
            "higgs-scale/standard",
            "higgs-scale/measured"
        ]
    );
    assert!(v["skipped"][0].as_str().unwrap().starts_with("mnist"));
    for p in v["phases"].as_array().unwrap() {
        assert!(p["wall_s"].as_f64().unwrap() >= 0.0);
    }
}

#[test]
fn bench_with_nothing_to_measure_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["-q", "bench", "--shared"])
        .arg(tmp.path().join("no-shared-here"))
        .args(["--higgs-points", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing to measure") && err.contains("mnist"),
        "{err}"
    );
}
