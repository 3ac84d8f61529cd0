//! Issue 12, items 1-4, end to end on the embedded digits example: errored gates as first-class
//! results, errors outside every gate still reported, baselines compared like with like,
//! thresholds that look like fractions flagged, dashboard-friendly JUnit and GitHub outputs,
//! and the small usability fixes.

use std::path::Path;
use std::process::Command;

use crate::common::runtime::write_npy;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn digits(file: &str) -> String {
    root()
        .join("examples/digits")
        .join(file)
        .display()
        .to_string()
}

fn corpus(file: &str) -> String {
    root().join("tests/corpus").join(file).display().to_string()
}

/// One run of the binary.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `lipfp -q <args>` in `dir`; with `gha`, under GitHub Actions with the step summary and
/// outputs in `dir`.
fn lipfp(dir: &Path, args: &[&str], gha: bool) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.current_dir(dir)
        .arg("-q")
        .args(args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_OUTPUT");
    if gha {
        cmd.env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
            .env("GITHUB_OUTPUT", dir.join("outputs.txt"));
    }
    let out = cmd.output().expect("run lipfp");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn json(dir: &Path, file: &str) -> Value {
    serde_json::from_str(&read(dir, file)).expect("JSON parses")
}

fn gate<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == name))
        .unwrap_or_else(|| panic!("no gate {name}: {report:#}"))
}

/// The 1-based line of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    1 + text
        .lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
}

/// `tests/corpus/torch_ts_softmax.onnx` with its `Softmax` head replaced by a `Hardmax`, written
/// to `dir/hardmax.onnx`: a real export lipfp refuses (a one-hot head ranks no class first).
fn hardmax_model(dir: &Path) -> String {
    use lipfp::onnx::reader::proto::ModelProto;
    use prost::Message;
    let bytes = std::fs::read(corpus("torch_ts_softmax.onnx")).unwrap();
    let mut m = ModelProto::decode(&bytes[..]).unwrap();
    let graph = m.graph.as_mut().expect("a graph");
    let head = graph
        .node
        .iter_mut()
        .find(|n| n.op_type == "Softmax")
        .expect("the Softmax head");
    head.op_type = "Hardmax".into();
    head.name = "/5/Hardmax".into();
    let path = dir.join("hardmax.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path.display().to_string()
}

/// A policy on the digits example: one good gate, one failing gate, two gates on a model lipfp
/// refuses (sharing one target), one on data that does not fit the model and one with a radii
/// file of the wrong length.
fn mixed_policy(dir: &Path) -> String {
    write_npy(&dir.join("short-radii.npy"), &[7], &[0.3f64; 7]);
    format!(
        r#"[model]
path = "{model}"

[data]
inputs = "{x}"
labels = "{y}"

[[gate]]
name = "digits-good"
epsilon = "0.3"
min_vra_pct = 50.0

[[gate]]
name = "digits-fails"
epsilon = "0.3"
min_vra_pct = 99.5

[[gate]]
name = "hardmax-a"
model = "{hardmax}"
inputs = "{sx}"
labels = "{sy}"
epsilon = "0.1"
min_vra_pct = 10.0

[[gate]]
name = "hardmax-b"
model = "{hardmax}"
inputs = "{sx}"
labels = "{sy}"
epsilon = "0.2"

[[gate]]
name = "digits-wrong-data"
inputs = "{sx}"
labels = "{sy}"
epsilon = "0.3"
min_vra_pct = 50.0

[[gate]]
name = "digits-bad-radii"
epsilons = "short-radii.npy"
min_certified_pct = 10.0
"#,
        model = digits("model.onnx"),
        x = digits("x_test.npy"),
        y = digits("y_test.npy"),
        hardmax = hardmax_model(dir),
        sx = corpus("torch_ts_softmax.x.npy"),
        sy = corpus("torch_ts_softmax.y.npy"),
    )
}

const ERRORED: [&str; 4] = [
    "hardmax-a",
    "hardmax-b",
    "digits-wrong-data",
    "digits-bad-radii",
];

#[test]
fn errored_gates_are_reported_by_every_reporter_and_the_other_gates_still_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let policy = mixed_policy(d);
    std::fs::write(d.join("lipfp.toml"), &policy).unwrap();
    let args = ["check", "--json", "r.json", "--junit", "j.xml"];
    let out = lipfp(d, &args, true);
    // an errored gate is exit 2, even with a failing gate
    assert_eq!(out.code, Some(2), "{}\n{}", out.stdout, out.stderr);

    // JSON: an explicit status, `passed: null` and the error; the others evaluated
    let r = json(d, "r.json");
    assert_eq!(gate(&r, "digits-good")["status"], "pass");
    assert_eq!(gate(&r, "digits-good")["passed"], true);
    assert!(gate(&r, "digits-good")["error"].is_null());
    assert_eq!(gate(&r, "digits-fails")["status"], "fail");
    for name in ERRORED {
        let g = gate(&r, name);
        assert_eq!(g["status"], "error", "{g:#}");
        assert!(g["passed"].is_null(), "{g:#}");
        assert!(g["error"].is_string(), "{g:#}");
    }
    let error = |name: &str| gate(&r, name)["error"].as_str().unwrap().to_string();
    assert!(
        error("hardmax-a").contains("hardmax.onnx") && error("hardmax-a").contains("Hardmax"),
        "{}",
        error("hardmax-a")
    );
    // gates sharing the failing target error with the same message
    assert_eq!(error("hardmax-a"), error("hardmax-b"));
    assert!(error("digits-wrong-data").contains("torch_ts_softmax.x.npy"));
    assert!(error("digits-bad-radii").contains("short-radii.npy"));
    assert_eq!(
        gate(&r, "hardmax-a")["thresholds"][0]["skipped"],
        "the gate errored"
    );

    // console: one line per errored gate with its error; stderr names the gate too
    for name in ERRORED {
        assert!(
            out.stdout.contains(&format!("ERROR  {name}  [")),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout
                .contains(&format!("       error: {}", error(name))),
            "{}",
            out.stdout
        );
        assert!(
            out.stderr.contains(&format!("lipfp: error: gate `{name}`")),
            "{}",
            out.stderr
        );
    }
    assert!(out
        .stdout
        .contains("1 passed, 1 failed, 4 errored, 0 without thresholds (6 gates)"));

    // annotations: one `::error` per failing or errored gate, at its policy line
    let annotations: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("::error"))
        .collect();
    assert_eq!(annotations.len(), 5, "{}", out.stdout);
    let a = annotations
        .iter()
        .find(|l| l.contains("title=lipfp gate hardmax-a errored::"))
        .expect("annotation of hardmax-a");
    assert!(
        a.contains(&format!(
            "line={}",
            line_of(&policy, "name = \"hardmax-a\"")
        )),
        "{a}"
    );
    assert!(a.contains("Hardmax"), "{a}");

    // step summary: a row per gate, errored rows with the error
    let md = read(d, "summary.md");
    // the gate table: from its header to the first blank line (per-class tables follow)
    let rows: Vec<&str> = md
        .lines()
        .skip_while(|l| !l.starts_with("| gate "))
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("| ") && !l.starts_with("| gate "))
        .collect();
    assert_eq!(rows.len(), 6, "{md}");
    let row = rows
        .iter()
        .find(|l| l.starts_with("| hardmax-a |"))
        .unwrap();
    assert!(
        row.contains("⛔ error: ") && row.contains("Hardmax"),
        "{row}"
    );
    assert!(md.contains("4 errored"), "{md}");

    // JUnit: an error testcase per errored gate, its message the error
    let xml = read(d, "j.xml");
    assert_eq!(xml.matches("<testcase ").count(), 6, "{xml}");
    assert!(
        xml.contains("errors=\"4\"") && xml.contains("failures=\"1\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<error ").count(), 4, "{xml}");
    let case = &xml[xml.find("<testcase name=\"hardmax-a\"").unwrap()..];
    let case = &case[..case.find("</testcase>").unwrap()];
    assert!(case.contains("<error type=\"error\" message=\""), "{case}");
    let message = &case[case.find("message=\"").unwrap() + 9..];
    let message = &message[..message.find('"').unwrap()];
    let unescaped = message
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    assert_eq!(unescaped, error("hardmax-a"), "{case}");

    // outputs: passed=false, per-gate status and the `gates` JSON
    let outs = read(d, "outputs.txt");
    assert!(outs.lines().any(|l| l == "passed=false"), "{outs}");
    assert!(
        outs.lines().any(|l| l == "hardmax_a_status=error"),
        "{outs}"
    );
    assert!(outs.lines().any(|l| l == "hardmax_a_passed="), "{outs}");
    let gates: Value = serde_json::from_str(
        outs.lines()
            .find_map(|l| l.strip_prefix("gates="))
            .expect("gates output"),
    )
    .unwrap();
    assert_eq!(gates["digits-good"]["passed"], true);
    assert_eq!(gates["hardmax-a"]["status"], "error");
    assert_eq!(gates["hardmax-a"]["error"], error("hardmax-a").as_str());
}

#[test]
fn errors_outside_every_gate_are_annotated_summarised_and_in_junit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("lipfp.toml"), "[model\npath = \"m.onnx\"\n").unwrap();
    for config in ["lipfp.toml", "missing.toml"] {
        let _ = std::fs::remove_file(d.join("summary.md"));
        let args = [
            "check", "--config", config, "--junit", "j.xml", "--json", "r.json",
        ];
        let out = lipfp(d, &args, true);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert_eq!(
            out.stderr.matches("lipfp: error:").count(),
            1,
            "{}",
            out.stderr
        );
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{}", out.stdout);
        assert!(
            lines[0].starts_with(&format!(
                "::error file={config},title=lipfp error::{config}"
            )),
            "{}",
            lines[0]
        );
        let md = read(d, "summary.md");
        assert!(
            md.contains("⛔") && md.contains("**error**") && md.contains(config),
            "{md}"
        );
        assert!(read(d, "outputs.txt").contains("passed=false\n"));
        let xml = read(d, "j.xml");
        assert_eq!(xml.matches("<testcase ").count(), 1, "{xml}");
        assert!(xml.contains("<error ") && xml.contains(config), "{xml}");
        assert!(
            !d.join("r.json").exists(),
            "no JSON report on such an error"
        );
    }
    // without GitHub Actions: the JUnit file only, nothing on stdout
    let out = lipfp(d, &["check", "--junit", "k.xml"], false);
    assert_eq!(out.code, Some(2));
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(read(d, "k.xml").contains("<error "));
}

#[test]
fn a_junit_path_that_is_a_directory_is_reported_once_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = lipfp(root(), &["check", "--junit", d.to_str().unwrap()], false);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("could not write the JUnit report: it is a directory"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

#[test]
fn a_missing_radius_names_both_flags() {
    let out = lipfp(
        root(),
        &[
            "certify",
            "--model",
            &digits("model.onnx"),
            "--inputs",
            &digits("x_test.npy"),
        ],
        false,
    );
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("--epsilon") && out.stderr.contains("--epsilons"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_underflowing_radius_prints_no_infinite_degradation() {
    let tmp = tempfile::tempdir().unwrap();
    let json_path = tmp.path().join("r.json");
    let out = lipfp(
        root(),
        &[
            "certify",
            "--model",
            &digits("model.onnx"),
            "--inputs",
            &digits("x_test.npy"),
            "--epsilon",
            "1e-320",
            "--json",
            json_path.to_str().unwrap(),
        ],
        false,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains("inf"), "{}", out.stdout);
    assert!(out.stdout.contains("fp degradation n/a"), "{}", out.stdout);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    for (mode, m) in r["gates"][0]["modes"].as_object().unwrap() {
        let c = &m["conservatism_ratio"];
        assert!(
            c.is_null() || c.as_f64().is_some_and(f64::is_finite),
            "{mode}: {c}"
        );
    }
}

/// `[[gate]]` on the digits example with a drop threshold, and a baseline section.
fn baseline_policy(gate_keys: &str, baseline: Option<(&str, bool)>) -> String {
    let mut p = format!(
        "[model]\npath = \"{}\"\n[data]\ninputs = \"{}\"\nlabels = \"LABELS\"\n",
        digits("model.onnx"),
        digits("x_test.npy"),
    );
    if let Some((report, required)) = baseline {
        p += &format!("[baseline]\nreport = \"{report}\"\nrequired = {required}\n");
    }
    p + "[[gate]]\nname = \"g\"\nmax_vra_drop_pp = 1.0\n" + gate_keys
}

#[test]
fn baselines_are_compared_like_with_like() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // labels with one changed entry: another test set
    let labels =
        lipfp::engine::data::load_labels(Path::new(&digits("y_test.npy")), None, 450, 10).unwrap();
    let mut other: Vec<i64> = labels.iter().map(|&y| y as i64).collect();
    other[0] = (other[0] + 1) % 10;
    write_npy(&d.join("y-other.npy"), &[450], &other);
    write_npy(&d.join("radii.npy"), &[450], &[0.3f64; 450]);
    write_npy(&d.join("radii-other.npy"), &[450], &[0.25f64; 450]);
    let y = digits("y_test.npy");
    let run = |policy: String, json: &str| {
        std::fs::write(d.join("p.toml"), policy.replace("LABELS", &y)).unwrap();
        let _ = std::fs::remove_file(d.join(json));
        let out = lipfp(d, &["check", "--config", "p.toml", "--json", json], false);
        let r = d
            .join(json)
            .exists()
            .then(|| serde_json::from_str::<Value>(&read(d, json)).unwrap());
        (out, r)
    };
    for (keys, base) in [
        ("epsilon = \"0.3\"\n", "base.json"),
        ("epsilons = \"radii.npy\"\n", "base-radii.json"),
    ] {
        let (out, r) = run(baseline_policy(keys, None), base);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let g = &r.unwrap()["gates"][0];
        let hash = g["test_set_hash"].as_str().unwrap();
        assert_eq!(hash.len(), 64, "{g:#}");
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        if keys.starts_with("epsilons") {
            assert_eq!(g["epsilons_sha256"].as_str().unwrap().len(), 64, "{g:#}");
        }
    }

    // the same run: compared, the drop evaluated with its margin
    let (out, r) = run(
        baseline_policy("epsilon = \"0.30\"\n", Some(("base.json", true))),
        "same.json",
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let g = &r.unwrap()["gates"][0];
    assert_eq!(g["thresholds"][0]["key"], "max_vra_drop_pp");
    assert_eq!(g["thresholds"][0]["value"], 0.0, "{g:#}");
    assert_eq!(g["thresholds"][0]["margin_pp"], 1.0, "{g:#}");
    assert!(!g["notes"].to_string().contains("refused"), "{g:#}");

    // a report whose mode figures were renamed (another version's), and one of another schema
    let base_text = read(d, "base.json");
    assert!(
        base_text.starts_with("{\n  \"schema\": 1,\n"),
        "{base_text}"
    );
    std::fs::write(
        d.join("renamed.json"),
        base_text.replace("\"certified_pct\"", "\"certified_percent\""),
    )
    .unwrap();
    std::fs::write(
        d.join("schema2.json"),
        base_text.replacen("\"schema\": 1", "\"schema\": 2", 1),
    )
    .unwrap();

    // anything else is refused, naming what differs: a warning (the drop threshold is not
    // evaluated: WARN, never a quiet pass), or an error of the gate when the baseline is required
    let cases: [(&str, &str, &str); 7] = [
        (
            "epsilon = \"0.3\"\n",
            "renamed.json",
            "has no readable figures",
        ),
        (
            "epsilon = \"0.3\"\n",
            "schema2.json",
            "the report has schema 2; this lipfp reads schema 1",
        ),
        ("epsilon = \"0.25\"\n", "base.json", "the radius differs"),
        (
            "epsilon = \"0.3\"\nformat = \"float64\"\n",
            "base.json",
            "the format differs",
        ),
        (
            "epsilon = \"0.3\"\nlabels = \"y-other.npy\"\n",
            "base.json",
            "the test set",
        ),
        (
            "epsilons = \"radii-other.npy\"\n",
            "base-radii.json",
            "the radius differs",
        ),
        (
            "epsilons = \"radii.npy\"\n",
            "base.json",
            "the radius differs",
        ),
    ];
    for (keys, base, why) in cases {
        let (out, r) = run(baseline_policy(keys, Some((base, false))), "r.json");
        assert_eq!(out.code, Some(0), "{keys}: {}", out.stderr);
        let g = &r.unwrap()["gates"][0];
        let warnings = g["warnings"].to_string();
        assert!(
            warnings.contains("baseline comparison refused")
                && warnings.contains(why)
                && warnings.contains("the drop thresholds are not evaluated"),
            "{keys}: {warnings}"
        );
        assert_eq!(g["status"], "warn", "{g:#}");
        assert!(out.stdout.contains("WARN   g  ["), "{}", out.stdout);
        assert!(out
            .stdout
            .contains("       warning: baseline comparison refused"));
        assert_eq!(g["thresholds"][0]["passed"], Value::Null, "{g:#}");
        assert!(g["thresholds"][0]["skipped"]
            .as_str()
            .unwrap()
            .contains(why));

        let (out, r) = run(baseline_policy(keys, Some((base, true))), "r.json");
        assert_eq!(out.code, Some(2), "{keys}: {}", out.stdout);
        let g = &r.unwrap()["gates"][0];
        assert_eq!(g["status"], "error", "{g:#}");
        let e = g["error"].as_str().unwrap();
        assert!(
            e.contains(why) && e.contains(base) && e.contains("gate `g`"),
            "{e}"
        );
        assert!(out.stdout.contains("ERROR  g  ["), "{}", out.stdout);
    }
}

#[test]
fn thresholds_that_look_like_fractions_are_flagged_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let policy = format!(
        "[model]\npath = \"{}\"\n[data]\ninputs = \"{}\"\nlabels = \"{}\"\n\
         [[gate]]\nname = \"g\"\nepsilon = \"0.3\"\nmin_vra_pct = 0.95\nmin_certified_pct = 1.5\n",
        digits("model.onnx"),
        digits("x_test.npy"),
        digits("y_test.npy")
    );
    std::fs::write(d.join("lipfp.toml"), policy).unwrap();
    let out = lipfp(d, &["check", "--json", "r.json", "--junit", "j.xml"], true);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let flag = "min_vra_pct = 0.95 looks like a fraction";
    assert!(
        out.stderr
            .contains(&format!("lipfp: warning: gate `g` (line 7): {flag}")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("write 95 for 95%"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("min_certified_pct"),
        "1.5 is no fraction"
    );
    assert!(out.stdout.contains(flag), "{}", out.stdout);
    assert!(json(d, "r.json").to_string().contains(flag));
    assert!(read(d, "j.xml").contains(flag));
    assert!(read(d, "summary.md").contains("min\\_vra\\_pct = 0.95 looks like a fraction"));
}

#[test]
fn junit_classnames_tell_the_embedded_models_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("j.xml");
    let out = lipfp(
        root(),
        &["check", "--junit", junit.to_str().unwrap()],
        false,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let classnames: std::collections::BTreeSet<&str> = xml
        .split("classname=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert_eq!(
        classnames.into_iter().collect::<Vec<_>>(),
        ["examples/breast-cancer/model", "examples/digits/model"]
    );
}

#[test]
fn the_action_exposes_every_gate_output_and_the_readme_documents_the_action() {
    let action = read(root(), "ci/action.yml");
    let readme = read(root(), "README.md");
    let section = |name: &str| -> Vec<String> {
        let start = action.find(&format!("\n{name}:\n")).expect("section");
        action[start + name.len() + 3..]
            .lines()
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && l.trim_end().ends_with(':'))
            .map(|l| l.trim().trim_end_matches(':').to_string())
            .collect()
    };
    let inputs = section("inputs");
    let outputs = section("outputs");
    assert!(inputs.contains(&"config".to_string()), "{inputs:?}");
    for o in ["passed", "gates", "junit"] {
        assert!(outputs.contains(&o.to_string()), "{outputs:?}");
    }
    assert!(
        action.contains("value: ${{ steps.check.outputs.gates }}"),
        "the gates output must come from the check step"
    );
    for name in inputs.iter().chain(&outputs) {
        assert!(
            readme.contains(&format!("`{name}`")),
            "README does not document the action's `{name}`"
        );
    }
    assert!(readme.contains("cargo install --path ."), "installation");
    assert!(readme.contains("cargo install --git"), "installation");
    assert!(readme.contains("10 minutes"), "first-build time");
}
