//! End-to-end tests of the `lipfp` binary: `check` and `certify` on small models built here,
//! the exit-code contract (0 pass, 1 a gate failed, 2 usage/policy/model/data error), the error
//! messages (they name the file, key, node or index at fault) and the JSON report.
//!
//! The test model is `x [N, 4] -> Gemm(8) -> Relu -> Gemm(3)` with
//! `W1 = [I_4; 0.5 I_4]`, `W2 = [e_0; e_1; e_2]` (rows of the 8-wide identity) and zero biases,
//! so the logit of class `c` is exactly `x_c`. Point `i` of class `k = i % 3` has `x_k = 1` and
//! jitter in `[0, 0.3)` elsewhere (float16 values, so every input dtype holds the same points):
//! the predicted class is `k`, every margin is above `0.7` and the margin Lipschitz constants
//! are `sqrt(2) * sqrt(1.25) < 1.6`. Hence at radius `0.001` the real check certifies every
//! point and every sound mode (whose floating-point terms are ~1e-6 here) does too; at radius
//! `100` nothing is certified; at `0.53` exactly the points whose margin exceeds
//! `sqrt(2.5) * 0.53` (computed in the test). Two labels are deliberately wrong, so the
//! accuracy is 28/30 and the VRA is at most 28. Whatever the radius, every report must satisfy
//! [`assert_consistent`] (sound modes under the real ceiling, `best` above the other sound
//! modes, VRA under certified, counts adding up).
//!
//! Norms are recomputed on every run; nothing outside the temporary directory is written.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::onnx_builder::*;
use npyz::WriterBuilder;
use serde_json::Value;

/// Number of test points.
const N: usize = 30;
/// Classes of the test model.
const CLASSES: usize = 3;
/// Input width of the test model.
const WIDTH: usize = 4;
/// Indices whose label is deliberately wrong.
const MISLABELLED: [usize; 2] = [4, 17];

// ---------------------------------------------------------------------------------------------
// running the binary

/// The outcome of one run of the binary.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "expected exit code {code}, got {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Assert an input error (exit 2) whose `lipfp: error:` line contains every needle.
    fn assert_error(&self, needles: &[&str]) -> &Self {
        self.assert_code(2);
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr does not contain {n:?}:\n{}",
                self.stderr
            );
        }
        self
    }
}

fn run_cmd(mut cmd: Command) -> Out {
    let out = cmd.output().expect("run the lipfp binary");
    Out {
        code: out.status.code().expect("lipfp exited with a code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn lipfp<I, S>(args: I) -> Out
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.args(args);
    run_cmd(cmd)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the JSON report {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the JSON report parses")
}

/// The single gate of a `certify` report.
fn only_gate(report: &Value) -> &Value {
    let gates = report["gates"].as_array().expect("gates is an array");
    assert_eq!(gates.len(), 1, "{report:#}");
    &gates[0]
}

fn gate<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["gates"]
        .as_array()
        .expect("gates is an array")
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no gate `{name}` in {report:#}"))
}

fn uint(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{v} is not an unsigned integer"))
}

fn certified(g: &Value, mode: &str) -> u64 {
    uint(&g["modes"][mode]["certified"])
}

/// Figures every report must satisfy, whatever the radius: counts within `n`, VRA within the
/// certified points, standard within real, percentages consistent, real labelled unsound.
fn assert_consistent(g: &Value) {
    let n = uint(&g["n"]);
    let modes = g["modes"].as_object().expect("modes is an object");
    assert!(
        modes.contains_key("real"),
        "the real ceiling is always reported: {g:#}"
    );
    assert_eq!(g["modes"]["real"]["sound"], false, "{g:#}");
    for (name, m) in modes {
        let c = uint(&m["certified"]);
        assert!(c <= n, "{name}: {g:#}");
        let pct = m["certified_pct"].as_f64().unwrap();
        assert!(
            (pct - 100.0 * c as f64 / n as f64).abs() < 1e-3,
            "{name}: {g:#}"
        );
        if !m["vra"].is_null() {
            assert!(uint(&m["vra"]) <= c, "{name}: vra > certified: {g:#}");
            let vpct = m["vra_pct"].as_f64().unwrap();
            assert!((vpct - 100.0 * uint(&m["vra"]) as f64 / n as f64).abs() < 1e-3);
        } else {
            assert!(m["vra_pct"].is_null(), "{g:#}");
        }
        let refused: u64 = m["refusals"]
            .as_object()
            .expect("refusals is an object")
            .values()
            .map(uint)
            .sum();
        assert_eq!(
            c + refused,
            n,
            "{name}: every point is certified or refused: {g:#}"
        );
    }
    // every Lipschitz certificate is bounded by the real ceiling (it certifies
    // `c_j - L eps - b_j > 0` with `c_j - b_j <= m_hat(x)`), and `best` combines the bounds of all
    // the others; `local`, and `best` where it consulted local bounds (`best_local`, the default),
    // are not Lipschitz certificates and may exceed it (docs/modes.md)
    let real_vra = &g["modes"]["real"]["vra"];
    assert!(g["modes"]["real"]["conservatism_ratio"].is_null(), "{g:#}");
    for (name, m) in modes.iter().filter(|(k, _)| k.as_str() != "real") {
        assert!(
            SOUND_MODES.contains(&name.as_str()),
            "unexpected mode {name}: {g:#}"
        );
        assert_eq!(m["sound"], true, "{name}: {g:#}");
        let consulted_local = name == "local"
            || (name == "best"
                && g["notes"]
                    .to_string()
                    .contains("best consulted local bounds"));
        if !consulted_local {
            assert!(
                uint(&m["certified"]) <= certified(g, "real"),
                "{name} certified more than the real ceiling: {g:#}"
            );
            if !m["vra"].is_null() {
                assert!(uint(&m["vra"]) <= uint(real_vra), "{name}: {g:#}");
            }
        }
        if let Some(best) = modes.get("best") {
            assert!(
                uint(&best["certified"]) >= uint(&m["certified"]),
                "best certified less than {name}: {g:#}"
            );
        }
    }
}

/// The sound modes, in report order (`lipfp certify` computes all of them by default).
const SOUND_MODES: [&str; 5] = ["standard", "hybrid", "measured", "float64-centre", "best"];

/// Every mode.
const ALL_MODES: [&str; 6] = [
    "real",
    "standard",
    "hybrid",
    "measured",
    "float64-centre",
    "best",
];

// ---------------------------------------------------------------------------------------------
// test data

/// Write an `.npy` array of `shape` in C order with the type's default dtype.
fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) {
    assert_eq!(shape.iter().product::<u64>() as usize, data.len());
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

/// Write an `.npy` array with an explicit dtype (e.g. `">f4"`) and order; `data` is given in
/// that order.
fn write_npy_as<T: npyz::Serialize + Copy>(
    path: &Path,
    dtype: &str,
    order: npyz::Order,
    shape: &[u64],
    data: &[T],
) {
    let dtype = npyz::DType::Plain(dtype.parse::<npyz::TypeStr>().expect("a dtype string"));
    let f = std::io::BufWriter::new(std::fs::File::create(path).expect("create .npy"));
    let mut w = npyz::WriteOptions::new()
        .dtype(dtype)
        .order(order)
        .shape(shape)
        .writer(f)
        .begin_nd()
        .expect("begin .npy");
    w.extend(data.iter().copied()).expect("write .npy");
    w.finish().expect("finish .npy");
}

/// A `x [N, n_in] -> Gemm -> act -> Gemm -> logits` model; `w1` is `[hidden, n_in]` and `w2`
/// `[classes, hidden]`, row-major (PyTorch's Linear layout, `transB = 1`).
fn two_layer(
    n_in: usize,
    hidden: usize,
    classes: usize,
    w1: &[f32],
    w2: &[f32],
    act: &str,
) -> ModelBuilder {
    let mut b = ModelBuilder::new();
    b.input_f32("input", &[n_in])
        .output_f32("logits", classes)
        .init_f32("fc1.weight", &[hidden, n_in], w1)
        .init_f32("fc1.bias", &[hidden], &vec![0.0; hidden])
        .init_f32("fc2.weight", &[classes, hidden], w2)
        .init_f32("fc2.bias", &[classes], &vec![0.0; classes])
        .node(
            "Gemm",
            "/fc1/Gemm",
            &["input", "fc1.weight", "fc1.bias"],
            &["/fc1/Gemm_output_0"],
            vec![attr_int("transB", 1)],
        )
        .node(
            act,
            &format!("/act/{act}"),
            &["/fc1/Gemm_output_0"],
            &["/act/output_0"],
            vec![],
        )
        .node(
            "Gemm",
            "/fc2/Gemm",
            &["/act/output_0", "fc2.weight", "fc2.bias"],
            &["logits"],
            vec![attr_int("transB", 1)],
        );
    b
}

/// `W1 = [I_4; 0.5 I_4]` (8 x 4).
fn w1() -> Vec<f32> {
    let mut w = vec![0.0f32; 8 * WIDTH];
    for j in 0..WIDTH {
        w[j * WIDTH + j] = 1.0;
        w[(WIDTH + j) * WIDTH + j] = 0.5;
    }
    w
}

/// `W2 = [e_0; e_1; e_2]` (3 x 8): the logit of class `c` is hidden unit `c`.
fn w2() -> Vec<f32> {
    let mut w = vec![0.0f32; CLASSES * 8];
    for c in 0..CLASSES {
        w[c * 8 + c] = 1.0;
    }
    w
}

fn test_model() -> ModelBuilder {
    two_layer(WIDTH, 8, CLASSES, &w1(), &w2(), "Relu")
}

/// The test points as float16 values: point `i` has `x_{i % 3} = 1` and jitter in `[0, 0.3)`.
fn points() -> Vec<half::f16> {
    let mut rng = Lcg::new(7);
    let mut x = Vec::with_capacity(N * WIDTH);
    for i in 0..N {
        for j in 0..WIDTH {
            let v = if j == i % CLASSES {
                1.0
            } else {
                0.3 * rng.unit_f64() as f32
            };
            x.push(half::f16::from_f32(v));
        }
    }
    x
}

/// Labels: the true class, except at [`MISLABELLED`].
fn labels() -> Vec<i64> {
    (0..N)
        .map(|i| {
            let k = (i % CLASSES) as i64;
            if MISLABELLED.contains(&i) {
                (k + 1) % CLASSES as i64
            } else {
                k
            }
        })
        .collect()
}

fn x_f32() -> Vec<f32> {
    points().iter().map(|h| h.to_f32()).collect()
}

fn x_f64() -> Vec<f64> {
    points().iter().map(|h| h.to_f64()).collect()
}

/// Percentage rounded to 4 decimals, as the report writes it.
fn pct4(k: usize, n: usize) -> f64 {
    ((100.0 * k as f64 / n as f64) * 1e4).round() / 1e4
}

/// A temporary directory holding the test model (`model.onnx`), float32 inputs (`x.npy`),
/// int64 labels (`y.npy`).
struct Fx {
    dir: tempfile::TempDir,
}

impl Fx {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        test_model().write(dir.path(), "model.onnx");
        write_npy(
            &dir.path().join("x.npy"),
            &[N as u64, WIDTH as u64],
            &x_f32(),
        );
        write_npy(&dir.path().join("y.npy"), &[N as u64], &labels());
        Fx { dir }
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lipfp -q certify <args>`.
    fn certify<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
        let mut v: Vec<&OsStr> = vec![OsStr::new("-q"), OsStr::new("certify")];
        v.extend(args.iter().map(|a| a.as_ref()));
        lipfp(v)
    }

    /// `certify --model model.onnx --inputs <inputs> [--labels <labels>] <args> --json out`.
    fn certify_json(&self, inputs: &str, labels: Option<&str>, args: &[&str], json: &str) -> Out {
        let mut v: Vec<PathBuf> = vec!["--model".into(), self.p("model.onnx")];
        v.push("--inputs".into());
        v.push(self.p(inputs));
        if let Some(l) = labels {
            v.push("--labels".into());
            v.push(self.p(l));
        }
        v.extend(args.iter().map(PathBuf::from));
        v.push("--json".into());
        v.push(self.p(json));
        self.certify(&v)
    }

    /// Write `policy` as `lipfp.toml` and run `check --config lipfp.toml --json check.json`.
    fn check(&self, policy: &str) -> Out {
        std::fs::write(self.p("lipfp.toml"), policy).expect("write policy");
        lipfp([
            OsStr::new("-q"),
            OsStr::new("check"),
            OsStr::new("--config"),
            self.p("lipfp.toml").as_os_str(),
            OsStr::new("--json"),
            self.p("check.json").as_os_str(),
        ])
    }

    fn check_json(&self) -> Value {
        read_json(&self.p("check.json"))
    }
}

/// The policy header for the fixture's files (paths relative to the policy).
const HEAD: &str = r#"
[model]
path = "model.onnx"
format = "float32"

[data]
inputs = "x.npy"
labels = "y.npy"
"#;

/// A policy with the fixture's files and `gates` appended.
fn policy(gates: &str) -> String {
    format!("{HEAD}\n{gates}")
}

// ---------------------------------------------------------------------------------------------
// 1, 2, 4: check verdicts

#[test]
fn check_passing_policy_exits_0() {
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "small"
epsilon = "0.001"
mode = "standard"
min_accuracy_pct = 50.0
min_certified_pct = 50.0
min_vra_pct = 50.0
max_fp_cost_pp = 5.0

[[gate]]
name = "medium"
epsilon = "0.5"

[[gate]]
name = "real-ceiling"
epsilon = "0.001"
mode = "real"
min_certified_pct = 100
"#,
    ));
    out.assert_code(0);
    assert!(out.stdout.contains("PASS"), "{}", out.stdout);
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    let r = fx.check_json();
    assert!(r["lipfp_version"].is_string());
    assert!(
        r["policy"].as_str().unwrap().ends_with("lipfp.toml"),
        "{r:#}"
    );
    assert_eq!(r["gates"].as_array().unwrap().len(), 3);

    let g = gate(&r, "small");
    assert_consistent(g);
    assert_eq!(g["passed"], true, "{g:#}");
    assert_eq!(g["failures"].as_array().unwrap().len(), 0);
    assert_eq!(g["format"], "float32");
    assert_eq!(g["ftz"], false);
    assert_eq!(g["mode"], "standard");
    assert_eq!(g["epsilon"], "0.001");
    assert!(g["epsilons"].is_null());
    assert_eq!(uint(&g["n"]), N as u64);
    assert_eq!(uint(&g["gram_iterations"]), 12);
    assert_eq!(g["model_hash"].as_str().unwrap().len(), 64);
    // margins > 0.7 against Lipschitz constants < 1.6 at radius 0.001: everything certified
    assert_eq!(g["accuracy_pct"].as_f64().unwrap(), pct4(N - 2, N), "{g:#}");
    assert_eq!(certified(g, "real"), N as u64, "{g:#}");
    assert_eq!(certified(g, "standard"), N as u64, "{g:#}");
    assert_eq!(uint(&g["modes"]["standard"]["vra"]), (N - 2) as u64);
    assert_eq!(g["modes"]["standard"]["sound"], true);

    // a larger radius certifies no more points, in either mode
    let m = gate(&r, "medium");
    assert_consistent(m);
    assert!(m["passed"].is_null(), "{m:#}");
    for mode in ["real", "standard"] {
        assert!(certified(m, mode) <= certified(g, mode), "{mode}: {r:#}");
    }
    // the gates share the model: same hash
    assert_eq!(m["model_hash"], g["model_hash"]);

    let c = gate(&r, "real-ceiling");
    assert_consistent(c);
    assert_eq!(c["mode"], "real");
    assert_eq!(c["passed"], true);
    // a real gate computes only the real ceiling
    assert!(c["modes"].get("standard").is_none(), "{c:#}");
}

#[test]
fn check_failing_policy_exits_1_naming_the_threshold() {
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "huge"
epsilon = "100"
min_certified_pct = 100

[[gate]]
name = "fine"
epsilon = "0.001"
min_certified_pct = 90
"#,
    ));
    out.assert_code(1);
    assert!(out.stdout.contains("FAIL"), "{}", out.stdout);
    assert!(out.stdout.contains("min_certified_pct"), "{}", out.stdout);
    let r = fx.check_json();
    let g = gate(&r, "huge");
    assert_consistent(g);
    assert_eq!(g["passed"], false, "{g:#}");
    assert_eq!(g["epsilon"], "100");
    // margins <= 1 < 100 * sqrt(2) * ||W1||: nothing is certified
    assert_eq!(certified(g, "real"), 0, "{g:#}");
    assert_eq!(certified(g, "standard"), 0, "{g:#}");
    let failures = g["failures"].as_array().unwrap();
    assert!(!failures.is_empty(), "{g:#}");
    assert!(
        failures
            .iter()
            .any(|f| f.as_str().unwrap().contains("min_certified_pct")),
        "{g:#}"
    );
    // the other gate still passes and is reported
    assert_eq!(gate(&r, "fine")["passed"], true, "{r:#}");
}

#[test]
fn gate_without_thresholds_reports_and_passes() {
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "report-only"
epsilon = "100"
"#,
    ));
    out.assert_code(0);
    assert!(out.stdout.contains("REPORT"), "{}", out.stdout);
    let r = fx.check_json();
    let g = gate(&r, "report-only");
    assert_consistent(g);
    assert!(g["passed"].is_null(), "{g:#}");
    assert_eq!(g["failures"].as_array().unwrap().len(), 0);
}

#[test]
fn fp_cost_threshold_compares_standard_with_real() {
    // at "0.001" both modes certify every point (cost 0); at "100" neither does (cost 0):
    // max_fp_cost_pp = 0 passes in both cases, so the threshold is evaluated, not just parsed
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "a"
epsilon = "0.001"
max_fp_cost_pp = 0

[[gate]]
name = "b"
epsilon = "100"
max_fp_cost_pp = 0
"#,
    ));
    out.assert_code(0);
    let r = fx.check_json();
    for name in ["a", "b"] {
        let g = gate(&r, name);
        assert_eq!(g["passed"], true, "{g:#}");
        assert_eq!(certified(g, "real"), certified(g, "standard"), "{g:#}");
    }
}

#[test]
fn check_resolves_paths_against_the_policy_and_refuses_a_cache_section() {
    let fx = Fx::new();
    let gate = "\n[[gate]]\nname = \"g\"\nepsilon = \"0.001\"\n";
    std::fs::write(fx.p("lipfp.toml"), format!("{HEAD}{gate}")).unwrap();
    // run from another directory: the paths resolve against the policy file, not the cwd
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.current_dir(std::env::temp_dir())
        .arg("-q")
        .arg("check")
        .arg("--config")
        .arg(fx.p("lipfp.toml"));
    run_cmd(cmd).assert_code(0);
    // a policy may no longer point lipfp at norm bounds of the repository's choosing
    let text = format!("{HEAD}\n[cache]\ndir = \"policy-cache\"\n{gate}");
    fx.check(&text)
        .assert_error(&["lipfp.toml", "[cache]", "recomputes"]);
}

#[test]
fn gates_override_model_data_format_and_ftz() {
    let fx = Fx::new();
    write_wide(&fx);
    // the labels of the wide set are the true classes
    let yw: Vec<u8> = (0..N).map(|i| (i % CLASSES) as u8).collect();
    write_npy(&fx.p("yw.npy"), &[N as u64], &yw);
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "base"
epsilon = "0.001"
min_vra_pct = 90

[[gate]]
name = "f64"
epsilon = "0.001"
format = "float64"

[[gate]]
name = "ftz"
epsilon = "0.001"
ftz = true
mode = "best,standard"

[[gate]]
name = "wide-bf16"
model = "wide.onnx"
inputs = "xw.npy"
labels = "yw.npy"
format = "bfloat16"
epsilon = "0.001"
mode = "real"
min_vra_pct = 100

[[gate]]
name = "base-again"
epsilon = "100"
"#,
    ));
    out.assert_code(0);
    let r = fx.check_json();
    let names: Vec<&str> = r["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["base", "f64", "ftz", "wide-bf16", "base-again"],
        "gates in file order"
    );
    for name in &names {
        assert_consistent(gate(&r, name));
    }
    let (base, f64g, ftz, wide, again) = (
        gate(&r, "base"),
        gate(&r, "f64"),
        gate(&r, "ftz"),
        gate(&r, "wide-bf16"),
        gate(&r, "base-again"),
    );
    assert_eq!(base["format"], "float32");
    assert_eq!(f64g["format"], "float64");
    assert_eq!(ftz["ftz"], true);
    assert_eq!(base["ftz"], false);
    assert_eq!(wide["format"], "bfloat16");
    assert!(base["model"].as_str().unwrap().ends_with("model.onnx"));
    assert!(wide["model"].as_str().unwrap().ends_with("wide.onnx"));
    // the hash is of the converted network: the format changes it, flush-to-zero does not
    assert_ne!(f64g["model_hash"], base["model_hash"]);
    assert_eq!(ftz["model_hash"], base["model_hash"]);
    assert_eq!(again["model_hash"], base["model_hash"]);
    assert_ne!(wide["model_hash"], base["model_hash"]);
    // the wide gate used its own labels (every one correct) and its own format's vacuity
    assert_eq!(wide["accuracy_pct"].as_f64().unwrap(), 100.0, "{wide:#}");
    assert_eq!(wide["passed"], true, "{wide:#}");
    assert_eq!(certified(wide, "real"), N as u64);
    assert!(
        wide["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("n*u")),
        "{wide:#}"
    );
    // ... and that did not leak into the gates on the default target
    for g in [base, f64g, ftz, again] {
        assert_eq!(g["accuracy_pct"].as_f64().unwrap(), pct4(N - 2, N), "{g:#}");
        // only the statements of the execution model (and what it does not cover), where the
        // format came from and where the float64 reference ran
        assert!(
            g["notes"].as_array().unwrap().iter().all(|n| {
                let n = n.as_str().unwrap();
                n.starts_with("execution model:")
                    || n.starts_with("deployment format")
                    || n.starts_with("declared format")
                    || n.starts_with("float64 reference pass:")
                    || n.starts_with("no runtime declared:")
                    || n.starts_with("best consulted local bounds")
                    || n.starts_with("best: local bounds certified none")
            }),
            "{g:#}"
        );
    }
    assert_eq!(ftz["mode"], "best");
    assert_eq!(mode_keys(ftz), ["best", "real", "standard"]);
    assert_eq!(certified(again, "standard"), 0);

    // a gate may bring the labels [data] lacks, enabling its label thresholds
    let head = HEAD.replace("labels = \"y.npy\"\n", "");
    let out = fx.check(&format!(
        "{head}\n[[gate]]\nname = \"g\"\nepsilon = \"0.001\"\nlabels = \"y.npy\"\nmin_vra_pct = 50\n"
    ));
    out.assert_code(0);
    assert_eq!(gate(&fx.check_json(), "g")["passed"], true);

    // no model anywhere, no inputs anywhere, a bad per-gate format
    let no_model = "[data]\ninputs = \"x.npy\"\n\n[[gate]]\nname = \"orphan\"\nepsilon = \"0.1\"\n";
    fx.check(no_model).assert_error(&["orphan", "no model"]);
    let no_inputs =
        "[model]\npath = \"model.onnx\"\n\n[[gate]]\nname = \"dry\"\nepsilon = \"0.1\"\n";
    fx.check(no_inputs).assert_error(&["dry", "no test inputs"]);
    fx.check(&policy(
        "[[gate]]\nname = \"odd\"\nepsilon = \"0.1\"\nformat = \"float8\"\n",
    ))
    .assert_error(&["odd", "format", "float8"]);
    // a missing per-gate model is named
    fx.check(&policy(
        "[[gate]]\nname = \"gone\"\nepsilon = \"0.1\"\nmodel = \"gone.onnx\"\n",
    ))
    .assert_error(&["gone.onnx", "not found"]);
}

// ---------------------------------------------------------------------------------------------
// 3: policy errors

#[test]
fn broken_toml_is_a_policy_error() {
    let fx = Fx::new();
    let out = fx.check("[model\npath = \"model.onnx\"\n");
    out.assert_error(&["lipfp: error:", "lipfp.toml", "invalid policy"]);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(!fx.p("check.json").exists(), "no report on an input error");
}

#[test]
fn unknown_key_is_named() {
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "g"
epsilon = "0.001"
min_vra = 90
"#,
    ));
    out.assert_error(&["lipfp.toml", "min_vra"]);
    let out = fx.check(&HEAD.replace("format = \"float32\"", "fromat = \"float32\""));
    out.assert_error(&["lipfp.toml", "fromat"]);
}

#[test]
fn missing_policy_file_is_an_error() {
    let fx = Fx::new();
    let out = lipfp([
        OsStr::new("-q"),
        OsStr::new("check"),
        OsStr::new("--config"),
        fx.p("nope.toml").as_os_str(),
    ]);
    out.assert_error(&["nope.toml", "not found"]);
}

#[test]
fn label_thresholds_without_labels_are_rejected() {
    let fx = Fx::new();
    let head = HEAD.replace("labels = \"y.npy\"\n", "");
    for key in ["min_vra_pct", "min_accuracy_pct"] {
        let out = fx.check(&format!(
            "{head}\n[[gate]]\nname = \"g\"\nepsilon = \"0.001\"\n{key} = 50\n"
        ));
        out.assert_error(&["lipfp.toml", key, "labels"]);
    }
    // without labels, the label-free thresholds still work
    let out = fx.check(&format!(
        "{head}\n[[gate]]\nname = \"g\"\nepsilon = \"0.001\"\nmin_certified_pct = 50\n"
    ));
    out.assert_code(0);
    let r = fx.check_json();
    let g = gate(&r, "g");
    assert!(g["accuracy_pct"].is_null(), "{g:#}");
    assert!(g["modes"]["standard"]["vra"].is_null(), "{g:#}");
}

#[test]
fn numeric_epsilon_suggests_a_decimal_string() {
    let fx = Fx::new();
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "g"
epsilon = 0.3
"#,
    ));
    out.assert_error(&["lipfp.toml", "epsilon", "decimal string"]);
}

#[test]
fn other_policy_errors_name_the_field() {
    let fx = Fx::new();
    let cases: [(&str, &[&str]); 6] = [
        ("[[gate]]\nname = \"g\"\nepsilon = \"-1\"\n", &["epsilon", "negative"]),
        ("[[gate]]\nname = \"g\"\nepsilon = \"abc\"\n", &["epsilon", "abc"]),
        ("[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\nmode = \"bogus\"\n", &["mode", "bogus"]),
        ("[[gate]]\nname = \"g\"\n", &["missing epsilon"]),
        (
            "[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\nmin_certified_pct = 150\n",
            &["min_certified_pct", "between 0 and 100"],
        ),
        (
            "[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\n[[gate]]\nname = \"g\"\nepsilon = \"0.2\"\n",
            &["duplicate gate name"],
        ),
    ];
    for (gates, needles) in cases {
        let out = fx.check(&policy(gates));
        out.assert_error(needles);
    }
    // a policy without any gate
    fx.check(HEAD).assert_error(&["no [[gate]]"]);
    // an unknown format
    fx.check(&policy("[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\n").replace("float32", "float8"))
        .assert_error(&["[model] format", "float8"]);
}

// ---------------------------------------------------------------------------------------------
// 5: certify without labels

#[test]
fn certify_without_labels_reports_no_accuracy() {
    let fx = Fx::new();
    let out = fx.certify_json("x.npy", None, &["--epsilon", "0.001"], "r.json");
    out.assert_code(0);
    assert!(out.stdout.contains("REPORT"), "{}", out.stdout);
    let r = read_json(&fx.p("r.json"));
    assert!(r["policy"].is_null(), "{r:#}");
    let g = only_gate(&r);
    assert_consistent(g);
    assert_eq!(g["name"], "certify");
    assert!(g["passed"].is_null(), "{g:#}");
    assert!(g["accuracy_pct"].is_null(), "{g:#}");
    // without --mode: every sound mode plus the real ceiling; the first sound mode is the
    // gate's mode
    assert_eq!(g["mode"], "standard");
    let keys: Vec<&str> = g["modes"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut all = ALL_MODES.to_vec();
    all.sort();
    assert_eq!(keys, all, "{g:#}");
    for mode in ALL_MODES {
        assert!(g["modes"][mode]["vra"].is_null(), "{mode}: {g:#}");
        assert!(g["modes"][mode]["vra_pct"].is_null(), "{mode}: {g:#}");
        assert_eq!(certified(g, mode), N as u64, "{mode}: {g:#}");
    }
    assert_eq!(uint(&g["n"]), N as u64);
}

#[test]
fn certify_with_labels_matches_the_derived_figures() {
    let fx = Fx::new();
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.001"],
        "small.json",
    )
    .assert_code(0);
    fx.certify_json("x.npy", Some("y.npy"), &["--epsilon", "100"], "huge.json")
        .assert_code(0);
    let small = read_json(&fx.p("small.json"));
    let g = only_gate(&small);
    assert_consistent(g);
    assert_eq!(g["mode"], "standard");
    assert_eq!(g["accuracy_pct"].as_f64().unwrap(), pct4(N - 2, N));
    for mode in ALL_MODES {
        assert_eq!(certified(g, mode), N as u64, "{mode}: {g:#}");
        assert_eq!(uint(&g["modes"][mode]["vra"]), (N - 2) as u64, "{g:#}");
    }
    let huge = read_json(&fx.p("huge.json"));
    let h = only_gate(&huge);
    assert_consistent(h);
    for mode in ALL_MODES {
        assert_eq!(certified(h, mode), 0, "{mode}: {h:#}");
        assert_eq!(uint(&h["modes"][mode]["vra"]), 0, "{h:#}");
    }
    // the accuracy does not depend on the radius
    assert_eq!(h["accuracy_pct"], g["accuracy_pct"]);

    // at radius 0.53 the real check certifies exactly the points whose margin x_k - max_{j != k}
    // x_j exceeds L * 0.53 with L = ||e_i - e_j|| ||W1|| = sqrt(2) sqrt(1.25); the standard
    // certificate and the pre-deployment ones agree when no margin is within their (~1e-6)
    // floating-point terms of the bound
    let bound = (2.5f64).sqrt() * 0.53;
    let margins: Vec<f64> = x_f64()
        .chunks(WIDTH)
        .enumerate()
        .map(|(i, r)| {
            let k = i % CLASSES;
            let other = (0..CLASSES)
                .filter(|&j| j != k)
                .map(|j| r[j])
                .fold(f64::MIN, f64::max);
            r[k] - other
        })
        .collect();
    assert!(
        margins.iter().all(|m| (m - bound).abs() > 1e-3),
        "a margin is too close to the bound for an exact expectation: {margins:?}"
    );
    let expect = margins.iter().filter(|&&m| m > bound).count() as u64;
    let expect_vra = margins
        .iter()
        .enumerate()
        .filter(|&(i, &m)| m > bound && !MISLABELLED.contains(&i))
        .count() as u64;
    assert!(
        0 < expect && expect < N as u64,
        "radius 0.53 should split the set: {expect}"
    );
    // the Lipschitz certificates only: every mode then certifies exactly the margins above the
    // bound (`best` consulting local bounds would certify more, which `local` tests pin)
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.53", "--best-local", "false"],
        "mid.json",
    )
    .assert_code(0);
    let mid = read_json(&fx.p("mid.json"));
    let m = only_gate(&mid);
    assert_consistent(m);
    for mode in ALL_MODES {
        assert_eq!(certified(m, mode), expect, "{mode}: {m:#}");
        assert_eq!(uint(&m["modes"][mode]["vra"]), expect_vra, "{mode}: {m:#}");
    }
    assert_eq!(
        m["modes"]["standard"]["refusals"]["margin too small"],
        N as u64 - expect
    );

    // --mode real reports the real ceiling only, as the gate's mode
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.001", "--mode", "real"],
        "real.json",
    )
    .assert_code(0);
    let real = read_json(&fx.p("real.json"));
    let rg = only_gate(&real);
    assert_eq!(rg["mode"], "real");
    assert!(rg["modes"].get("standard").is_none(), "{rg:#}");
    assert_eq!(certified(rg, "real"), N as u64);
}

/// The JSON `mode` of a gate names one of its `modes` keys, spelled as in `--mode` and the
/// policy, for every mode.
#[test]
fn json_mode_field_names_a_reported_mode() {
    let fx = Fx::new();
    for mode in ALL_MODES {
        let json = format!("mode-{mode}.json");
        fx.certify_json(
            "x.npy",
            None,
            &["--epsilon", "0.001", "--mode", mode],
            &json,
        )
        .assert_code(0);
        let r = read_json(&fx.p(&json));
        let g = only_gate(&r);
        assert!(g["modes"].get(mode).is_some(), "{mode}: {g:#}");
        assert_eq!(
            g["mode"], mode,
            "the JSON `mode` is not spelled like the mode: {g:#}"
        );
    }
}

/// The mode names of a gate report, sorted.
fn mode_keys(g: &Value) -> Vec<String> {
    g["modes"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn mode_lists_select_what_is_computed() {
    let fx = Fx::new();
    let cases: [(&str, &str, &[&str]); 4] = [
        ("standard,real", "standard", &["real", "standard"]),
        ("real,standard", "real", &["real", "standard"]),
        ("hybrid", "hybrid", &["hybrid", "real"]),
        (
            "measured, best,measured",
            "measured",
            &["best", "measured", "real"],
        ),
    ];
    for (k, (list, first, keys)) in cases.into_iter().enumerate() {
        let json = format!("modes{k}.json");
        fx.certify_json(
            "x.npy",
            Some("y.npy"),
            &["--epsilon", "0.001", "--mode", list],
            &json,
        )
        .assert_code(0);
        let r = read_json(&fx.p(&json));
        let g = only_gate(&r);
        assert_consistent(g);
        assert_eq!(g["mode"], first, "{list}: {g:#}");
        assert_eq!(mode_keys(g), keys, "{list}: {g:#}");
    }

    // in a policy: the thresholds apply to the first mode of the list
    let out = fx.check(&policy(
        r#"
[[gate]]
name = "pre"
epsilon = "100"
mode = "measured,standard"
min_certified_pct = 10
"#,
    ));
    out.assert_code(1);
    let r = fx.check_json();
    let g = gate(&r, "pre");
    assert_consistent(g);
    assert_eq!(g["mode"], "measured");
    assert_eq!(mode_keys(g), ["measured", "real", "standard"]);
    let failures = g["failures"].as_array().unwrap();
    assert!(
        failures
            .iter()
            .any(|f| f.as_str().unwrap().contains("measured certified")),
        "{g:#}"
    );
    fx.check(&policy(
        "[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\nmode = \"standard,hybird\"\n",
    ))
    .assert_error(&["mode", "hybird"]);
    fx.check(&policy(
        "[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\nmode = \" , \"\n",
    ))
    .assert_error(&["mode"]);
}

#[test]
fn ftz_and_float64_formats_run() {
    let fx = Fx::new();
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.001"],
        "plain.json",
    )
    .assert_code(0);
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.001", "--ftz"],
        "ftz.json",
    )
    .assert_code(0);
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &["--epsilon", "0.001", "--format", "float64"],
        "f64.json",
    )
    .assert_code(0);
    let plain = read_json(&fx.p("plain.json"));
    let ftz = read_json(&fx.p("ftz.json"));
    let f64r = read_json(&fx.p("f64.json"));
    let (p, z, d) = (only_gate(&plain), only_gate(&ftz), only_gate(&f64r));
    for g in [p, z, d] {
        assert_consistent(g);
    }
    assert_eq!(z["ftz"], true);
    assert_eq!(d["format"], "float64");
    // the FTZ error constants dominate the gradual-underflow ones: it certifies no more
    assert!(
        certified(z, "standard") <= certified(p, "standard"),
        "{ftz:#}"
    );
    // the weights and inputs are exact in every format: same logits, same real figures
    assert_eq!(certified(d, "real"), certified(p, "real"));
    // a different format is a different converted network
    assert_ne!(d["model_hash"], p["model_hash"]);
    assert_eq!(z["model_hash"], p["model_hash"]);
}

// ---------------------------------------------------------------------------------------------
// 6: model errors

#[test]
fn sigmoid_between_the_layers_is_rejected_naming_the_node() {
    let fx = Fx::new();
    two_layer(WIDTH, 8, CLASSES, &w1(), &w2(), "Sigmoid").write(fx.dir.path(), "sigmoid.onnx");
    let out = fx.certify(&[
        OsStr::new("--model"),
        fx.p("sigmoid.onnx").as_os_str(),
        OsStr::new("--inputs"),
        fx.p("x.npy").as_os_str(),
        OsStr::new("--epsilon"),
        OsStr::new("0.1"),
    ]);
    out.assert_error(&["sigmoid.onnx", "/act/Sigmoid", "Sigmoid", "Supported"]);
}

#[test]
fn conv_model_is_rejected_naming_the_node() {
    let fx = Fx::new();
    let mut b = ModelBuilder::new();
    let mut rng = Lcg::new(3);
    b.input(
        "image",
        lipfp::onnx::reader::proto::tensor_proto::DataType::Float,
        &batched(&[1, 4, 4]),
    )
    .output_f32("logits", CLASSES)
    .init_f32("conv.weight", &[2, 1, 3, 3], &rng.f32s(18, 0.5))
    .init_f32("conv.bias", &[2], &[0.0, 0.0])
    .init_f32("fc.weight", &[CLASSES, 8], &rng.f32s(CLASSES * 8, 0.5))
    .init_f32("fc.bias", &[CLASSES], &[0.0; CLASSES])
    .node(
        "Conv",
        "/conv/Conv",
        &["image", "conv.weight", "conv.bias"],
        &["/conv/Conv_output_0"],
        vec![attr_ints("kernel_shape", &[3, 3])],
    )
    .node(
        "Relu",
        "/relu/Relu",
        &["/conv/Conv_output_0"],
        &["/relu/Relu_output_0"],
        vec![],
    )
    .node(
        "Flatten",
        "/flatten/Flatten",
        &["/relu/Relu_output_0"],
        &["/flatten/Flatten_output_0"],
        vec![attr_int("axis", 1)],
    )
    .node(
        "Gemm",
        "/fc/Gemm",
        &["/flatten/Flatten_output_0", "fc.weight", "fc.bias"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.write(fx.dir.path(), "conv.onnx");
    let x = vec![0.5f32; N * 16];
    write_npy(&fx.p("img.npy"), &[N as u64, 1, 4, 4], &x);
    let out = fx.certify(&[
        OsStr::new("--model"),
        fx.p("conv.onnx").as_os_str(),
        OsStr::new("--inputs"),
        fx.p("img.npy").as_os_str(),
        OsStr::new("--epsilon"),
        OsStr::new("0.1"),
    ]);
    out.assert_error(&["conv.onnx", "/conv/Conv", "(op Conv)"]);
}

#[test]
fn missing_model_file_is_not_found() {
    let fx = Fx::new();
    let out = fx.certify(&[
        OsStr::new("--model"),
        fx.p("absent.onnx").as_os_str(),
        OsStr::new("--inputs"),
        fx.p("x.npy").as_os_str(),
        OsStr::new("--epsilon"),
        OsStr::new("0.1"),
    ]);
    out.assert_error(&["absent.onnx", "not found"]);
    // through a policy too
    let out = fx.check(
        &policy("[[gate]]\nname = \"g\"\nepsilon = \"0.1\"\n").replace("model.onnx", "gone.onnx"),
    );
    out.assert_error(&["gone.onnx", "not found"]);
}

#[test]
fn garbage_model_file_is_a_model_error() {
    let fx = Fx::new();
    std::fs::write(fx.p("garbage.onnx"), b"\xff\xff\xff this is not protobuf").unwrap();
    let out = fx.certify(&[
        OsStr::new("--model"),
        fx.p("garbage.onnx").as_os_str(),
        OsStr::new("--inputs"),
        fx.p("x.npy").as_os_str(),
        OsStr::new("--epsilon"),
        OsStr::new("0.1"),
    ]);
    out.assert_error(&["garbage.onnx"]);
}

// ---------------------------------------------------------------------------------------------
// 7: data errors and dtypes

/// `certify` on the fixture model with the given inputs and labels files.
fn certify_data(fx: &Fx, inputs: &str, labels: Option<&str>) -> Out {
    fx.certify_json(inputs, labels, &["--epsilon", "0.001"], "data.json")
}

#[test]
fn nan_input_names_the_index() {
    let fx = Fx::new();
    let mut x = x_f32();
    x[7 * WIDTH + 2] = f32::NAN;
    write_npy(&fx.p("x_nan.npy"), &[N as u64, WIDTH as u64], &x);
    certify_data(&fx, "x_nan.npy", Some("y.npy")).assert_error(&[
        "x_nan.npy",
        "input 7",
        "feature 2",
        "not finite",
    ]);
    let mut x = x_f64();
    x[11 * WIDTH] = f64::INFINITY;
    write_npy(&fx.p("x_inf.npy"), &[N as u64, WIDTH as u64], &x);
    certify_data(&fx, "x_inf.npy", None).assert_error(&["x_inf.npy", "input 11", "not finite"]);
}

#[test]
fn input_overflowing_the_format_names_the_index() {
    let fx = Fx::new();
    let mut x = x_f32();
    x[3 * WIDTH + 1] = 1.0e6; // above float16's 65504
    write_npy(&fx.p("x_big.npy"), &[N as u64, WIDTH as u64], &x);
    fx.certify_json(
        "x_big.npy",
        None,
        &["--epsilon", "0.001", "--format", "float16"],
        "big.json",
    )
    .assert_error(&["x_big.npy", "input 3", "overflows float16"]);
}

#[test]
fn wrong_per_example_shape_is_rejected() {
    let fx = Fx::new();
    write_npy(&fx.p("x5.npy"), &[N as u64, 5], &vec![0.5f32; N * 5]);
    certify_data(&fx, "x5.npy", None).assert_error(&["x5.npy", "per-example shape [5]", "input"]);
    write_npy(&fx.p("x1d.npy"), &[N as u64], &[0.5f32; N]);
    certify_data(&fx, "x1d.npy", None).assert_error(&["x1d.npy", "per-example shape []"]);
}

#[test]
fn unsupported_dtypes_are_rejected() {
    let fx = Fx::new();
    write_npy(
        &fx.p("x_int.npy"),
        &[N as u64, WIDTH as u64],
        &vec![1i32; N * WIDTH],
    );
    certify_data(&fx, "x_int.npy", None).assert_error(&["x_int.npy", "not supported"]);
    write_npy(&fx.p("y_float.npy"), &[N as u64], &[0.0f32; N]);
    certify_data(&fx, "x.npy", Some("y_float.npy")).assert_error(&["y_float.npy", "integer dtype"]);
    std::fs::write(fx.p("x_garbage.npy"), b"definitely not npy").unwrap();
    certify_data(&fx, "x_garbage.npy", None).assert_error(&["x_garbage.npy", ".npy"]);
    certify_data(&fx, "x_absent.npy", None).assert_error(&["x_absent.npy", "not found"]);
}

#[test]
fn empty_test_set_is_rejected() {
    let fx = Fx::new();
    write_npy::<f32>(&fx.p("x_empty.npy"), &[0, WIDTH as u64], &[]);
    certify_data(&fx, "x_empty.npy", None).assert_error(&["x_empty.npy", "empty"]);
}

#[test]
fn labels_out_of_range_name_the_index() {
    let fx = Fx::new();
    let mut y = labels();
    y[5] = 3;
    write_npy(&fx.p("y_range.npy"), &[N as u64], &y);
    certify_data(&fx, "x.npy", Some("y_range.npy")).assert_error(&[
        "y_range.npy",
        "label 3",
        "index 5",
        "out of range",
    ]);
    let mut y = labels();
    y[9] = -1;
    write_npy(&fx.p("y_neg.npy"), &[N as u64], &y);
    certify_data(&fx, "x.npy", Some("y_neg.npy")).assert_error(&[
        "y_neg.npy",
        "label -1",
        "index 9",
    ]);
}

#[test]
fn labels_of_the_wrong_length_are_rejected() {
    let fx = Fx::new();
    let y = labels();
    write_npy(&fx.p("y_short.npy"), &[(N - 1) as u64], &y[..N - 1]);
    certify_data(&fx, "x.npy", Some("y_short.npy")).assert_error(&["y_short.npy", "[30]", "[29]"]);
    // [N, 2] is not a label vector either
    let y2: Vec<i64> = y.iter().flat_map(|&v| [v, v]).collect();
    write_npy(&fx.p("y_2d.npy"), &[N as u64, 2], &y2);
    certify_data(&fx, "x.npy", Some("y_2d.npy")).assert_error(&["y_2d.npy", "[30]"]);
}

#[test]
fn input_and_label_dtypes_are_accepted() {
    let fx = Fx::new();
    let shape = [N as u64, WIDTH as u64];
    write_npy(&fx.p("x16.npy"), &shape, &points());
    write_npy(&fx.p("x32.npy"), &shape, &x_f32());
    write_npy(&fx.p("x64.npy"), &shape, &x_f64());
    let y = labels();
    let y8: Vec<u8> = y.iter().map(|&v| v as u8).collect();
    let y32: Vec<i32> = y.iter().map(|&v| v as i32).collect();
    write_npy(&fx.p("y8.npy"), &[N as u64], &y8);
    write_npy(&fx.p("y32.npy"), &[N as u64], &y32);
    write_npy(&fx.p("y64.npy"), &[N as u64], &y);
    // an [N, 1] column of labels is accepted too
    write_npy(&fx.p("ycol.npy"), &[N as u64, 1], &y);
    let mut reports = Vec::new();
    for (x, yl) in [
        ("x16.npy", "y8.npy"),
        ("x32.npy", "y32.npy"),
        ("x64.npy", "y64.npy"),
        ("x16.npy", "y64.npy"),
        ("x64.npy", "y8.npy"),
        ("x32.npy", "ycol.npy"),
    ] {
        let json = format!("{x}-{yl}.json");
        fx.certify_json(x, Some(yl), &["--epsilon", "0.001"], &json)
            .assert_code(0);
        let r = read_json(&fx.p(&json));
        let g = only_gate(&r).clone();
        assert_consistent(&g);
        // every value is a float16 value: nothing changed in the conversion to float32
        assert!(
            !g["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains("input values changed")),
            "{g:#}"
        );
        reports.push(g);
    }
    // the same points and labels in every dtype: the same figures
    for g in &reports[1..] {
        assert_eq!(g["accuracy_pct"], reports[0]["accuracy_pct"]);
        assert_eq!(
            g["modes"]["standard"]["certified"],
            reports[0]["modes"]["standard"]["certified"]
        );
        assert_eq!(
            g["modes"]["standard"]["vra"],
            reports[0]["modes"]["standard"]["vra"]
        );
        assert_eq!(
            g["modes"]["real"]["certified"],
            reports[0]["modes"]["real"]["certified"]
        );
    }
    assert_eq!(reports[0]["accuracy_pct"].as_f64().unwrap(), pct4(N - 2, N));
}

#[test]
fn big_endian_and_fortran_order_files_are_read_correctly() {
    let fx = Fx::new();
    let shape = [N as u64, WIDTH as u64];
    write_npy_as(&fx.p("x_be.npy"), ">f4", npyz::Order::C, &shape, &x_f32());
    // Fortran order: column by column
    let x = x_f64();
    let xf: Vec<f64> = (0..WIDTH)
        .flat_map(|j| (0..N).map(move |i| (i, j)))
        .map(|(i, j)| x[i * WIDTH + j])
        .collect();
    write_npy_as(
        &fx.p("x_fortran.npy"),
        "<f8",
        npyz::Order::Fortran,
        &shape,
        &xf,
    );
    let y16: Vec<i16> = labels().iter().map(|&v| v as i16).collect();
    write_npy_as(&fx.p("y_be.npy"), ">i2", npyz::Order::C, &[N as u64], &y16);
    let u64s: Vec<u64> = labels().iter().map(|&v| v as u64).collect();
    write_npy_as(
        &fx.p("y_u64.npy"),
        "<u8",
        npyz::Order::C,
        &[N as u64],
        &u64s,
    );
    let args = ["--epsilon", "0.5", "--mode", "standard,real"];
    let mut figures = Vec::new();
    for (x, y) in [
        ("x.npy", "y.npy"),
        ("x_be.npy", "y_be.npy"),
        ("x_fortran.npy", "y_u64.npy"),
    ] {
        let json = format!("{x}.json");
        fx.certify_json(x, Some(y), &args, &json).assert_code(0);
        let r = read_json(&fx.p(&json));
        let g = only_gate(&r);
        assert_consistent(g);
        figures.push((
            g["accuracy_pct"].clone(),
            g["modes"]["real"].clone()["certified"].clone(),
            g["modes"]["standard"]["certified"].clone(),
            g["modes"]["standard"]["vra"].clone(),
        ));
    }
    assert_eq!(figures[0], figures[1], "big-endian files");
    assert_eq!(figures[0], figures[2], "Fortran-order inputs");
}

#[test]
fn files_where_a_norm_cache_used_to_be_change_nothing() {
    // lipfp once read norm bounds from `$LIPFP_CACHE_DIR`: entries there (forged or not) and
    // the variable itself must not influence any verdict, and nothing is written there
    let fx = Fx::new();
    fx.certify_json("x.npy", Some("y.npy"), &["--epsilon", "0.53"], "a.json")
        .assert_code(0);
    let cache = fx.p("cache");
    std::fs::create_dir(&cache).unwrap();
    for k in 0..3 {
        std::fs::write(cache.join(format!("norms-{k}.pb")), b"\x0a\x01\x00\x22\x09").unwrap();
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.env("LIPFP_CACHE_DIR", &cache).args([
        OsStr::new("-q"),
        OsStr::new("certify"),
        OsStr::new("--model"),
        fx.p("model.onnx").as_os_str(),
        OsStr::new("--inputs"),
        fx.p("x.npy").as_os_str(),
        OsStr::new("--labels"),
        fx.p("y.npy").as_os_str(),
        OsStr::new("--epsilon"),
        OsStr::new("0.53"),
        OsStr::new("--json"),
        fx.p("b.json").as_os_str(),
    ]);
    run_cmd(cmd).assert_code(0);
    let (a, b) = (read_json(&fx.p("a.json")), read_json(&fx.p("b.json")));
    assert_eq!(canonical(a), canonical(b));
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 3);
    // the flag is gone
    fx.certify(&["--cache-dir", "x", "--model", "m.onnx", "--inputs", "x.npy"])
        .assert_code(2);
}

#[test]
fn float64_inputs_that_round_get_a_note() {
    let fx = Fx::new();
    let mut x = x_f64();
    x[0] += 1e-12; // not a float32 value
    write_npy(&fx.p("x64r.npy"), &[N as u64, WIDTH as u64], &x);
    fx.certify_json("x64r.npy", None, &["--epsilon", "0.001"], "r.json")
        .assert_code(0);
    let r = read_json(&fx.p("r.json"));
    let notes = only_gate(&r)["notes"].as_array().unwrap().clone();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("1 input values changed")),
        "{notes:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 8: per-instance radii

#[test]
fn per_instance_radii() {
    let fx = Fx::new();
    // the first half at 0.001 (all certified, as the uniform run shows), the second at 100
    // (nothing certified)
    let eps: Vec<f64> = (0..N)
        .map(|i| if i < N / 2 { 0.001 } else { 100.0 })
        .collect();
    write_npy(&fx.p("radii.npy"), &[N as u64], &eps);
    fx.certify_json(
        "x.npy",
        Some("y.npy"),
        &[
            "--epsilons",
            fx.p("radii.npy").to_str().unwrap(),
            "--mode",
            "standard,real",
        ],
        "per.json",
    )
    .assert_code(0);
    fx.certify_json("x.npy", Some("y.npy"), &["--epsilon", "0.001"], "uni.json")
        .assert_code(0);
    let per = read_json(&fx.p("per.json"));
    let uni = read_json(&fx.p("uni.json"));
    let (g, u) = (only_gate(&per), only_gate(&uni));
    assert_consistent(g);
    assert!(g["epsilon"].is_null(), "{g:#}");
    assert!(
        g["epsilons"].as_str().unwrap().ends_with("radii.npy"),
        "{g:#}"
    );
    assert!(u["epsilons"].is_null());
    assert_eq!(uint(&g["n"]), N as u64);
    assert_eq!(certified(u, "standard"), N as u64, "{u:#}");
    // exactly the points with the small radius are certified
    for mode in ["real", "standard"] {
        assert_eq!(certified(g, mode), (N / 2) as u64, "{mode}: {g:#}");
    }
    // the mislabelled point 4 is in the certified half, 17 is not
    assert_eq!(
        uint(&g["modes"]["standard"]["vra"]),
        (N / 2 - 1) as u64,
        "{g:#}"
    );

    // through a policy, relative to the policy file
    let out = fx.check(&policy(
        "[[gate]]\nname = \"per\"\nepsilons = \"radii.npy\"\nmin_certified_pct = 50\n",
    ));
    out.assert_code(0);
    let r = fx.check_json();
    let pg = gate(&r, "per");
    assert_eq!(pg["passed"], true, "{pg:#}");
    assert!(pg["epsilon"].is_null());
    assert_eq!(certified(pg, "standard"), (N / 2) as u64);
}

#[test]
fn per_instance_radii_errors() {
    let fx = Fx::new();
    write_npy(
        &fx.p("radii_short.npy"),
        &[(N - 3) as u64],
        &vec![0.001f64; N - 3],
    );
    fx.certify_json(
        "x.npy",
        None,
        &["--epsilons", fx.p("radii_short.npy").to_str().unwrap()],
        "e.json",
    )
    .assert_error(&["radii_short.npy", "[30]", "[27]"]);
    assert!(!fx.p("e.json").exists());

    let mut eps = vec![0.001f64; N];
    eps[12] = -0.5;
    write_npy(&fx.p("radii_neg.npy"), &[N as u64], &eps);
    fx.certify_json(
        "x.npy",
        None,
        &["--epsilons", fx.p("radii_neg.npy").to_str().unwrap()],
        "e.json",
    )
    .assert_error(&["radii_neg.npy", "index 12"]);

    eps[12] = f64::NAN;
    write_npy(&fx.p("radii_nan.npy"), &[N as u64], &eps);
    fx.certify_json(
        "x.npy",
        None,
        &["--epsilons", fx.p("radii_nan.npy").to_str().unwrap()],
        "e.json",
    )
    .assert_error(&["radii_nan.npy", "index 12"]);

    // the wrong length through a policy is exit 2 too, not a failed gate
    fx.check(&policy(
        "[[gate]]\nname = \"per\"\nepsilons = \"radii_short.npy\"\nmin_certified_pct = 50\n",
    ))
    .assert_error(&["radii_short.npy", "[30]"]);
    // epsilon and epsilons together
    fx.check(&policy(
        "[[gate]]\nname = \"both\"\nepsilon = \"0.1\"\nepsilons = \"radii_short.npy\"\n",
    ))
    .assert_error(&["either epsilon or epsilons"]);
}

// ---------------------------------------------------------------------------------------------
// 9: bfloat16 with n*u >= 1

/// Input width of the wide model: `300 * 2^-8 >= 1` in bfloat16.
const WIDE: usize = 300;

/// Write `wide.onnx` (`W1 = [I_8 | 0]`, 8 x 300, `W2` as in the test model: the logit of class
/// `c` is `x_c`) and `xw.npy` (point `i`: `x_{i%3} = 1`, `x_{(i+1)%3} = 0.25`, bfloat16
/// values; margin 0.75) into the fixture.
fn write_wide(fx: &Fx) {
    let mut w = vec![0.0f32; 8 * WIDE];
    for j in 0..8 {
        w[j * WIDE + j] = 1.0;
    }
    two_layer(WIDE, 8, CLASSES, &w, &w2(), "Relu").write(fx.dir.path(), "wide.onnx");
    let mut x = vec![0.0f32; N * WIDE];
    for i in 0..N {
        x[i * WIDE + i % CLASSES] = 1.0;
        x[i * WIDE + (i + 1) % CLASSES] = 0.25;
    }
    write_npy(&fx.p("xw.npy"), &[N as u64, WIDE as u64], &x);
}

#[test]
fn bfloat16_wide_input_is_vacuous_for_the_standard_mode() {
    let fx = Fx::new();
    write_wide(&fx);
    let run = |format: &str, json: &str| {
        fx.certify(&[
            OsStr::new("--model"),
            fx.p("wide.onnx").as_os_str(),
            OsStr::new("--inputs"),
            fx.p("xw.npy").as_os_str(),
            OsStr::new("--epsilon"),
            OsStr::new("0.001"),
            OsStr::new("--format"),
            OsStr::new(format),
            OsStr::new("--json"),
            fx.p(json).as_os_str(),
        ])
    };
    let out = run("bfloat16", "bf16.json");
    out.assert_code(0);
    assert!(out.stdout.contains("n*u"), "{}", out.stdout);
    let r = read_json(&fx.p("bf16.json"));
    let g = only_gate(&r);
    assert_consistent(g);
    assert_eq!(g["format"], "bfloat16");
    // n*u >= 1 makes the deployment-format error bounds vacuous: no sound mode certifies
    for mode in SOUND_MODES {
        assert_eq!(certified(g, mode), 0, "{mode}: {g:#}");
        assert_eq!(
            g["modes"][mode]["refusals"]["model cannot be certified"], N as u64,
            "{mode}: {g:#}"
        );
    }
    // the real ceiling is unaffected: margins 0.75 >> sqrt(2) * 0.001
    assert_eq!(certified(g, "real"), N as u64, "{g:#}");
    let notes = g["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().contains("n*u")),
        "{notes:?}"
    );
    // the note is not duplicated by the model-level refusal
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.as_str().unwrap().contains("n*u"))
            .count(),
        1,
        "{notes:?}"
    );

    // in float32, n*u = 300 * 2^-24 is tiny: the same network certifies
    run("float32", "f32.json").assert_code(0);
    let r = read_json(&fx.p("f32.json"));
    let g = only_gate(&r);
    for mode in SOUND_MODES {
        assert_eq!(certified(g, mode), N as u64, "{mode}: {g:#}");
    }
    assert!(
        !g["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("n*u")),
        "{g:#}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10: determinism

/// The report without its timings (`timing`, per-mode `seconds`).
fn canonical(mut r: Value) -> String {
    for g in r["gates"].as_array_mut().unwrap() {
        let g = g.as_object_mut().unwrap();
        assert!(g.remove("timing").is_some());
        for m in g["modes"].as_object_mut().unwrap().values_mut() {
            assert!(m.as_object_mut().unwrap().remove("seconds").is_some());
        }
    }
    serde_json::to_string(&r).unwrap()
}

#[test]
fn certify_is_deterministic() {
    let fx = Fx::new();
    // default modes: the float64 reference pass is part of the run
    let args = ["--epsilon", "0.5"];
    for k in 1..=3 {
        fx.certify_json("x.npy", Some("y.npy"), &args, &format!("run{k}.json"))
            .assert_code(0);
    }
    let r1 = read_json(&fx.p("run1.json"));
    let r2 = read_json(&fx.p("run2.json"));
    let r3 = read_json(&fx.p("run3.json"));
    assert_eq!(canonical(r1.clone()), canonical(r2));
    assert_eq!(canonical(r1), canonical(r3));

    // the console output is identical too, up to the time at the end of the gate's line
    let strip = |s: &str| {
        let untimed = |l: &'static str| {
            l.rsplit_once("  ")
                .filter(|(_, t)| {
                    t.strip_suffix('s')
                        .is_some_and(|t| t.parse::<f64>().is_ok())
                })
                .map_or(l, |(head, _)| head)
        };
        let s: &'static str = Box::leak(s.to_string().into_boxed_str());
        s.lines().map(untimed).collect::<Vec<_>>().join("\n")
    };
    let a = fx.certify_json("x.npy", Some("y.npy"), &args, "run5.json");
    let b = fx.certify_json("x.npy", Some("y.npy"), &args, "run6.json");
    assert_eq!(strip(&a.stdout), strip(&b.stdout));
    assert!(a.stdout.contains("UNSOUND"), "{}", a.stdout);
}

#[test]
fn gram_iterations_are_recorded_and_checked() {
    let fx = Fx::new();
    fx.certify_json(
        "x.npy",
        None,
        &["--epsilon", "0.001", "--gram-iterations", "6"],
        "b.json",
    )
    .assert_code(0);
    let b = read_json(&fx.p("b.json"));
    assert_eq!(uint(&only_gate(&b)["gram_iterations"]), 6);
    fx.certify_json(
        "x.npy",
        None,
        &["--epsilon", "0.001", "--gram-iterations", "0"],
        "c.json",
    )
    .assert_error(&["--gram-iterations"]);
}

// ---------------------------------------------------------------------------------------------
// 11: usage errors

#[test]
fn bad_epsilon_and_mode_are_usage_errors() {
    let fx = Fx::new();
    let base = |extra: &[&str]| {
        let mut v: Vec<String> = vec![
            "--model".into(),
            fx.p("model.onnx").display().to_string(),
            "--inputs".into(),
            fx.p("x.npy").display().to_string(),
            "--json".into(),
            fx.p("usage.json").display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        fx.certify(&v)
    };
    // `-1` as a separate token: rejected (by the argument parser or by the radius check)
    base(&["--epsilon", "-1"]).assert_error(&["-1"]);
    let out = base(&["--epsilon=-1"]);
    out.assert_error(&["lipfp: error:", "--epsilon", "negative"]);
    base(&["--epsilon", "abc"]).assert_error(&["--epsilon", "abc"]);
    base(&["--epsilon", "0.1", "--mode", "bogus"]).assert_error(&["unknown mode", "bogus"]);
    base(&["--epsilon", "0.1", "--mode", ","]).assert_error(&["--mode"]);
    base(&["--epsilon", "0.1", "--format", "float8"]).assert_error(&["float8"]);
    // neither or both radii
    base(&[]).assert_error(&["--epsilon"]);
    base(&["--epsilon", "0.1", "--epsilons", "r.npy"]).assert_error(&["--epsilon"]);
    // no report was written for any of them
    assert!(!fx.p("usage.json").exists());
    // while a valid command line writes one
    base(&["--epsilon", "0.1"]).assert_code(0);
    assert!(fx.p("usage.json").exists());
}
