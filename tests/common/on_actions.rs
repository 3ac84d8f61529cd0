//! `lipfp` run as on GitHub Actions: the step summary, outputs and annotations go where a
//! workflow reads them (`summary.md` and `outputs.txt` in the working directory).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// `lipfp -q ARGS` in `dir` as on GitHub Actions: exit code, stdout, stderr.
pub fn lipfp_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .current_dir(dir)
        .arg("-q")
        .args(args)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
        .env("GITHUB_OUTPUT", dir.join("outputs.txt"))
        .output()
        .expect("run lipfp");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `dir/lipfp.toml`: a policy on the digits example with one gate `g` of keys `extra`;
/// returns its path.
pub fn digits_policy(dir: &Path, extra: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/digits");
    let path = dir.join("lipfp.toml");
    let text = format!(
        "[model]\npath = \"{}\"\n[data]\ninputs = \"{}\"\nlabels = \"{}\"\n\
         [[gate]]\nname = \"g\"\n{extra}\n",
        root.join("model.onnx").display(),
        root.join("x_test.npy").display(),
        root.join("y_test.npy").display()
    );
    std::fs::write(&path, text).expect("written");
    path
}
