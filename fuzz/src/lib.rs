//! Entry points of the fuzz targets: one untrusted input fed to lipfp's readers the way the
//! command line reads it.
//!
//! The cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`, nightly) call these functions with
//! libFuzzer's inputs; the stable test suite includes this file as a module
//! (`tests/fuzz_smoke.rs`) and calls the same functions with mutated seed files, so CI exercises
//! exactly what the fuzzers run.
//!
//! Every entry point checks what the project promises for user data: no panic, no abort, and an
//! error is a diagnostic that starts with the path of the file at fault. Results that load are
//! checked against the invariants the rest of lipfp relies on (a loaded network is a chain of
//! dense layers of matching widths with finite weights, a policy has uniquely named gates with
//! thresholds in range, a merged certificate file covers every point once, and no report line
//! can start a GitHub workflow command). A violated check panics, which libFuzzer reports as a
//! crash.
//!
//! The readers take paths, so each input is written to a per-process scratch directory
//! (under `/dev/shm` when it exists: a tmpfs keeps the round trip cheap) and read from there.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use lipfp::arith::format::Format;
use lipfp::bounds::certify::Mode;
use lipfp::engine::data::{self, InputStream};
use lipfp::engine::run;
use lipfp::error::LipfpError;
use lipfp::onnx::model::{self, Activation, AffineStep, Dense, DenseNet, ElementOp};
use lipfp::policy::{Policy, Radius};
use lipfp::progress::Progress;
use lipfp::report::certificates;
use lipfp::report::{self, Report};

/// Classes of the network the label reader checks labels against.
pub const LABEL_CLASSES: usize = 10;

/// Largest per-example size for which the `.npy` entry point builds a network matching the
/// file's declared shape (larger shapes are checked against a 64-feature network).
const MAX_MATCHED_FEATURES: u64 = 1 << 16;

/// A private directory the entry points write their inputs to, removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A new directory `lipfp-fuzz-<pid>-<k>` under `/dev/shm` (or the system temporary
    /// directory when `/dev/shm` does not exist).
    pub fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("lipfp-fuzz-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Scratch { dir }
    }

    /// Write `bytes` to `name` in the scratch directory and return its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, bytes).expect("write a scratch file");
        p
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Check that `e` is a diagnostic about one of `paths` (its text starts with the path) and
/// return the text.
fn named(e: &LipfpError, paths: &[&Path]) -> String {
    let text = e.to_string();
    assert!(
        paths
            .iter()
            .any(|p| text.starts_with(&p.display().to_string())),
        "the error does not name the file ({paths:?}): {text}"
    );
    text
}

/// The first error of an entry point, kept while the remaining readers still run.
#[derive(Default)]
struct FirstError(Option<String>);

impl FirstError {
    fn note(&mut self, text: String) {
        self.0.get_or_insert(text);
    }

    fn result(self) -> Result<(), String> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The invariants every loaded network satisfies (the certifier indexes by them).
fn check_net(net: &DenseNet, format: Format) {
    assert!(!net.layers.is_empty(), "a loaded network has no layer");
    assert_eq!(net.format, format);
    assert!(
        net.classes() >= 2,
        "a classifier with {} classes",
        net.classes()
    );
    let features: usize = net.input_shape.iter().product();
    assert_eq!(net.input_dim(), features, "input dimension vs input shape");
    for (k, l) in net.layers.iter().enumerate() {
        if let Some(step) = &l.affine {
            check_step(step, k);
        } else {
            assert_eq!(l.b.len(), l.m(), "layer {k}: bias length");
        }
        if k > 0 {
            assert_eq!(l.n(), net.layers[k - 1].m(), "layer {k}: input width");
        }
        assert!(
            l.w.iter().chain(&l.b).all(|x| x.is_finite()),
            "layer {k}: a non-finite weight was accepted"
        );
        assert_eq!(l.nodes.len(), l.ops.len(), "layer {k}: nodes vs ops");
    }
    assert!(
        matches!(net.layers.last().map(|l| l.act), Some(Activation::Identity)),
        "the output layer has a ReLU"
    );
    assert_eq!(net.hash().len(), 64);
}

/// An affine step's constants: one finite value per feature, no zero divisor.
fn check_step(step: &AffineStep, k: usize) {
    for op in &step.ops {
        let constants: Vec<&Vec<f64>> = match op {
            ElementOp::Add(c) | ElementOp::Mul(c) | ElementOp::Div(c) => vec![c],
            ElementOp::Neg => vec![],
            ElementOp::BatchNorm {
                scale,
                bias,
                mean,
                var,
                ..
            } => vec![scale, bias, mean, var],
        };
        for c in constants {
            assert_eq!(c.len(), step.width, "layer {k}: step constant length");
            assert!(
                c.iter().all(|x| x.is_finite()),
                "layer {k}: non-finite step constant"
            );
        }
        if let ElementOp::Div(c) = op {
            assert!(
                c.iter().all(|&x| x != 0.0),
                "layer {k}: division by zero accepted"
            );
        }
    }
}

/// Networks with more weights than this are loaded but not certified (the fuzzer's inputs are
/// far smaller; the bound keeps one input's run time small whatever it declares).
const MAX_CERTIFIED_WEIGHTS: usize = 1 << 16;

/// Certify three points (zeros, ones, alternating halves: exact in every format) of a loaded
/// network in every mode, the way `lipfp certify` does after loading: norms, forward passes
/// (deployment format and float64 reference) and certificates, then `best` again with the lazy
/// reference pass, which must give the same verdicts. The model file is untrusted, so nothing
/// computed from its weights may panic either.
fn certify_loaded(net: DenseNet, ftz: bool) {
    let weights: usize = net.layers.iter().map(|l| l.w.len()).sum();
    if weights > MAX_CERTIFIED_WEIGHTS {
        return;
    }
    let dim = net.input_dim();
    let rows = 3;
    let mut values = vec![0.0; dim];
    values.extend(std::iter::repeat_n(1.0, dim));
    values.extend((0..dim).map(|k| if k % 2 == 0 { 0.5 } else { -0.5 }));
    let inputs = data::Inputs {
        path: PathBuf::from("x.npy"),
        n: rows,
        dim,
        values,
        converted_changed: 0,
        dtype: "<f4".into(),
    };
    let classes = net.classes();
    let labels: Vec<usize> = (0..rows).map(|k| k % classes).collect();
    let radius = Radius::parse_decimal("0.1").expect("a valid radius");
    let prepare = |plan: run::ReferencePlan| {
        let spec = run::SubjectSpec {
            model: net.path.clone(),
            format: Some(net.format),
            accumulate: None,
            ftz,
            runtime: None,
            inputs: inputs.path.clone(),
            labels: None,
            gram_iterations: 4,
            reference: plan,
            shard: None,
            decision: lipfp::policy::Decision::Argmax,
            label_column: None,
            ball: Default::default(),
        };
        let labels = Some(labels.clone());
        let progress = Progress::silent();
        run::prepare_loaded(
            &spec,
            net.clone(),
            &inputs,
            labels,
            Vec::new(),
            (0, rows),
            &progress,
        )
    };
    let Ok(subject) = prepare(run::ReferencePlan::Every { products: true }) else {
        return;
    };
    let Ok(outcome) = run::certify(&subject, &radius, &Mode::ALL) else {
        return;
    };
    assert_eq!(outcome.modes.len(), Mode::ALL.len());
    for m in &outcome.modes {
        assert_eq!(m.verdicts.len(), rows);
        assert!(m.certified <= rows);
    }
    // `best` with the reference only where standard does not decide: the same verdicts
    let lazy = prepare(run::ReferencePlan::for_run(&[Mode::Best], &radius, None))
        .expect("prepares as it did with the full reference pass");
    let lazy = run::certify(&lazy, &radius, &[Mode::Best]).expect("certifies as the full pass did");
    if let (Some(l), Some(f)) = (lazy.mode(Mode::Best), outcome.mode(Mode::Best)) {
        assert_eq!(l.verdicts, f.verdicts, "lazy and full best differ");
        assert_eq!(
            l.refusal_of, f.refusal_of,
            "lazy and full best refuse differently"
        );
    }
}

/// An ONNX model file: the stored format (`model::stored_format`), then the model loaded in it
/// (float32 when there is none), with flush-to-zero when the input's length is odd (both sets
/// of constants get exercised), and certified on three points in every mode; a model that loads
/// is loaded and certified again as float16 with flush-to-zero (conversion overflow, subnormal
/// weights, vacuous layers). `Ok` when the first load succeeded, else the first error.
pub fn onnx(scratch: &Scratch, bytes: &[u8]) -> Result<(), String> {
    let path = scratch.write("model.onnx", bytes);
    let paths = [path.as_path()];
    let mut first = FirstError::default();
    let format = match model::stored_format(&path) {
        Ok(f) => f,
        Err(e) => {
            first.note(named(&e, &paths));
            Format::Float32
        }
    };
    let ftz = bytes.len() % 2 == 1;
    match model::load(&path, format, ftz) {
        Ok(net) => {
            check_net(&net, format);
            certify_loaded(net, ftz);
            match model::load(&path, Format::Float16, true) {
                Ok(net) => {
                    check_net(&net, Format::Float16);
                    certify_loaded(net, true);
                }
                Err(e) => {
                    named(&e, &paths);
                }
            }
            Ok(())
        }
        Err(e) => {
            first.note(named(&e, &paths));
            first.result()
        }
    }
}

/// The shape an `.npy` header declares, by a plain scan for `'shape': (...)` (used only to
/// choose the counts the readers are asked for, so that mutated files reach their value checks;
/// the readers parse the header themselves).
pub fn declared_shape(bytes: &[u8]) -> Option<Vec<u64>> {
    let header = &bytes[..bytes.len().min(4096)];
    let key = header.windows(8).position(|w| w == b"'shape':")?;
    let rest = &header[key + 8..];
    let open = rest.iter().position(|&b| b != b' ')?;
    if rest[open] != b'(' {
        return None;
    }
    let close = rest[open..].iter().position(|&b| b == b')')? + open;
    let inside = std::str::from_utf8(&rest[open + 1..close]).ok()?;
    inside
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// A network whose input has the per-example shape `shape` (its weights are never used: the
/// `.npy` readers look at the input shape and width only).
fn input_net(shape: Vec<usize>) -> DenseNet {
    let n: usize = shape.iter().product();
    DenseNet {
        layers: vec![Dense {
            w: ndarray::Array2::zeros((2, n)),
            b: vec![0.0; 2],
            act: Activation::Identity,
            nodes: vec!["fc".into()],
            ops: vec!["Gemm".into()],
            casts: vec![],
            affine: None,
        }],
        input_name: "x".into(),
        input_shape: shape,
        head: Vec::new(),
        format: Format::Float32,
        converted_changed: 0,
        path: PathBuf::from("model.onnx"),
    }
}

/// An `.npy` file read as every kind of data lipfp reads: inputs (whole, as float32; and
/// streamed as float16 the way a shard reads them: one row skipped, then three rows at a time),
/// labels and per-instance radii. The counts the readers are asked for come from the declared
/// shape, so that a mutated file still reaches the per-value checks. `Ok` when some reader
/// accepted the file, else the first reader's error.
pub fn npy(scratch: &Scratch, bytes: &[u8]) -> Result<(), String> {
    let path = scratch.write("data.npy", bytes);
    let paths = [path.as_path()];
    let mut first = FirstError::default();
    let mut accepted = false;
    let shape = declared_shape(bytes).unwrap_or_default();
    let n = shape
        .first()
        .and_then(|&n| usize::try_from(n).ok())
        .unwrap_or(1);
    let example: Vec<usize> = shape.iter().skip(1).map(|&d| d as usize).collect();
    let matched = shape.len() >= 2
        && shape[1..].iter().all(|&d| d > 0)
        && shape[1..]
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .is_some_and(|p| p <= MAX_MATCHED_FEATURES);
    let net = input_net(if matched { example } else { vec![64] });

    match data::load_inputs(&path, &net, Format::Float32) {
        Ok(inputs) => {
            assert_eq!(inputs.dim, net.input_dim());
            assert_eq!(inputs.values.len(), inputs.n * inputs.dim);
            assert!(inputs.values.iter().all(|v| v.is_finite()));
            accepted = true;
        }
        Err(e) => first.note(named(&e, &paths)),
    }
    match InputStream::open(&path, None, &net, Format::Float16) {
        Ok(mut s) => {
            let streamed = (|| {
                if s.n > 0 {
                    s.skip(1)?;
                }
                while s.position() < s.n {
                    let before = s.position();
                    let rows = s.next_rows(3)?;
                    assert_eq!(rows.len(), (s.position() - before) * s.dim);
                    assert!(s.position() > before, "the stream makes no progress");
                    assert!(rows.iter().all(|v| v.is_finite()));
                }
                Ok::<(), LipfpError>(())
            })();
            if let Err(e) = streamed {
                named(&e, &paths);
            }
        }
        Err(e) => {
            named(&e, &paths);
        }
    }
    match data::load_labels(&path, None, n, LABEL_CLASSES) {
        Ok(labels) => {
            assert_eq!(labels.len(), n);
            assert!(labels.iter().all(|&y| y < LABEL_CLASSES));
            accepted = true;
        }
        Err(e) => first.note(named(&e, &paths)),
    }
    match data::load_epsilons(&path, n) {
        Ok(radii) => {
            assert_eq!(radii.len(), n);
            assert!(radii.iter().all(|r| r.is_finite() && *r >= 0.0));
            accepted = true;
        }
        Err(e) => first.note(named(&e, &paths)),
    }
    if accepted {
        Ok(())
    } else {
        first.result()
    }
}

/// A `.npz` archive read as a test set: its array `x` as inputs (whole, and streamed as a shard
/// reads them) and its array `y` as labels, the counts taken from the first member's declared
/// shape. `Ok` when some reader accepted the archive, else the first reader's error.
pub fn npz(scratch: &Scratch, bytes: &[u8]) -> Result<(), String> {
    let path = scratch.write("data.npz", bytes);
    let paths = [path.as_path()];
    let mut first = FirstError::default();
    let mut accepted = false;
    for features in [64usize, 30] {
        let net = input_net(vec![features]);
        match data::load_inputs(&path, &net, Format::Float32) {
            Ok(inputs) => {
                assert_eq!(inputs.values.len(), inputs.n * inputs.dim);
                assert!(inputs.values.iter().all(|v| v.is_finite()));
                accepted = true;
                match data::load_labels(&path, None, inputs.n, LABEL_CLASSES) {
                    Ok(labels) => assert!(labels.iter().all(|&y| y < LABEL_CLASSES)),
                    Err(e) => first.note(named(&e, &paths)),
                }
            }
            Err(e) => first.note(named(&e, &paths)),
        }
        if let Ok(mut s) = InputStream::open(&path, None, &net, Format::Float16) {
            while s.position() < s.n {
                let before = s.position();
                match s.next_rows(3) {
                    Ok(rows) => assert_eq!(rows.len(), (s.position() - before) * s.dim),
                    Err(e) => {
                        named(&e, &paths);
                        break;
                    }
                }
            }
        }
    }
    if let Err(e) = data::load_epsilons(&path, 1) {
        named(&e, &paths);
    }
    if accepted {
        Ok(())
    } else {
        first.result()
    }
}

/// A CSV file read as a test set: inputs with the label column `label` (whole, and streamed
/// as a shard reads them) and without one, and its labels. The model's input width is the
/// header's column count less one. `Ok` when some reader accepted the file, else the first
/// reader's error.
pub fn csv(scratch: &Scratch, bytes: &[u8]) -> Result<(), String> {
    let path = scratch.write("data.csv", bytes);
    let paths = [path.as_path()];
    let mut first = FirstError::default();
    let mut accepted = false;
    let columns = bytes
        .split(|&b| b == b'\n')
        .next()
        .map_or(1, |h| h.iter().filter(|&&b| b == b',').count() + 1);
    let net = input_net(vec![columns.saturating_sub(1).clamp(1, 4096)]);
    match InputStream::open(&path, Some("label"), &net, Format::Float32) {
        Ok(mut s) => {
            let n = s.n;
            match s.next_rows(n) {
                Ok(rows) => {
                    assert_eq!(rows.len(), n * s.dim);
                    assert!(rows.iter().all(|v| v.is_finite()));
                    accepted = true;
                }
                Err(e) => first.note(named(&e, &paths)),
            }
            match data::load_labels(&path, Some("label"), n, LABEL_CLASSES) {
                Ok(labels) => assert!(labels.iter().all(|&y| y < LABEL_CLASSES)),
                Err(e) => first.note(named(&e, &paths)),
            }
        }
        Err(e) => first.note(named(&e, &paths)),
    }
    let all = input_net(vec![columns.clamp(1, 4096)]);
    match InputStream::open(&path, None, &all, Format::Float16) {
        Ok(mut s) => {
            let mut complete = true;
            while s.position() < s.n {
                let before = s.position();
                match s.next_rows(2) {
                    Ok(rows) => assert_eq!(rows.len(), (s.position() - before) * s.dim),
                    Err(e) => {
                        first.note(named(&e, &paths));
                        complete = false;
                        break;
                    }
                }
            }
            accepted |= complete;
        }
        Err(e) => first.note(named(&e, &paths)),
    }
    if accepted {
        Ok(())
    } else {
        first.result()
    }
}

/// A policy file: its text (UTF-8, as `Policy::load` requires) validated by `Policy::parse`.
/// Nothing is read from the paths it names.
pub fn policy(bytes: &[u8]) -> Result<(), String> {
    let path = Path::new("fuzz/lipfp.toml");
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err("not UTF-8 (refused before parsing)".into());
    };
    match Policy::parse(path, text) {
        Ok(p) => {
            assert!(!p.gates.is_empty(), "a policy without gates was accepted");
            let lines = text.matches('\n').count() + 1;
            for (k, g) in p.gates.iter().enumerate() {
                assert!(!g.name.trim().is_empty(), "an empty gate name was accepted");
                assert!(!g.name.chars().any(char::is_control), "{:?}", g.name);
                assert!(
                    p.gates[..k].iter().all(|o| o.name != g.name),
                    "duplicate gate name {:?}",
                    g.name
                );
                assert!((1..=lines).contains(&g.line), "gate line {}", g.line);
                assert!(!g.modes.is_empty());
                assert!((1..=64).contains(&g.target.gram_iterations));
                for (key, _, v) in g.thresholds.by_key() {
                    let range = if key.ends_with("_significance") {
                        0.0..=1.0
                    } else {
                        0.0..=100.0
                    };
                    assert!(range.contains(&v), "threshold {key} = {v} accepted");
                }
                if let Radius::Uniform { up, .. } = g.radius {
                    assert!(up >= 0.0 && !up.is_nan(), "radius {up}");
                }
            }
            Ok(())
        }
        Err(e) => Err(named(&e, &[path])),
    }
}

/// Render every report of merged gates and check that the JUnit report holds only characters
/// XML 1.0 allows and that no console line, and no annotation, can be read as a workflow
/// command other than lipfp's own `::error`.
fn render(merged: &[certificates::MergedGate]) {
    let gates = merged.iter().map(|m| m.judge(None)).collect();
    let r = Report {
        lipfp_version: "fuzz".into(),
        policy: Some("lipfp.toml".into()),
        gates,
    };
    let _ = report::json::render(&r);
    let junit = report::junit::render(&r, "fuzz");
    let forbidden = |c: char| {
        (c.is_control() && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{FFFE}' || c == '\u{FFFF}'
    };
    assert!(
        !junit.contains(forbidden),
        "the JUnit report holds a character XML 1.0 forbids"
    );
    let _ = report::github::step_summary(&r);
    let _ = report::github::outputs(&r);
    for verbose in [false, true] {
        for line in report::console::render(&r, verbose).lines() {
            assert!(
                !line.trim_start().starts_with("::"),
                "console line {line:?}"
            );
        }
    }
    for a in report::github::annotations(&r, "lipfp.toml") {
        assert!(!a.contains(['\n', '\r']), "annotation {a:?}");
        assert!(a.starts_with("::error ") || a.starts_with("::warning::"));
    }
}

/// A certificate file: read (framing checked while reading, then decoded), merged on its own
/// and rendered into every report; then merged with a copy of itself, which must be refused
/// (every point would be covered twice). A file whose gates are several shards of one gate (two
/// shard files concatenated are one valid protobuf message) exercises the shard merge.
pub fn certificates(scratch: &Scratch, bytes: &[u8]) -> Result<(), String> {
    let path = scratch.write("c.pb", bytes);
    let file = certificates::read(&path).map_err(|e| named(&e, &[&path]))?;
    let copy = scratch.write("copy.pb", bytes);
    let result = match certificates::merge(&[(path.clone(), file.clone())]) {
        Ok(merged) => {
            assert_eq!(merged.len(), {
                let mut names: Vec<&str> = file.gates.iter().map(|g| g.gate.as_str()).collect();
                names.sort_unstable();
                names.dedup();
                names.len()
            });
            for m in &merged {
                assert_eq!(
                    m.outcome.correct.is_some(),
                    m.outcome.modes[0].vra.is_some()
                );
                for mo in &m.outcome.modes {
                    assert_eq!(mo.verdicts.len(), m.outcome.n);
                    assert!(mo.certified <= m.outcome.n);
                }
            }
            render(&merged);
            Ok(())
        }
        Err(e) => Err(named(&e, &[&path])),
    };
    let twice = certificates::merge(&[(path.clone(), file.clone()), (copy.clone(), file.clone())]);
    match twice {
        Ok(merged) => assert!(
            merged.is_empty(),
            "a file merged with a copy of itself covers its points twice"
        ),
        Err(e) => {
            named(&e, &[&path, &copy]);
        }
    }
    result
}

/// A VNN-LIB property: its text (UTF-8) parsed by `vnnlib::parse`. What parses is a non-empty
/// box (lower ends at most upper ends, one per declared input) and disjuncts over declared
/// outputs; a refusal names a line of the file.
pub fn vnnlib(bytes: &[u8]) -> Result<(), String> {
    use lipfp::policy::vnnlib;
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err("not UTF-8 (refused before parsing)".into());
    };
    match vnnlib::parse(text) {
        Ok(p) => {
            assert!(!p.boxes.is_empty());
            for b in &p.boxes {
                assert_eq!((b.lower.len(), b.upper.len()), (p.inputs, p.inputs));
                assert!(b.lower.iter().zip(&b.upper).all(|(l, u)| l <= u));
            }
            assert!(!p.disjuncts.is_empty() && p.disjuncts.len() <= vnnlib::MAX_DISJUNCTS);
            for k in p.disjuncts.iter().flatten() {
                assert!(k.coef.iter().all(|(j, a)| *j < p.outputs && *a != 0));
            }
            Ok(())
        }
        Err(e) => {
            assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}");
            Err(e.to_string())
        }
    }
}
