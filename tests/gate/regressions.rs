//! Per-point regression against a certificate baseline (`[baseline] certificates`), end to end:
//! the digits model certified once as the baseline, then "retrained" variants (class 3's output
//! row scaled by `tests/conformance/scale_class.py`). The points lost and gained must equal a
//! per-point diff of the two runs' certificate files, the McNemar p-value must equal an
//! independent exact computation in Python (`math.comb`), `--regressions` must hold the lost
//! indices, and `max_vra_drop_significance = 0.05` must pass a drop that is noise and fail one
//! that is not.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::runtime::{python, read_npy};
use lipfp::report::certificates;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The digits policy on `model`, one gate at eps 0.1, with `extra` appended.
fn policy(dir: &Path, name: &str, model: &Path, extra: &str) -> PathBuf {
    let d = root().join("examples/digits");
    let text = format!(
        "[model]\npath = {model:?}\n[data]\ninputs = {:?}\nlabels = {:?}\n\n\
         [[gate]]\nname = \"digits\"\nepsilon = \"0.1\"\nmin_vra_pct = 10\n\
         max_vra_drop_significance = 0.05\n{extra}",
        d.join("x_test.npy"),
        d.join("y_test.npy")
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `lipfp check` with `args`: exit code and the JSON report's first gate.
fn check(policy: &Path, args: &[&Path]) -> (i32, serde_json::Value) {
    let json = policy.with_extension("json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.args(["check", "-q", "--config"])
        .arg(policy)
        .arg("--json")
        .arg(&json)
        .env_remove("GITHUB_ACTIONS");
    for pair in args.chunks(2) {
        cmd.arg(pair[0]).arg(pair[1]);
    }
    let out = cmd.output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), report["gates"][0].clone())
}

/// Each point's verified robustness in the standard mode of the file's one gate.
fn vra_flags(path: &Path) -> Vec<bool> {
    let file = certificates::read(path).unwrap();
    let merged = certificates::merge(&[(path.to_path_buf(), file)]).unwrap();
    let g = &merged[0];
    let mode = g
        .outcome
        .modes
        .iter()
        .find(|m| m.mode.name() == "standard")
        .unwrap();
    let labelled = g.labelled.as_ref().unwrap();
    mode.verdicts
        .iter()
        .zip(labelled)
        .map(|(&c, &(_, ok))| c && ok)
        .collect()
}

/// McNemar's exact two-sided p-value from Python's exact integers.
fn python_mcnemar(lost: usize, gained: usize) -> f64 {
    let code = format!(
        "from math import comb\nfrom fractions import Fraction\nb, c = {lost}, {gained}\n\
         n = b + c\np = Fraction(1) if n == 0 else min(Fraction(1), Fraction(2 * sum(comb(n, k) \
         for k in range(min(b, c) + 1)), 2 ** n))\nprint(float(p))"
    );
    let out = Command::new(python()).args(["-c", &code]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn indices(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
#[cfg_attr(
    not(lipfp_onnxruntime),
    ignore = "needs a Python with onnx (set LIPFP_PYTHON) to write the retrained models"
)]
fn lost_points_are_a_per_point_diff_and_only_a_significant_drop_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base_model = root().join("examples/digits/model.onnx");
    let base_certs = dir.join("base.lipfp");
    let (code, _) = check(
        &policy(dir, "base.toml", &base_model, ""),
        &[Path::new("--certificates"), &base_certs],
    );
    assert_eq!(code, 0);
    let before = vra_flags(&base_certs);
    let baseline = format!("[baseline]\ncertificates = {base_certs:?}\n");
    // (class 3 scale, drop significant at 0.05)
    for (scale, significant) in [("0.5", true), ("0.9", false)] {
        let model = dir.join(format!("m{scale}.onnx"));
        common::runtime::scale_class(&base_model, &model, 3, scale);
        let (now_certs, lost_file) = (dir.join("now.lipfp"), dir.join("lost.npy"));
        let (code, gate) = check(
            &policy(dir, &format!("now{scale}.toml"), &model, &baseline),
            &[
                Path::new("--certificates"),
                &now_certs,
                Path::new("--regressions"),
                &lost_file,
            ],
        );
        let r = &gate["regression"];
        let (lost, gained) = (indices(&r["lost"]), indices(&r["gained"]));
        // the per-point diff of the two certificate files
        let now = vra_flags(&now_certs);
        let want_lost: Vec<usize> = (0..now.len()).filter(|&i| before[i] && !now[i]).collect();
        let want_gained: Vec<usize> = (0..now.len()).filter(|&i| now[i] && !before[i]).collect();
        assert_eq!(
            (&lost, &gained),
            (&want_lost, &want_gained),
            "scale {scale}"
        );
        assert!(
            !lost.is_empty(),
            "scale {scale}: nothing lost, nothing tested"
        );
        let (file, _) = read_npy::<u64>(&lost_file);
        assert_eq!(file, lost.iter().map(|&i| i as u64).collect::<Vec<_>>());
        // McNemar against Python's exact integers
        let p = r["p_value"].as_f64().unwrap();
        let want = python_mcnemar(lost.len(), gained.len());
        assert!(
            (p - want).abs() <= 1e-12 * want,
            "scale {scale}: p {p} vs {want}"
        );
        assert_eq!(p < 0.05, significant, "scale {scale}: p {p}");
        // per class: all of them in class 3 or elsewhere, summing to the totals
        let by_class: usize = indices(&r["lost_by_class"]).iter().sum();
        assert_eq!(by_class, lost.len());
        if significant {
            assert_eq!(code, 1, "{gate}");
            let failure = gate["failures"][0].as_str().unwrap();
            assert!(failure.contains("max_vra_drop_significance"), "{failure}");
        } else {
            assert_eq!(code, 0, "{gate}");
            assert_eq!(gate["status"], "pass", "{gate}");
        }
    }
}

/// Without the baseline file (a first run) the gate passes with a note unless `required`.
#[test]
fn a_first_run_without_the_baseline_passes_unless_required() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let model = root().join("examples/digits/model.onnx");
    let missing = dir.join("none.lipfp");
    let baseline = format!("[baseline]\ncertificates = {missing:?}\n");
    let (code, gate) = check(&policy(dir, "first.toml", &model, &baseline), &[]);
    assert_eq!(code, 0, "{gate}");
    assert_eq!(gate["status"], "pass");
    let skipped = gate["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "max_vra_drop_significance")
        .unwrap();
    assert!(skipped["passed"].is_null(), "{skipped}");
    let required = format!("[baseline]\ncertificates = {missing:?}\nrequired = true\n");
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .args(["check", "-q", "--config"])
        .arg(policy(dir, "required.toml", &model, &required))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.lipfp"));
}
