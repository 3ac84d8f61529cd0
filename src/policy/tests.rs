use std::path::PathBuf;

use super::*;
use crate::arith::format::Format;
use crate::bounds::certify::Mode;
use rug::Rational;

const GOOD: &str = r#"
[model]
path = "m.onnx"
format = "float32"

[data]
inputs = "x.npy"
labels = "y.npy"

[[gate]]
name = "g"
epsilon = "0.3"
min_accuracy_pct = 90
"#;

#[test]
fn parses_and_resolves_paths() {
    let p = Policy::parse(Path::new("/a/b/lipfp.toml"), GOOD).unwrap();
    assert_eq!(p.gates[0].line, 11);
    let t = &p.gates[0].target;
    assert_eq!(t.model, PathBuf::from("/a/b/m.onnx"));
    assert_eq!(t.format, Some(Format::Float32));
    assert_eq!(t.accumulate, None);
    assert_eq!(p.gates[0].modes, vec![Mode::Standard]);
    assert_eq!(t.gram_iterations, 12);
    match &p.gates[0].radius {
        Radius::Uniform { text, up } => {
            assert_eq!(text, "0.3");
            assert!(*up >= 0.3 && Rational::from_f64(*up).unwrap() >= Rational::from((3, 10)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gates_override_model_data_and_format() {
    let text = GOOD.to_string()
        + "\n[[gate]]\nname = \"h\"\nepsilon = \"0.1\"\nformat = \"float16\"\naccumulate = \"float32\"\nmodel = \"other.onnx\"\ninputs = \"x2.npy\"\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &text).unwrap();
    let t = &p.gates[1].target;
    assert_eq!(t.format, Some(Format::Float16));
    assert_eq!(t.accumulate, Some(Format::Float32));
    assert_eq!(t.model, PathBuf::from("/p/other.onnx"));
    assert_eq!(t.inputs, PathBuf::from("/p/x2.npy"));
    assert_eq!(t.labels, Some(PathBuf::from("/p/y.npy")));
    assert_ne!(p.gates[0].target, *t);
    let no_model = GOOD.replace("path = \"m.onnx\"", "");
    let e = Policy::parse(Path::new("p.toml"), &no_model)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no model"), "{e}");
}

#[test]
fn rejects_unknown_keys_naming_them() {
    let bad = GOOD.replace("min_accuracy_pct = 90", "min_accuracy = 90");
    let e = Policy::parse(Path::new("p.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("min_accuracy"), "{e}");
    let bad = GOOD.replace("format = \"float32\"", "format = \"float8\"");
    let e = Policy::parse(Path::new("p.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[model] format") && e.contains("float8"), "{e}");
    let bad = GOOD.replace("format = \"float32\"", "accumulate = \"fp32\"");
    let e = Policy::parse(Path::new("p.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("[model] accumulate") && e.contains("fp32"),
        "{e}"
    );
    let no_format = GOOD.replace("format = \"float32\"", "");
    let p = Policy::parse(Path::new("p.toml"), &no_format).unwrap();
    assert_eq!(p.gates[0].target.format, None);
    let bad = GOOD.replace("epsilon = \"0.3\"", "epsilon = 0.3");
    let e = Policy::parse(Path::new("p.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("decimal string"), "{e}");
}

#[test]
fn a_cache_section_is_refused_with_the_reason() {
    let text = GOOD.to_string() + "\n[cache]\ndir = \".lipfp-cache\"\n";
    let e = Policy::parse(Path::new("p.toml"), &text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[cache]") && e.contains("recomputes"), "{e}");
}

#[test]
fn control_characters_in_gate_names_are_refused_naming_the_line() {
    for name in ["a\\n::error ::x", "a\\rb", "a\\u0007b"] {
        let text = GOOD.replace("name = \"g\"", &format!("name = \"{name}\""));
        let e = Policy::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 11") && e.contains("control character"),
            "{e}"
        );
        assert!(!e.contains('\n') && !e.contains('\r'), "{e:?}");
    }
}

#[test]
fn decimal_parsing_is_exact() {
    assert_eq!(parse_decimal_exact("0.3").unwrap(), Rational::from((3, 10)));
    assert_eq!(
        parse_decimal_exact("1e-6").unwrap(),
        Rational::from((1, 1_000_000))
    );
    assert_eq!(parse_decimal_exact("2.5E2").unwrap(), Rational::from(250));
    assert_eq!(parse_decimal_exact(".5").unwrap(), Rational::from((1, 2)));
    assert!(parse_decimal_exact("abc").is_none());
    assert!(parse_decimal_exact("0.3.1").is_none());
    assert!(Radius::parse_decimal("-1").is_err());
}

#[test]
fn decision_and_local_budget_are_read_and_checked() {
    let p = Policy::parse(Path::new("/p/lipfp.toml"), GOOD).unwrap();
    assert_eq!(p.gates[0].target.decision, Decision::Argmax);
    assert_eq!(p.gates[0].local_budget_s, None);
    let text = GOOD.replace(
        "format = \"float32\"",
        "format = \"float32\"\ndecision = \"argmin\"",
    ) + "local_budget_s = 30\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &text).unwrap();
    assert_eq!(p.gates[0].target.decision, Decision::Argmin);
    assert_eq!(p.gates[0].local_budget_s, Some(30.0));
    // a gate's own decision overrides [model]'s
    let gate = GOOD.to_string() + "decision = \"argmin\"\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &gate).unwrap();
    assert_eq!(p.gates[0].target.decision, Decision::Argmin);
    let bad = GOOD.to_string() + "decision = \"median\"\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("decision") && e.contains("median") && e.contains("argmin"),
        "{e}"
    );
    let bad = GOOD.to_string() + "local_budget_s = -1\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("local_budget_s"), "{e}");
}

#[test]
fn per_class_thresholds_are_read_and_checked() {
    let text = GOOD.to_string() + "min_class_vra_pct = 50\nmin_class_points = 10\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &text).unwrap();
    let t = &p.gates[0].thresholds;
    assert_eq!(t.limit("min_class_vra_pct"), Some(50.0));
    assert_eq!(t.min_class_points, Some(10));
    let bad = GOOD.to_string() + "min_class_certified_pct = 150\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("min_class_certified_pct"), "{e}");
    // per-class figures need the true classes
    let unlabelled = GOOD
        .replace("labels = \"y.npy\"\n", "")
        .replace("min_accuracy_pct = 90\n", "")
        + "min_class_certified_pct = 50\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &unlabelled)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("min_class_certified_pct") && e.contains("labels"),
        "{e}"
    );
    let bad = GOOD.to_string() + "min_class_points = 0\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("min_class_points"), "{e}");
}

#[test]
fn warn_level_thresholds_are_read_and_checked_like_the_others() {
    let text = GOOD.to_string() + "warn_min_accuracy_pct = 95\nwarn_max_fp_cost_pp = 2\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &text).unwrap();
    let t = &p.gates[0].thresholds;
    assert_eq!(t.limit("min_accuracy_pct"), Some(90.0));
    let w = t.warn.as_deref().expect("a warn level");
    assert_eq!(
        (w.limit("min_accuracy_pct"), w.limit("max_fp_cost_pp")),
        (Some(95.0), Some(2.0))
    );
    assert_eq!(w.warn, None);
    // no warn key, no warn level
    let p = Policy::parse(Path::new("/p/lipfp.toml"), GOOD).unwrap();
    assert_eq!(p.gates[0].thresholds.warn, None);
    // the range and the labels are checked under the warn key's name
    let bad = GOOD.to_string() + "warn_min_certified_pct = 101\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("warn_min_certified_pct = 101"), "{e}");
    let unlabelled = GOOD
        .replace("labels = \"y.npy\"\n", "")
        .replace("min_accuracy_pct = 90\n", "")
        + "warn_min_accuracy_pct = 50\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &unlabelled)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("warn_min_accuracy_pct") && e.contains("labels"),
        "{e}"
    );
    // a warn threshold written as a fraction is flagged under its own key
    let text = GOOD.to_string() + "warn_min_accuracy_pct = 0.95\n";
    let p = Policy::parse(Path::new("/p/lipfp.toml"), &text).unwrap();
    let notes = p.gates[0].thresholds.fraction_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("warn_min_accuracy_pct = 0.95")),
        "{notes:?}"
    );
    // the policy's warnings name the gate and its line
    let warnings = p.warnings();
    let name = &p.gates[0].name;
    let line = p.gates[0].line;
    assert_eq!(warnings.len(), notes.len(), "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!(
            "gate `{name}` (line {line}): warn_min_accuracy_pct"
        )),
        "{warnings:?}"
    );
}

#[test]
fn a_baseline_is_a_report_or_certificates_never_both() {
    let text = "[baseline]\ncertificates = \"prev.lipfp\"\nrequired = true\n".to_string() + GOOD;
    let b = Policy::parse(Path::new("/p/lipfp.toml"), &text)
        .unwrap()
        .baseline
        .unwrap();
    assert_eq!(
        (b.path.as_path(), b.certificates, b.required),
        (Path::new("/p/prev.lipfp"), true, true)
    );
    for (raw, want) in [
        (
            "report = \"a.json\"\ncertificates = \"b.lipfp\"\n",
            "not both",
        ),
        ("required = true\n", "missing `report`"),
    ] {
        let text = format!("[baseline]\n{raw}") + GOOD;
        let e = Policy::parse(Path::new("/p/lipfp.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[baseline]") && e.contains(want), "{e}");
    }
    let bad = GOOD.to_string() + "max_vra_drop_significance = 5\n";
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("max_vra_drop_significance = 5") && e.contains("(0, 1]"),
        "{e}"
    );
}

#[test]
fn a_csv_test_set_names_its_label_column_and_npz_holds_its_labels() {
    let csv = GOOD
        .replace(
            "inputs = \"x.npy\"",
            "inputs = \"test.csv\"\nlabel_column = \"class\"",
        )
        .replace("labels = \"y.npy\"\n", "");
    let t = &Policy::parse(Path::new("/p/lipfp.toml"), &csv)
        .unwrap()
        .gates[0]
        .target;
    assert_eq!(t.label_column.as_deref(), Some("class"));
    assert_eq!(t.labels.as_deref(), Some(Path::new("/p/test.csv")));
    let npz = GOOD
        .replace("inputs = \"x.npy\"", "inputs = \"test.npz\"")
        .replace("labels = \"y.npy\"\n", "");
    let t = &Policy::parse(Path::new("/p/lipfp.toml"), &npz)
        .unwrap()
        .gates[0]
        .target;
    assert_eq!(t.labels.as_deref(), Some(Path::new("/p/test.npz")));
    let bad = GOOD.replace(
        "inputs = \"x.npy\"",
        "inputs = \"x.npy\"\nlabel_column = \"class\"",
    );
    let e = Policy::parse(Path::new("/p/lipfp.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("label_column") && e.contains("not a CSV"), "{e}");
}
