//! l_inf balls clipped to the input range in `lipfp check` and `lipfp certify` (issue 30; docs/
//! soundness.md "Input sets"): a gate with `norm = "linf"` and `input_range` on the naturally
//! trained digits network gets a curve, an attack bracket, a JUnit report and a JSON report that
//! name the set; every witness the falsifier reports lies in the clipped box; inputs outside the
//! range, unknown norms and bad ranges are refused naming the point, gate or key; a baseline of
//! another set does not compare; certificate files carry the set.

use crate::common;

use std::path::Path;
use std::process::Command;

use crate::common::runtime::{read_inputs, read_npy, write_f64_npy, write_npy};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `lipfp ARGS` run in `dir`: exit code, stdout and stderr.
fn lipfp(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("lipfp runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `lipfp -q certify` of the natural digits network on the workspace's inputs and labels in
/// l_inf balls clipped to `[0, 1]`, with `extra` flags.
fn certify_linf(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "-q",
        "certify",
        "--model",
        "natural.onnx",
        "--inputs",
        "x.npy",
        "--labels",
        "y.npy",
        "--norm",
        "linf",
        "--input-range",
        "0,1",
    ];
    args.extend_from_slice(extra);
    lipfp(dir, &args)
}

/// A directory with the natural digits network, its inputs flattened (`x.npy`), the labels
/// (`y.npy`), and `lipfp.toml` holding `policy`.
fn workspace(policy: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (x, rows) = read_inputs(&root().join("examples/digits/x_test.npy"));
    write_f64_npy(&dir.path().join("x.npy"), rows, &[x.len() / rows], &x);
    std::fs::copy(
        root().join("examples/digits/y_test.npy"),
        dir.path().join("y.npy"),
    )
    .unwrap();
    std::fs::copy(
        root().join("tests/local/digits-32x2.onnx"),
        dir.path().join("natural.onnx"),
    )
    .unwrap();
    std::fs::write(dir.path().join("lipfp.toml"), policy).unwrap();
    dir
}

const GATE: &str = r#"
[model]
path = "natural.onnx"
format = "float32"

[data]
inputs = "x.npy"
labels = "y.npy"
input_range = [0, 1]

[[gate]]
name = "natural-linf"
epsilon = "0.03"
norm = "linf"
mode = "local,standard"
curve = ["0.01", "0.02", "0.03", "0.05"]
attack = true
min_vra_pct = 50.0
"#;

#[test]
fn an_linf_gate_has_a_curve_an_attack_bracket_and_reports_that_name_its_set() {
    let dir = workspace(GATE);
    let (code, stdout, stderr) = lipfp(
        dir.path(),
        &[
            "-q",
            "check",
            "--json",
            "r.json",
            "--junit",
            "r.xml",
            "--certificates",
            "c.lipfp",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("eps 0.03 (linf in [0, 1])"), "{stdout}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let g = &json["gates"][0];
    assert_eq!(g["ball"], "linf in [0, 1]");
    let local = g["modes"]["local"]["certified"].as_u64().unwrap();
    let standard = g["modes"]["standard"]["certified"].as_u64().unwrap();
    // on a network not trained for it, the l2 cover of the box (radius 0.03 * 8) certifies far
    // less than the local bounds over the box itself
    assert!(local > standard + 50, "local {local}, standard {standard}");
    // the curve's counts at 0.03 are the gate's own (local certificates run at every radius)
    let curve = &g["curve"]["local"];
    let at = |e: &str| {
        curve
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["epsilon"] == e)
            .unwrap_or_else(|| panic!("no curve point at {e}: {curve}"))["certified"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(at("0.03"), local);
    assert!(at("0.01") >= at("0.02") && at("0.02") >= at("0.05"));
    // the attack bracket: certified VRA <= robust accuracy <= the falsifier's upper bound
    let attack = &g["attack"];
    let lower = g["modes"]["local"]["vra_pct"].as_f64().unwrap();
    let upper = attack["robust_upper_pct"].as_f64().unwrap();
    assert!(lower <= upper && upper < 100.0, "{attack}");
    assert!(attack["falsified"].as_u64().unwrap() > 0, "{attack}");
    let junit = std::fs::read_to_string(dir.path().join("r.xml")).unwrap();
    assert!(junit.contains("input set: linf in [0, 1]"), "{junit}");
    // shards and merges keep the set: `report` re-renders it from the certificate file
    let (code, stdout, _) = lipfp(dir.path(), &["-q", "report", "c.lipfp"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("(linf in [0, 1])"), "{stdout}");
}

#[test]
fn every_linf_witness_lies_in_the_clipped_box_and_flips_the_class() {
    let dir = workspace(GATE);
    let (code, stdout, stderr) = certify_linf(
        dir.path(),
        &[
            "--epsilon",
            "0.05",
            "--mode",
            "local",
            "--attack",
            "--attack-witnesses",
            "w.npy",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (w, shape) = read_npy::<f64>(&dir.path().join("w.npy"));
    let (idx, _) = read_npy::<i64>(&dir.path().join("w.indices.npy"));
    assert!(!idx.is_empty(), "no witness at eps 0.05: {stdout}");
    let dim = shape[1] as usize;
    let (x, _) = read_inputs(&dir.path().join("x.npy"));
    let eps = 0.05f64;
    for (k, &i) in idx.iter().enumerate() {
        let (wk, xk) = (
            &w[k * dim..(k + 1) * dim],
            &x[i as usize * dim..(i as usize + 1) * dim],
        );
        for (a, b) in wk.iter().zip(xk) {
            // exact: both are float32 values, whose difference float64 holds exactly
            assert!(
                (a - b).abs() <= eps && (0.0..=1.0).contains(a),
                "{i}: {a} vs {b}"
            );
        }
    }
    // an independent execution (tract) confirms the flips (tests/engine/attack.rs runs onnxruntime)
    let witnesses =
        common::runtime::tract_logits(&dir.path().join("natural.onnx"), &[dim], idx.len(), &w)
            .unwrap();
    let (y, _) = read_npy::<i64>(&root().join("examples/digits/y_test.npy"));
    for (k, &i) in idx.iter().enumerate() {
        let classes = witnesses.len() / idx.len();
        let got = common::runtime::argmax(&witnesses[k * classes..(k + 1) * classes]);
        assert_ne!(
            got as i64, y[i as usize],
            "witness {k} (point {i}) keeps its label"
        );
    }
}

#[test]
fn inputs_outside_the_range_and_bad_sets_are_refused_by_name() {
    let dir = workspace(&GATE.replace("input_range = [0, 1]", "input_range = [0, 0.5]"));
    let (code, stdout, stderr) = lipfp(dir.path(), &["-q", "check"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stderr.contains("outside input_range [0, 0.5]") && stderr.contains("x.npy"),
        "{stderr}"
    );
    for (bad, want) in [
        ("norm = \"l1\"", "norm: `l1` is not a norm"),
        (
            "input_range = [1, 0]",
            "input_range: [1, 0]: the lower end is above",
        ),
        ("input_range = [0]", "input_range: write the valid range"),
        (
            "input_range = \"0,1\"",
            "input_range: write the valid range",
        ),
    ] {
        let key = bad.split(' ').next().unwrap();
        let policy = GATE
            .lines()
            .map(|l| if l.starts_with(key) { bad } else { l })
            .collect::<Vec<_>>()
            .join("\n");
        // the gate's own keys override [data]'s: put a bad range on the gate
        let policy = if key == "input_range" {
            policy
                .replace(bad, "")
                .replace("norm = \"linf\"", &format!("norm = \"linf\"\n{bad}"))
        } else {
            policy
        };
        let dir = workspace(&policy);
        let (code, _, stderr) = lipfp(dir.path(), &["-q", "check"]);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(
            stderr.contains("`natural-linf`") && stderr.contains(want),
            "{bad}: {stderr}"
        );
    }
    let (code, _, stderr) = lipfp(
        dir.path(),
        &[
            "certify",
            "--model",
            "natural.onnx",
            "--inputs",
            "x.npy",
            "--epsilon",
            "0.1",
            "--input-range",
            "1,0",
        ],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("--input-range"), "{stderr}");
}

#[test]
fn a_baseline_of_another_set_does_not_compare() {
    let dir = workspace(GATE);
    let (code, out, _) = lipfp(dir.path(), &["-q", "check", "--json", "base.json"]);
    assert_eq!(code, 0, "{out}");
    // the same gate on l2 balls against the l_inf baseline: refused, naming the set
    let l2 = GATE
        .replace("norm = \"linf\"\n", "")
        .replace("attack = true\n", "")
        + "max_vra_drop_pp = 1.0\n\n[baseline]\nreport = \"base.json\"\nrequired = true\n";
    std::fs::write(dir.path().join("lipfp.toml"), l2).unwrap();
    let (code, stdout, stderr) = lipfp(dir.path(), &["-q", "check"]);
    assert_eq!(code, 2, "{stdout}");
    let all = stdout + &stderr;
    assert!(
        all.contains("the input set (norm and range) differs (baseline `linf in [0, 1]`, now `l2 in [0, 1]`)"),
        "{all}"
    );
}

/// Per-instance radii work in l_inf too: the radii file's values are l_inf radii.
#[test]
fn per_instance_radii_are_radii_of_the_gates_norm() {
    let dir = workspace(GATE);
    let n = 450;
    let radii: Vec<f64> = (0..n).map(|k| if k % 2 == 0 { 0.0 } else { 0.5 }).collect();
    write_npy(&dir.path().join("r.npy"), &[n as u64], &radii);
    let (code, stdout, stderr) = certify_linf(
        dir.path(),
        &["--epsilons", "r.npy", "--mode", "local", "--json", "r.json"],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    // radius 0 certifies every point with a margin; l_inf radius 0.5 covers half the pixel range
    // around each point, where nothing is certified
    let certified = json["gates"][0]["modes"]["local"]["certified"]
        .as_u64()
        .unwrap();
    assert!((200..=225).contains(&certified), "{certified}");
}

/// The paper's Table 3, MNIST row, through a gate: the first 100 test points of the published
/// benchmark at `eps_inf = 0.011` with pixels in `[0, 1]`, float32-sound. ERAN/DeepPoly certifies
/// 99 of them; the gate asks for at least as many.
#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "../shared/benchmarks not found: the benchmark data is not part of the repository"
)]
fn paper_table_3_mnist_row_through_an_linf_gate() {
    let mnist = root().join("../shared/benchmarks/mnist");
    let dir = tempfile::tempdir().unwrap();
    let (x, rows) = read_inputs(&mnist.join("x_test.npy"));
    let dim = x.len() / rows;
    write_f64_npy(
        &dir.path().join("x.npy"),
        100,
        &[1, 28, 28],
        &x[..100 * dim],
    );
    let (y, _) = read_npy::<i64>(&mnist.join("y_test.npy"));
    write_npy(&dir.path().join("y.npy"), &[100], &y[..100]);
    let policy = format!(
        "[model]\npath = \"{}\"\nformat = \"float32\"\n\n[data]\ninputs = \"x.npy\"\n\
         labels = \"y.npy\"\ninput_range = [0, 1]\n\n[[gate]]\nname = \"table3\"\n\
         epsilon = \"0.011\"\nnorm = \"linf\"\nmode = \"best,local\"\nmin_certified_pct = 99.0\n",
        mnist.join("model.onnx").display()
    );
    std::fs::write(dir.path().join("lipfp.toml"), policy).unwrap();
    let (code, stdout, stderr) = lipfp(dir.path(), &["-q", "check"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("certified     99 ( 99.00%)"), "{stdout}");
}
