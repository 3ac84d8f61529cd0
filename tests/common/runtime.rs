//! Running models through the runtimes users deploy on: onnxruntime CPU (the Python package,
//! through `tests/conformance/ort_logits.py`) and tract's optimised plan.
//!
//! The Python interpreter is `$LIPFP_PYTHON`, else `python3`. Without one that imports
//! onnxruntime the tests that need it are reported as ignored (see `build.rs`), and with
//! `LIPFP_REQUIRE_CONFORMANCE=1` (set by `.ci/run`) the build fails instead.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use npyz::WriterBuilder;

/// The repository's conformance scripts.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(name)
}

/// The Python interpreter with onnxruntime: `$LIPFP_PYTHON`, else `python3`. Tests that call
/// it are ignored (with the reason) when the build found none (`cfg(lipfp_onnxruntime)`, set by
/// `build.rs`), so reaching here without one is a failure.
pub fn python() -> PathBuf {
    let candidate = std::env::var_os("LIPFP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let ok = Command::new(&candidate)
        .args(["-c", "import onnxruntime, onnx, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{}` cannot import onnxruntime, onnx and numpy (set LIPFP_PYTHON; `.ci/run` makes a \
         virtual environment from tests/conformance/requirements.txt)",
        candidate.display()
    );
    candidate
}

/// `model` with class `class`'s output row scaled by `factor`, written to `out` by
/// `tests/conformance/scale_class.py` (a "retrained" model that lost robustness on one class).
pub fn scale_class(model: &Path, out: &Path, class: usize, factor: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = Command::new(python())
        .arg(root.join("tests/conformance/scale_class.py"))
        .arg(model)
        .arg(out)
        .args([class.to_string().as_str(), factor])
        .output()
        .expect("start Python");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Run a Python script of `tests/conformance` and fail with its stderr if it fails.
pub fn run_script(python: &Path, name: &str, args: &[&Path], flags: &[&str]) {
    let out = Command::new(python)
        .arg(script(name))
        .args(args)
        .args(flags)
        .output()
        .expect("start the Python interpreter");
    assert!(
        out.status.success(),
        "{name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Write row-major values of shape `[rows, example...]` as a float64 `.npy` file.
pub fn write_f64_npy(path: &Path, rows: usize, example: &[usize], values: &[f64]) {
    assert_eq!(rows * example.iter().product::<usize>(), values.len());
    let mut shape = vec![rows as u64];
    shape.extend(example.iter().map(|&d| d as u64));
    write_npy(path, &shape, values);
}

/// Write `data` (row-major, of shape `shape`) as an `.npy` file of its element type.
pub fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) {
    let f = std::io::BufWriter::new(std::fs::File::create(path).expect("create .npy"));
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(f)
        .begin_nd()
        .expect("begin .npy");
    w.extend(data.iter().copied()).expect("write .npy");
    w.finish().expect("finish .npy");
}

/// The values and shape of an `.npy` file of element type `T`.
pub fn read_npy<T: npyz::Deserialize>(path: &Path) -> (Vec<T>, Vec<u64>) {
    let bytes = std::fs::read(path).expect("read .npy");
    let npy = npyz::NpyFile::new(&bytes[..]).expect("an .npy file");
    let shape = npy.shape().to_vec();
    (npy.into_vec().expect("values of the element type"), shape)
}

/// Read a float64 `.npy` file written by `ort_logits.py`.
pub fn read_f64_npy(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).expect("read .npy");
    let npy = npyz::NpyFile::new(&bytes[..]).expect("an .npy file");
    npy.into_vec::<f64>().expect("float64 values")
}

/// onnxruntime's logits for every row (values of the model's input format), row-major.
pub fn ort_logits(
    python: &Path,
    model: &Path,
    rows: usize,
    dim: usize,
    values: &[f64],
    flags: &[&str],
) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (x, y) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
    write_f64_npy(&x, rows, &[dim], values);
    run_script(python, "ort_logits.py", &[model, &x, &y], flags);
    read_f64_npy(&y)
}

/// tract's logits (optimised plan) for float32 inputs, or why tract cannot run the model.
pub fn tract_logits(
    model: &Path,
    input_shape: &[usize],
    rows: usize,
    values: &[f64],
) -> Result<Vec<f64>, String> {
    let mut shape = vec![rows];
    shape.extend_from_slice(input_shape);
    let x: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    lipfp::onnx::reader::run_with_tract(model, &shape, &x)
}

/// Index of the largest value (the first on ties), as `numpy.argmax`.
pub fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (k, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = k;
        }
    }
    best
}

/// Read an `.npy` of inputs as `f64` rows (any float dtype).
pub fn read_inputs(path: &Path) -> (Vec<f64>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let rows = npy.shape()[0] as usize;
    let values = match npy.dtype() {
        npyz::DType::Plain(t) if t.size_field() == 4 => npy
            .into_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => npyz::NpyFile::new(&bytes[..])
            .unwrap()
            .into_vec::<f64>()
            .unwrap(),
    };
    (values, rows)
}

/// Export `src` with float16 weights and input (`model.half()`), into `dir`.
pub fn export_float16(python: &Path, src: &Path, dir: &Path) -> PathBuf {
    let dst = dir.join(format!(
        "{}-float16.onnx",
        src.parent().unwrap().file_name().unwrap().to_string_lossy()
    ));
    run_script(python, "export_float16.py", &[src, &dst], &[]);
    dst
}

/// An embedded example: its model, inputs as `f64` and row count.
pub fn example(name: &str) -> (PathBuf, Vec<f64>, usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let (x, rows) = read_inputs(&dir.join("x_test.npy"));
    (dir.join("model.onnx"), x, rows)
}
