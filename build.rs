//! Compile `proto/` with protox (pure Rust, no system `protoc`) and generate prost types; tell
//! the tests what they can run, so a test that cannot run is reported as ignored (with the
//! reason), never as passed:
//!
//! * `cfg(lipfp_shared)`: the benchmark data in `../shared/benchmarks/mnist` is present;
//! * `cfg(lipfp_onnxruntime)`: `$LIPFP_PYTHON` (else `python3`) imports onnxruntime, onnx and
//!   numpy. With `LIPFP_REQUIRE_CONFORMANCE=1` (set by `.ci/run`) its absence is a build error.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=proto/lipfp.proto");
    let fds =
        protox::compile(["proto/lipfp.proto"], ["proto"]).expect("proto/lipfp.proto compiles");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost code generation");

    println!("cargo::rustc-check-cfg=cfg(lipfp_shared)");
    println!("cargo::rustc-check-cfg=cfg(lipfp_onnxruntime)");
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
}
