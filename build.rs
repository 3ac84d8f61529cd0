//! Compile `proto/` with protox (pure Rust, no system `protoc`) and generate prost types; tell
//! the tests what they can run, so a test that cannot run is reported as ignored (with the
//! reason), never as passed:
//!
//! * `cfg(lipfp_shared)`: the benchmark data in `../shared/benchmarks/mnist` is present;
//! * `cfg(lipfp_onnxruntime)`: `$LIPFP_PYTHON` (else `python3`) imports onnxruntime, onnx and
//!   numpy. With `LIPFP_REQUIRE_CONFORMANCE=1` (set by `.ci/run`) its absence is a build error;
//! * `cfg(lipfp_mermaid)`: `$LIPFP_NODE` (else `node`) runs and `npm ci --prefix tests/mermaid`
//!   has installed mermaid and jsdom, so `tests/mermaid/parse.mjs` can check the Mermaid charts.
//!   With `LIPFP_REQUIRE_MERMAID=1` (set by `.ci/run`) their absence is a build error;
//! * `cfg(lipfp_wheel)`: `$LIPFP_WHEEL_DIR` holds a lipfp wheel (`tests/cli/install_script.rs`).
//!   With `LIPFP_REQUIRE_WHEEL=1` (set by `.ci/run`, which builds the wheel first) its absence
//!   is a build error.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=proto/lipfp.proto");
    let fds =
        protox::compile(["proto/lipfp.proto"], ["proto"]).expect("proto/lipfp.proto compiles");
    prost_build::Config::new()
        .btree_map([".lipfp.v1.Thresholds.limits"])
        .compile_fds(fds)
        .expect("prost code generation");

    println!("cargo::rustc-check-cfg=cfg(lipfp_shared)");
    println!("cargo::rustc-check-cfg=cfg(lipfp_onnxruntime)");
    println!("cargo::rustc-check-cfg=cfg(lipfp_mermaid)");
    println!("cargo::rustc-check-cfg=cfg(lipfp_wheel)");
    wheel_cfg();
    let shared = Path::new("../shared/benchmarks/mnist");
    if shared.join("model.onnx").exists() {
        println!("cargo:rerun-if-changed=../shared/benchmarks/mnist");
        println!("cargo:rustc-cfg=lipfp_shared");
    }
    println!("cargo:rerun-if-env-changed=LIPFP_PYTHON");
    println!("cargo:rerun-if-env-changed=LIPFP_REQUIRE_CONFORMANCE");
    let python = std::env::var("LIPFP_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import onnxruntime, onnx, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        println!("cargo:rustc-cfg=lipfp_onnxruntime");
    } else if std::env::var("LIPFP_REQUIRE_CONFORMANCE").as_deref() == Ok("1") {
        panic!(
            "LIPFP_REQUIRE_CONFORMANCE=1 but `{python}` cannot import onnxruntime, onnx and numpy \
             (`.ci/run` makes a virtual environment from tests/conformance/requirements.txt)"
        );
    }

    // npm rewrites node_modules/.package-lock.json on every install; before the first one, a
    // change anywhere in tests/mermaid (the install creating node_modules) reruns this script
    println!("cargo:rerun-if-env-changed=LIPFP_NODE");
    println!("cargo:rerun-if-env-changed=LIPFP_REQUIRE_MERMAID");
    let modules = Path::new("tests/mermaid/node_modules");
    if modules.exists() {
        println!("cargo:rerun-if-changed=tests/mermaid/node_modules/.package-lock.json");
    } else {
        println!("cargo:rerun-if-changed=tests/mermaid");
    }
    let node = std::env::var("LIPFP_NODE").unwrap_or_else(|_| "node".into());
    let installed = ["mermaid", "jsdom"]
        .iter()
        .all(|p| modules.join(p).join("package.json").is_file());
    let runs = Command::new(&node)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if installed && runs {
        println!("cargo:rustc-cfg=lipfp_mermaid");
    } else if std::env::var("LIPFP_REQUIRE_MERMAID").as_deref() == Ok("1") {
        panic!(
            "LIPFP_REQUIRE_MERMAID=1 but {} (`.ci/run` installs node and runs \
             `npm ci --prefix tests/mermaid`)",
            if runs {
                "tests/mermaid/node_modules lacks mermaid or jsdom".to_owned()
            } else {
                format!("`{node} --version` does not run")
            }
        );
    }
}

/// `cfg(lipfp_wheel)` when `$LIPFP_WHEEL_DIR` holds a wheel (see the file's doc).
fn wheel_cfg() {
    println!("cargo:rerun-if-env-changed=LIPFP_WHEEL_DIR");
    println!("cargo:rerun-if-env-changed=LIPFP_REQUIRE_WHEEL");
    let dir = std::env::var("LIPFP_WHEEL_DIR").unwrap_or_default();
    let has_wheel = !dir.is_empty()
        && std::fs::read_dir(&dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "whl"))
        });
    if !dir.is_empty() {
        println!("cargo:rerun-if-changed={dir}");
    }
    if has_wheel {
        println!("cargo:rustc-cfg=lipfp_wheel");
    } else if std::env::var("LIPFP_REQUIRE_WHEEL").as_deref() == Ok("1") {
        panic!(
            "LIPFP_REQUIRE_WHEEL=1 but LIPFP_WHEEL_DIR ('{dir}') holds no wheel (`.ci/run` builds \
             it with maturin before the tests)"
        );
    }
}
