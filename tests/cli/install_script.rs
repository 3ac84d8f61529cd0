//! `ci/install-wheel.sh`, the action's released-wheel install (`ci/action.yml`), run offline
//! against a local release: a folder `TAG/` holding the lipfp wheel `.ci/run` built for this
//! machine and a `SHA256SUMS`, downloaded through a `file://` base. A matching wheel installs
//! and runs; a tampered wheel, a malformed or missing sum, or a listed wheel the release does
//! not serve install nothing; a release without a wheel for the platform falls back to the
//! source build (`installed=false`), or fails with `--require-wheel`.
//!
//! Ignored unless `LIPFP_WHEEL_DIR` names a folder with a wheel for this machine when the tests
//! are built (`build.rs`; `.ci/run` builds the wheel first and sets `LIPFP_REQUIRE_WHEEL=1`,
//! which makes its absence a build failure).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

const TAG: &str = "v0.1.0";
const IGNORE: &str = "needs LIPFP_WHEEL_DIR: a folder with the lipfp wheel for this machine";

/// The wheel `.ci/run` built (the one file ending in `.whl` in `LIPFP_WHEEL_DIR`).
fn built_wheel() -> PathBuf {
    let dir = std::env::var("LIPFP_WHEEL_DIR").expect(IGNORE);
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect(IGNORE)
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel in {dir}: {wheels:?}");
    wheels.remove(0)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A local release: `root/TAG/` with the wheel (its bytes passed through `serve`, `None`: not
/// served) and `SHA256SUMS` with `sums` (`None`: no file), in a fresh temporary folder.
struct Release {
    dir: tempfile::TempDir,
    wheel_name: String,
}

impl Release {
    fn new(
        serve: impl Fn(Vec<u8>) -> Option<Vec<u8>>,
        sums: impl Fn(&str, &str) -> Option<String>,
    ) -> Release {
        let wheel = built_wheel();
        let wheel_name = wheel.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&wheel).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let tag = dir.path().join("release").join(TAG);
        std::fs::create_dir_all(&tag).unwrap();
        let sum = sha256_hex(&bytes);
        if let Some(served) = serve(bytes) {
            std::fs::write(tag.join(&wheel_name), served).unwrap();
        }
        if let Some(text) = sums(&sum, &wheel_name) {
            std::fs::write(tag.join("SHA256SUMS"), text).unwrap();
        }
        Release { dir, wheel_name }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Runs the script with `extra` arguments; its output and what it appended to
    /// `$GITHUB_OUTPUT`.
    fn install(&self, extra: &[&str]) -> (Output, String) {
        self.install_as(TAG, extra)
    }

    /// [`Release::install`] asking for `version`.
    fn install_as(&self, version: &str, extra: &[&str]) -> (Output, String) {
        let outputs = self.dir.path().join("github_output");
        std::fs::write(&outputs, "").unwrap();
        let base = format!("file://{}", self.dir.path().join("release").display());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/install-wheel.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(["--version", version, "--base", &base])
            .arg("--bin-dir")
            .arg(self.bin())
            .arg("--work")
            .arg(self.work())
            .args(extra)
            .env("GITHUB_OUTPUT", &outputs)
            // offline: nothing may be fetched from an index
            .env("PIP_NO_INDEX", "1")
            .env("https_proxy", "http://127.0.0.1:9")
            .env("http_proxy", "http://127.0.0.1:9")
            .output()
            .unwrap();
        (out, std::fs::read_to_string(outputs).unwrap())
    }

    /// Whether anything was installed: a `lipfp` in the bin folder or a virtual environment.
    fn installed_anything(&self) -> bool {
        self.bin().join("lipfp").exists() || self.work().join("venv").exists()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn honest(sum: &str, wheel: &str) -> Option<String> {
    Some(format!(
        "{sum}  {wheel}\n{}  lipfp-0.1.0.tar.gz\n",
        "0".repeat(64)
    ))
}

#[test]
#[cfg_attr(
    not(lipfp_wheel),
    ignore = "needs LIPFP_WHEEL_DIR (see the file's doc)"
)]
fn a_matching_wheel_installs_and_runs() {
    let release = Release::new(Some, honest);
    let (out, outputs) = release.install(&[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert_eq!(outputs, "installed=true\n");
    let version = Command::new(release.bin().join("lipfp"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(version.status.success());
    let v = String::from_utf8_lossy(&version.stdout);
    assert!(
        v.starts_with("lipfp ") && said.contains(v.trim()),
        "{v} / {said}"
    );
    // `*` (binary mode) before the name is sha256sum's other format, also accepted
    let starred = Release::new(Some, |s, w| Some(format!("{s} *{w}\n")));
    let (out, outputs) = starred.install(&["--require-wheel"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(outputs, "installed=true\n");
}

#[test]
#[cfg_attr(
    not(lipfp_wheel),
    ignore = "needs LIPFP_WHEEL_DIR (see the file's doc)"
)]
fn a_tampered_wheel_fails_and_installs_nothing() {
    let flip = |mut b: Vec<u8>| {
        let k = b.len() / 2;
        b[k] ^= 1;
        Some(b)
    };
    let release = Release::new(flip, honest);
    let (out, outputs) = release.install(&[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!(
        "{} does not match the release's SHA256SUMS",
        release.wheel_name
    )));
    assert!(said.contains("nothing was installed"), "{said}");
    assert_eq!(outputs, "");
    assert!(!release.installed_anything());
}

#[test]
#[cfg_attr(
    not(lipfp_wheel),
    ignore = "needs LIPFP_WHEEL_DIR (see the file's doc)"
)]
fn a_missing_or_malformed_sum_installs_nothing() {
    // no SHA256SUMS: nothing can be verified, so no wheel (the source build), or an error
    let release = Release::new(Some, |_, _| None);
    let (out, outputs) = release.install(&[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("the release {TAG} has no SHA256SUMS")),
        "{said}"
    );
    assert!(said.contains("building lipfp from source"), "{said}");
    assert_eq!(outputs, "installed=false\n");
    assert!(!release.installed_anything());
    let (out, outputs) = release.install(&["--require-wheel"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("install: wheel requires a verified wheel"));
    assert_eq!(outputs, "");
    assert!(!release.installed_anything());
    // the wheel listed without its sum, or with a short one: refused, naming the line
    for bad in ["{w}\n", "{s}  {w}\n{w}\n", "abc  {w}\n", "{s}\t{w}\n"] {
        let release = Release::new(Some, |s, w| Some(bad.replace("{s}", s).replace("{w}", w)));
        let (out, outputs) = release.install(&[]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{bad}: {said}");
        let line = if bad.starts_with("{s}  ") { 2 } else { 1 };
        assert!(
            said.contains(&format!("line {line}, is not '<sha256>  <file>'")),
            "{said}"
        );
        assert_eq!(outputs, "");
        assert!(!release.installed_anything());
    }
    // listed with its sum but not served
    let release = Release::new(|_| None, honest);
    let (out, _) = release.install(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot be downloaded"),
        "{}",
        text(&out)
    );
    assert!(!release.installed_anything());
}

#[test]
#[cfg_attr(
    not(lipfp_wheel),
    ignore = "needs LIPFP_WHEEL_DIR (see the file's doc)"
)]
fn no_wheel_for_the_platform_falls_back_to_the_source_build() {
    let release = Release::new(Some, honest);
    for platform in ["Darwin-arm64", "FreeBSD-amd64"] {
        let (out, outputs) = release.install(&["--platform", platform]);
        let said = text(&out);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("building lipfp from source"), "{said}");
        assert!(said.contains(platform), "{said}");
        assert_eq!(outputs, "installed=false\n");
        assert!(!release.installed_anything());
        let (out, _) = release.install(&["--platform", platform, "--require-wheel"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(!release.installed_anything());
    }
    // a commit is not a release: the source build, without looking for one
    let (out, outputs) = release.install_as("0123456789abcdef", &["--require-wheel"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is a commit, not a release tag"));
    assert_eq!(outputs, "");
    let (out, outputs) = release.install_as("0123456789abcdef", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(outputs, "installed=false\n");
    // a version that is not a tag name never reaches a URL
    let (out, _) = release.install_as("../v0.1.0", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is not a tag name"));
    assert!(!release.installed_anything());
}
