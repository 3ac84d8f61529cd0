//! Test sets as `.npz` archives (`x` the inputs, `y` the labels, as numpy's `savez` and
//! `savez_compressed` write them): the same figures and test-set hash as the equivalent `.npy`
//! files, labels taken from `y` unless `--labels` names another file, and malformed archives
//! refused with exit 2 naming the file and what is wrong.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

fn digits(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/digits")
        .join(file)
}

/// An archive at `path` holding `members` (name, bytes) with `method`.
fn write_npz(path: &Path, members: &[(&str, Vec<u8>)], method: CompressionMethod) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        zip.start_file(
            *name,
            SimpleFileOptions::default().compression_method(method),
        )
        .unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// `lipfp certify` on `inputs` (and `labels`) at eps 0.1: exit code, stderr and the JSON gate.
fn certify(inputs: &Path, labels: Option<&Path>, dir: &Path) -> (i32, String, serde_json::Value) {
    let json = dir.join("r.json");
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.args(["certify", "-q", "--model"])
        .arg(digits("model.onnx"))
        .arg("--inputs")
        .arg(inputs)
        .args(["--epsilon", "0.1", "--mode", "standard", "--json"])
        .arg(&json);
    if let Some(l) = labels {
        cmd.arg("--labels").arg(l);
    }
    let out = cmd.output().unwrap();
    let gate = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .map(|r| r["gates"][0].clone())
        .unwrap_or_default();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        gate,
    )
}

/// The figures a test set must reproduce.
fn figures(g: &serde_json::Value) -> Vec<String> {
    ["n", "accuracy_pct", "test_set_hash"]
        .iter()
        .map(|k| g[*k].to_string())
        .chain(
            ["certified", "vra_pct"]
                .iter()
                .map(|k| g["modes"]["standard"][*k].to_string()),
        )
        .collect()
}

#[test]
fn an_npz_test_set_gives_the_npy_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, y) = (digits("x_test.npy"), digits("y_test.npy"));
    let (code, err, want) = certify(&x, Some(&y), tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(want["test_set_hash"].is_string(), "{want}");
    let members = [
        ("x.npy", std::fs::read(&x).unwrap()),
        ("y.npy", std::fs::read(&y).unwrap()),
    ];
    for method in [CompressionMethod::Stored, CompressionMethod::Deflated] {
        let npz = tmp.path().join("test.npz");
        write_npz(&npz, &members, method);
        let (code, err, got) = certify(&npz, None, tmp.path());
        assert_eq!(code, 0, "{method:?}: {err}");
        assert_eq!(figures(&got), figures(&want), "{method:?}");
        // --labels overrides the archive's y
        let (code, err, got) = certify(&npz, Some(&y), tmp.path());
        assert_eq!((code, figures(&got)), (0, figures(&want)), "{err}");
    }
    // inputs only: no labels, no accuracy
    let npz = tmp.path().join("x-only.npz");
    write_npz(&npz, &members[..1], CompressionMethod::Stored);
    let (code, err, _) = certify(&npz, None, tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("x-only.npz") && err.contains("no array `y`"),
        "{err}"
    );
    let (code, err, got) = certify(&npz, Some(&y), tmp.path());
    assert_eq!((code, figures(&got)), (0, figures(&want)), "{err}");
}

#[test]
fn malformed_archives_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let y = digits("y_test.npy");
    let not_zip = tmp.path().join("broken.npz");
    std::fs::write(&not_zip, b"PK\x03\x04 this is not an archive").unwrap();
    let (code, err, _) = certify(&not_zip, Some(&y), tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("broken.npz") && err.contains("not a valid .npz"),
        "{err}"
    );
    let wrong = tmp.path().join("wrong.npz");
    write_npz(
        &wrong,
        &[("inputs.npy", std::fs::read(digits("x_test.npy")).unwrap())],
        CompressionMethod::Stored,
    );
    let (code, err, _) = certify(&wrong, Some(&y), tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("wrong.npz") && err.contains("no array `x`"),
        "{err}"
    );
    let garbage = tmp.path().join("garbage.npz");
    write_npz(
        &garbage,
        &[("x.npy", b"\x93NUMPY garbage".to_vec())],
        CompressionMethod::Deflated,
    );
    let (code, err, _) = certify(&garbage, Some(&y), tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("garbage.npz") && err.contains("not a valid .npy"),
        "{err}"
    );
}
