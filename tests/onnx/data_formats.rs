//! Test sets as `.npz` archives (`x` the inputs, `y` the labels, as numpy's `savez` and
//! `savez_compressed` write them) and as CSV files (a header row, `--label-column`): the same
//! figures and test-set hash as the equivalent `.npy` files, labels taken from the file itself
//! unless `--labels` names another one, and malformed files refused with exit 2 naming the file,
//! and for CSV the row, line and column.

use crate::common;

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
    certify_with(inputs, labels, &[], dir)
}

/// [`certify`] with more flags.
fn certify_with(
    inputs: &Path,
    labels: Option<&Path>,
    extra: &[&str],
    dir: &Path,
) -> (i32, String, serde_json::Value) {
    let json = dir.join("r.json");
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.args(["certify", "-q", "--model"])
        .arg(digits("model.onnx"))
        .arg("--inputs")
        .arg(inputs)
        .args(["--epsilon", "0.1", "--mode", "standard", "--json"])
        .arg(&json)
        .args(extra);
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

/// The digits test set as CSV text: a header `label,p0..p63` (the label first), then one row per
/// point, every value written so that it reads back exactly.
fn digits_csv() -> String {
    let (x, _) = common::runtime::read_npy::<f32>(&digits("x_test.npy"));
    let (y, _) = common::runtime::read_npy::<i64>(&digits("y_test.npy"));
    let mut out = String::from("label");
    for j in 0..64 {
        out.push_str(&format!(",p{j}"));
    }
    out.push('\n');
    for (i, label) in y.iter().enumerate() {
        out.push_str(&label.to_string());
        for v in &x[i * 64..(i + 1) * 64] {
            out.push_str(&format!(",{}", f64::from(*v)));
        }
        out.push('\n');
    }
    out
}

#[test]
fn a_csv_test_set_gives_the_npy_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, err, want) = certify(
        &digits("x_test.npy"),
        Some(&digits("y_test.npy")),
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let csv = tmp.path().join("test.csv");
    std::fs::write(&csv, digits_csv()).unwrap();
    let (code, err, got) = certify_with(&csv, None, &["--label-column", "label"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert_eq!(figures(&got), figures(&want));
    // the label column is never a feature: without it the column count is wrong
    let (code, err, _) = certify(&csv, Some(&digits("y_test.npy")), tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("65 feature columns") && err.contains("no label_column"),
        "{err}"
    );
}

#[test]
fn malformed_csv_files_name_the_row_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let good = digits_csv();
    let lines: Vec<&str> = good.lines().collect();
    let with_line = |k: usize, line: &str| {
        let mut l = lines.clone();
        l[k] = line;
        l.join("\n") + "\n"
    };
    let bad_cell = lines[3].replacen(",0", ",abc", 1);
    let missing = lines[4].replacen(",0", ",", 1);
    let short = lines[2].rsplit_once(',').unwrap().0.to_string();
    let fractional = format!("1.5,{}", lines[5].split_once(',').unwrap().1);
    let cases = [
        (with_line(3, &bad_cell), "row 2 (line 4), column `p"),
        (with_line(4, &missing), "missing value"),
        (
            with_line(2, &short),
            "row 1 (line 3) has 64 cells; the header has 65 columns",
        ),
        (
            with_line(5, &fractional),
            "row 4 (line 6), column `label`: label 1.5 is not an integer",
        ),
    ];
    for (k, (text, want)) in cases.iter().enumerate() {
        let csv = tmp.path().join(format!("bad{k}.csv"));
        std::fs::write(&csv, text).unwrap();
        let (code, err, _) = certify_with(&csv, None, &["--label-column", "label"], tmp.path());
        assert_eq!(code, 2, "case {k}: {err}");
        assert!(
            err.contains(&format!("bad{k}.csv")) && err.contains(want),
            "case {k}: {err}"
        );
    }
    let csv = tmp.path().join("test.csv");
    std::fs::write(&csv, &good).unwrap();
    let (code, err, _) = certify_with(&csv, None, &["--label-column", "class"], tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("label_column `class` is not a column"),
        "{err}"
    );
    let (code, err, _) = certify_with(
        &digits("x_test.npy"),
        Some(&digits("y_test.npy")),
        &["--label-column", "label"],
        tmp.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--label-column") && err.contains("not a .csv"),
        "{err}"
    );
}
