//! CI reporters: JUnit XML (well-formedness, structure, a JUnit schema via `xmllint` when
//! installed) and the GitHub Actions summary, annotations and outputs. Every report is built
//! directly, without running the engine.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use lipfp::arith::format::Format;
use lipfp::bounds::certify::Mode;
use lipfp::error::LipfpError;
use lipfp::gate::verdict::ThresholdCheck;
use lipfp::policy::thresholds::ThresholdDef;
use lipfp::policy::{Radius, Thresholds};
use lipfp::report::{
    console, github, junit, ErroredGate, GateReport, GateStatus, ModeReport, Report, Timing,
};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn mode(certified: usize, n: usize, vra: Option<usize>, sound: bool) -> ModeReport {
    let pct = |k: usize| (100.0 * k as f64 / n as f64 * 1e4).round() / 1e4;
    ModeReport {
        certified,
        certified_pct: pct(certified),
        vra,
        vra_pct: vra.map(pct),
        sound,
        refusals: BTreeMap::from([("margin".to_string(), n - certified)]),
        seconds: 0.01,
        conservatism_ratio: if sound { Some(1.25) } else { None },
        classes: vec![],
    }
}

/// A threshold `key` with `limit`, judged against `value` (the margin as the engine computes it).
fn check(key: &'static str, limit: f64, what: &str, value: f64) -> ThresholdCheck {
    let (def, _) = ThresholdDef::of_policy_key(key).expect("a threshold");
    let margin = def.margin(value, limit);
    ThresholdCheck {
        key,
        def,
        limit,
        what: what.to_string(),
        value: Some(value),
        margin_pp: Some(margin),
        passed: Some(margin >= 0.0),
        skipped: None,
    }
}

fn gate(name: &str, passed: Option<bool>, failures: &[&str]) -> GateReport {
    let n = 1000;
    let thresholds = match passed {
        Some(false) => vec![
            check("min_vra_pct", 95.0, "standard VRA", 94.1),
            check("max_fp_cost_pp", 1.0, "floating-point cost", 1.9),
        ],
        Some(true) => vec![check("min_vra_pct", 90.0, "standard VRA", 94.1)],
        None => vec![],
    };
    GateReport {
        name: name.to_string(),
        status: match passed {
            Some(true) => GateStatus::Pass,
            Some(false) => GateStatus::Fail,
            None => GateStatus::Report,
        },
        error: None,
        format: Some(Format::Float32),
        ftz: false,
        execution: Some("float32 storage, float32 or float64 accumulation".to_string()),
        epsilon: Some("0.3".to_string()),
        ball: "l2".to_string(),
        epsilons: None,
        epsilons_sha256: None,
        n,
        test_set_hash: Some("ef56".repeat(16)),
        accuracy_pct: Some(97.5),
        mode: Mode::Standard,
        passed,
        failures: failures.iter().map(|s| s.to_string()).collect(),
        warnings: vec![],
        thresholds,
        modes: BTreeMap::from([
            ("real".to_string(), mode(960, n, Some(950), false)),
            ("standard".to_string(), mode(941, n, Some(941), true)),
        ]),
        timing: Timing {
            norms_s: 0.25,
            certify_s: 0.5,
            reference_s: 0.0,
        },
        model: "/ci/work/examples/digits/model.v2.onnx".to_string(),
        model_name: Some("examples/digits/model.v2.onnx".to_string()),
        model_hash: Some("ab12cd34".to_string()),
        gram_iterations: 12,
        notes: vec!["3 inputs changed on conversion to float32".to_string()],
        policy_line: Some(17),
        curve: None,
        baseline_curve: None,
        attack: None,
        fp_cost_pp: Some(1.9),
        complete: None,
        regression: None,
    }
}

const FAILURES: [&str; 2] = [
    "standard VRA 94.10% < min_vra_pct 95",
    "floating-point cost 1.90 pp > max_fp_cost_pp 1",
];

/// One passing and one failing gate.
fn two_gates() -> Report {
    let mut failing = gate("breast-cancer-float32", Some(false), &FAILURES);
    failing.format = Some(Format::Float16);
    failing.ftz = true;
    failing.model = "/ci/work/examples/breast-cancer/model.onnx".to_string();
    failing.model_name = Some("examples/breast-cancer/model.onnx".to_string());
    failing.policy_line = Some(42);
    Report {
        lipfp_version: "0.1.0".to_string(),
        policy: Some("lipfp.toml".to_string()),
        gates: vec![gate("digits-float32", Some(true), &[]), failing],
    }
}

const CONV_ERROR: &str =
    "models/conv.onnx: node `/conv/Conv` (op Conv): this op is not part of a dense ReLU classifier";

/// A gate that could not be evaluated, as `lipfp check` builds it.
fn errored(name: &str) -> GateReport {
    let radius = Radius::parse_decimal("0.1").unwrap();
    let thresholds = Thresholds::default().with("min_vra_pct", 90.0).unwrap();
    GateReport::errored(
        &ErroredGate {
            name,
            format: None,
            ftz: false,
            radius: &radius,
            ball: "l2".to_string(),
            mode: Mode::Standard,
            thresholds: &thresholds,
            model: Path::new("/ci/work/models/conv.onnx"),
            model_name: Some("models/conv.onnx"),
            gram_iterations: 12,
            notes: &[],
            policy_line: Some(30),
        },
        CONV_ERROR.to_string(),
    )
}

/// A passing, a failing and an errored gate.
fn three_gates() -> Report {
    let mut r = two_gates();
    r.gates.push(errored("conv-gate"));
    r
}

// XML documents read with roxmltree (which checks well-formedness: XML 1.0 characters,
// references, CDATA, one root) into a small owned tree the JUnit checks below walk.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
    /// Character data directly inside the element (text and CDATA, references resolved).
    text: String,
}

impl Node {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn elems<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    fn all(&self, name: &str) -> Vec<&Node> {
        let mut out = Vec::new();
        for c in &self.children {
            if c.name == name {
                out.push(c);
            }
            out.extend(c.all(name));
        }
        out
    }

    /// The element `e` and everything under it.
    fn of(e: roxmltree::Node) -> Node {
        Node {
            name: e.tag_name().name().to_string(),
            attrs: (e.attributes())
                .map(|a| (a.name().to_string(), a.value().to_string()))
                .collect(),
            children: e
                .children()
                .filter(|c| c.is_element())
                .map(Node::of)
                .collect(),
            text: (e.children())
                .filter(|c| c.is_text())
                .filter_map(|c| c.text())
                .collect(),
        }
    }
}

/// Parse a complete XML 1.0 document, checking well-formedness; returns the root element.
fn parse_xml(s: &str) -> Result<Node, String> {
    let doc = roxmltree::Document::parse(s).map_err(|e| e.to_string())?;
    Ok(Node::of(doc.root_element()))
}

// ---------------------------------------------------------------------------------------------
// The JUnit structure (the checks a JUnit XSD makes, in Rust).
// ---------------------------------------------------------------------------------------------

fn is_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
    !int.is_empty()
        && !frac.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn require<'a>(node: &'a Node, key: &str) -> &'a str {
    node.attr(key)
        .unwrap_or_else(|| panic!("<{}> lacks the required attribute `{key}`", node.name))
}

fn count(node: &Node, key: &str) -> usize {
    let v = require(node, key);
    v.parse()
        .unwrap_or_else(|_| panic!("<{}> {key}={v:?} is not a count", node.name))
}

/// Root `testsuites` > `testsuite` (name, tests, failures, errors, time; counts consistent) >
/// `testcase` (name, classname, time) > at most one `failure`/`error` (with `message`), then
/// `system-out` / `system-err`.
fn check_junit_structure(root: &Node) {
    assert_eq!(root.name, "testsuites", "root element");
    assert!(!root.children.is_empty(), "no testsuite");
    for suite in &root.children {
        assert_eq!(suite.name, "testsuite", "child of <testsuites>");
        require(suite, "name");
        let time = require(suite, "time");
        assert!(is_decimal(time), "testsuite time {time:?} is not a decimal");
        for child in &suite.children {
            assert!(
                matches!(
                    child.name.as_str(),
                    "testcase" | "properties" | "system-out" | "system-err"
                ),
                "unexpected <{}> in <testsuite>",
                child.name
            );
        }
        let cases: Vec<&Node> = suite.elems("testcase").collect();
        assert_eq!(count(suite, "tests"), cases.len(), "tests attribute");
        let with = |what: &str| cases.iter().filter(|c| c.elems(what).count() > 0).count();
        assert_eq!(
            count(suite, "failures"),
            with("failure"),
            "failures attribute"
        );
        assert_eq!(count(suite, "errors"), with("error"), "errors attribute");
        for case in cases {
            require(case, "name");
            require(case, "classname");
            let time = require(case, "time");
            assert!(is_decimal(time), "testcase time {time:?} is not a decimal");
            let outcomes = case
                .children
                .iter()
                .filter(|c| matches!(c.name.as_str(), "failure" | "error" | "skipped"))
                .count();
            assert!(outcomes <= 1, "testcase with {outcomes} outcomes");
            for child in &case.children {
                match child.name.as_str() {
                    "failure" | "error" => {
                        require(child, "message");
                    }
                    "skipped" | "system-out" | "system-err" => {}
                    other => panic!("unexpected <{other}> in <testcase>"),
                }
                assert!(child.children.is_empty(), "<{}> has elements", child.name);
            }
        }
    }
}

fn parse_junit(xml: &str) -> Node {
    let root = parse_xml(xml).unwrap_or_else(|e| panic!("malformed XML: {e}\n{xml}"));
    check_junit_structure(&root);
    root
}

/// A JUnit schema for `xmllint`, restating the constraints of the Jenkins xUnit plugin's
/// `junit-10.xsd` for the elements lipfp emits and tightening them (element order, `classname`,
/// `time` and `message` required, times as plain decimals, timestamps as `xs:dateTime`): every
/// document valid here is valid for Jenkins.
const JUNIT_XSD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:simpleType name="seconds">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9]+(\.[0-9]+)?"/>
    </xs:restriction>
  </xs:simpleType>
  <xs:simpleType name="count">
    <xs:restriction base="xs:string">
      <xs:pattern value="[0-9]+"/>
    </xs:restriction>
  </xs:simpleType>
  <xs:complexType name="outcome" mixed="true">
    <xs:attribute name="type" type="xs:string"/>
    <xs:attribute name="message" type="xs:string" use="required"/>
  </xs:complexType>
  <xs:complexType name="case">
    <xs:sequence>
      <xs:choice minOccurs="0">
        <xs:element name="failure" type="outcome"/>
        <xs:element name="error" type="outcome"/>
        <xs:element name="skipped" type="outcome"/>
      </xs:choice>
      <xs:element name="system-out" type="xs:string" minOccurs="0"/>
      <xs:element name="system-err" type="xs:string" minOccurs="0"/>
    </xs:sequence>
    <xs:attribute name="name" type="xs:string" use="required"/>
    <xs:attribute name="classname" type="xs:string" use="required"/>
    <xs:attribute name="time" type="seconds" use="required"/>
  </xs:complexType>
  <xs:complexType name="suite">
    <xs:sequence>
      <xs:element name="testcase" type="case" minOccurs="0" maxOccurs="unbounded"/>
      <xs:element name="system-out" type="xs:string" minOccurs="0"/>
      <xs:element name="system-err" type="xs:string" minOccurs="0"/>
    </xs:sequence>
    <xs:attribute name="id" type="count"/>
    <xs:attribute name="name" type="xs:string" use="required"/>
    <xs:attribute name="package" type="xs:string"/>
    <xs:attribute name="tests" type="count" use="required"/>
    <xs:attribute name="failures" type="count" use="required"/>
    <xs:attribute name="errors" type="count" use="required"/>
    <xs:attribute name="skipped" type="count"/>
    <xs:attribute name="hostname" type="xs:string"/>
    <xs:attribute name="timestamp" type="xs:dateTime"/>
    <xs:attribute name="time" type="seconds" use="required"/>
  </xs:complexType>
  <xs:element name="testsuites">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="testsuite" type="suite" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string"/>
      <xs:attribute name="tests" type="count"/>
      <xs:attribute name="failures" type="count"/>
      <xs:attribute name="errors" type="count"/>
      <xs:attribute name="time" type="seconds"/>
    </xs:complexType>
  </xs:element>
</xs:schema>
"#;

// ---------------------------------------------------------------------------------------------
// JUnit
// ---------------------------------------------------------------------------------------------

#[test]
fn junit_has_one_testcase_per_gate_and_one_failure() {
    let xml = junit::render(&two_gates(), "lipfp: lipfp.toml");
    let root = parse_junit(&xml);
    let suites = root.all("testsuite");
    assert_eq!(suites.len(), 1);
    assert_eq!(suites[0].attr("name"), Some("lipfp: lipfp.toml"));
    assert_eq!(suites[0].attr("tests"), Some("2"));
    assert_eq!(suites[0].attr("failures"), Some("1"));
    assert_eq!(suites[0].attr("errors"), Some("0"));
    let suite_out = &suites[0]
        .elems("system-out")
        .next()
        .expect("suite system-out")
        .text;
    assert!(suite_out.contains("lipfp_version: 0.1.0"), "{suite_out}");
    assert!(suite_out.contains("policy: lipfp.toml"), "{suite_out}");

    let cases = root.all("testcase");
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0].attr("name"), Some("digits-float32"));
    assert_eq!(cases[1].attr("name"), Some("breast-cancer-float32"));
    // the model path as the policy names it, without the extension, dots replaced: the two
    // models are told apart, and Jenkins' split at the last dot keeps the name whole
    assert_eq!(cases[0].attr("classname"), Some("examples/digits/model_v2"));
    assert_eq!(
        cases[1].attr("classname"),
        Some("examples/breast-cancer/model")
    );
    for c in &cases {
        assert!(!require(c, "classname").contains('.'), "dot in classname");
        assert_eq!(c.attr("time"), Some("0.75"), "time = norms + certify");
    }

    let failures = root.all("failure");
    assert_eq!(failures.len(), 1);
    let message = require(failures[0], "message");
    assert_eq!(message, FAILURES.join("; "));
    assert!(!message.contains(['\n', '\r']), "message spans lines");
    let body = &failures[0].text;
    assert!(
        body.starts_with(&format!("{message}\n")),
        "body does not start with the message: {body:?}"
    );
    for figure in [
        "accuracy: 97.50%",
        "real [UNSOUND for floating-point execution]: certified 960 (96.00%), VRA 95.00%",
        "standard [gated]: certified 941 (94.10%), VRA 94.10%",
        "floating-point cost (standard): 1.90 pp",
        "note: 3 inputs changed on conversion to float32",
    ] {
        assert!(body.contains(figure), "body lacks {figure:?}:\n{body}");
    }

    // the properties are system-out lines of each testcase
    let out: Vec<&Node> = cases[1].elems("system-out").collect();
    assert_eq!(out.len(), 1);
    for prop in [
        "format: float16",
        "ftz: true",
        "epsilon: 0.3",
        "mode: standard",
        "model_hash: ab12cd34",
        "lipfp_version: 0.1.0",
    ] {
        assert!(out[0].text.contains(prop), "system-out lacks {prop:?}");
    }
    assert_eq!(cases[0].elems("failure").count(), 0);
}

#[test]
fn junit_gate_without_thresholds_passes_and_says_so() {
    let mut report = two_gates();
    report.gates = vec![gate("report-only", None, &[])];
    report.gates[0].epsilon = None;
    report.gates[0].epsilons = Some("data/radii.npy".to_string());
    let root = parse_junit(&junit::render(&report, "lipfp: lipfp.toml"));
    let cases = root.all("testcase");
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0].children.len(), 1, "only system-out");
    let out = &cases[0].elems("system-out").next().unwrap().text;
    assert!(out.starts_with("no thresholds"), "{out}");
    assert!(out.contains("epsilons: data/radii.npy"), "{out}");
}

#[test]
fn junit_escapes_hostile_strings() {
    let mut report = two_gates();
    report.gates[1].name = "evil <&>\"'\u{1} ]]> gate\u{FFFF}".to_string();
    report.gates[1].notes = vec!["a ]]> b <![CDATA[ c \u{0} &amp;".to_string()];
    report.gates[1].failures = vec!["line one\nline two".to_string()];
    report.gates[0].model_name = Some("weird.dir/my.model\u{7}.v3.onnx".to_string());
    let xml = junit::render(&report, "suite <&> \u{2}");
    let root = parse_junit(&xml);
    assert_eq!(root.all("testsuite")[0].attr("name"), Some("suite <&> "));
    let cases = root.all("testcase");
    assert_eq!(cases[1].attr("name"), Some("evil <&>\"' ]]> gate"));
    assert_eq!(cases[0].attr("classname"), Some("weird_dir/my_model_v3"));
    let failure = root.all("failure")[0];
    assert_eq!(failure.attr("message"), Some("line one line two"));
    assert!(failure.text.starts_with("line one line two\n"));
    assert!(
        failure.text.contains("note: a ]]> b <![CDATA[ c  &amp;"),
        "the CDATA text does not round-trip:\n{}",
        failure.text
    );
}

#[test]
fn junit_error_report() {
    let message =
        "lipfp.toml: unknown key `min_vra` in [[gate]] 2\n  hint: did you mean min_vra_pct?";
    let root = parse_junit(&junit::render_error("lipfp: lipfp.toml", message));
    let suite = root.all("testsuite")[0];
    assert_eq!(suite.attr("tests"), Some("1"));
    assert_eq!(suite.attr("errors"), Some("1"));
    assert_eq!(suite.attr("failures"), Some("0"));
    let case = root.all("testcase")[0];
    assert_eq!(case.attr("name"), Some("lipfp"));
    assert_eq!(case.attr("classname"), Some("lipfp"));
    let error = root.all("error")[0];
    assert_eq!(
        error.attr("message"),
        Some("lipfp.toml: unknown key `min_vra` in [[gate]] 2")
    );
    assert_eq!(error.text, message);
}

#[test]
fn junit_write_is_atomic_and_reports_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reports/nested/lipfp-junit.xml");
    let xml = junit::render(&two_gates(), "lipfp: lipfp.toml");
    junit::write(&xml, &path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "temporary file left behind: {left:?}");
    // overwrite
    junit::write("<testsuites/>\n", &path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "<testsuites/>\n");

    // a parent that is a file
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let bad = blocker.join("junit.xml");
    match junit::write(&xml, &bad) {
        Err(LipfpError::Io { path, message }) => {
            assert_eq!(path, bad);
            assert!(message.contains("JUnit"), "{message}");
        }
        other => panic!("expected an Io error, got {other:?}"),
    }
}

fn xmllint_available() -> bool {
    Command::new("xmllint")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn xmllint_validate(dir: &Path, name: &str, xml: &str) {
    let schema = dir.join("junit.xsd");
    let file = dir.join(name);
    std::fs::write(&file, xml).unwrap();
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "xmllint rejects {name}:\n{}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn junit_validates_against_the_schema_with_xmllint() {
    if !xmllint_available() {
        eprintln!(
            "skipping the XSD validation: xmllint is not installed \
             (apt-get install libxml2-utils)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junit.xsd"), JUNIT_XSD).unwrap();

    let mut hostile = two_gates();
    hostile.gates[1].name = "evil <&>\"\u{1} ]]>".to_string();
    hostile.gates[1].notes = vec!["x ]]> y".to_string()];
    hostile.gates.push(gate("report-only", None, &[]));
    let empty = Report {
        lipfp_version: "0.1.0".to_string(),
        policy: None,
        gates: vec![],
    };
    xmllint_validate(
        dir.path(),
        "two.xml",
        &junit::render(&two_gates(), "lipfp: a.toml"),
    );
    xmllint_validate(dir.path(), "hostile.xml", &junit::render(&hostile, "s <&>"));
    xmllint_validate(dir.path(), "empty.xml", &junit::render(&empty, "lipfp"));
    xmllint_validate(
        dir.path(),
        "errored.xml",
        &junit::render(&three_gates(), "lipfp: a.toml"),
    );
    xmllint_validate(
        dir.path(),
        "error.xml",
        &junit::render_error("lipfp", "x.onnx: node `n` (op Conv): unsupported\nmore"),
    );
}

#[test]
fn junit_schema_rejects_a_bad_document() {
    // the structural check itself must fail on what a schema rejects
    let bad = "<?xml version=\"1.0\"?><testsuites><testsuite name=\"s\" tests=\"1\" \
               failures=\"0\" errors=\"0\" time=\"0\"><testcase name=\"a\" time=\"0\"/>\
               </testsuite></testsuites>";
    let root = parse_xml(bad).unwrap();
    let missing_classname = std::panic::catch_unwind(|| check_junit_structure(&root));
    assert!(missing_classname.is_err());
    for malformed in [
        "<a><b></a></b>",
        "<a x=\"1\" x=\"2\"/>",
        "<a>&bogus;</a>",
        "<a>\u{1}</a>",
        "<a x=\"<\"/>",
        "<a>]]></a>",
        "<a/><b/>",
    ] {
        assert!(parse_xml(malformed).is_err(), "accepted {malformed:?}");
    }
    if xmllint_available() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("junit.xsd"), JUNIT_XSD).unwrap();
        std::fs::write(dir.path().join("bad.xml"), bad).unwrap();
        let status = Command::new("xmllint")
            .args(["--noout", "--schema"])
            .arg(dir.path().join("junit.xsd"))
            .arg(dir.path().join("bad.xml"))
            .output()
            .unwrap()
            .status;
        assert!(
            !status.success(),
            "the schema accepts a testcase without classname"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// GitHub Actions
// ---------------------------------------------------------------------------------------------

#[test]
fn github_annotations_are_escaped() {
    let mut report = two_gates();
    report.gates[1].name = "bad, gate: x".to_string();
    report.gates[1].format = Some(Format::Float32);
    report.gates[1].ftz = false;
    report.gates[1].failures = vec!["VRA 50% < 95%\r\nsecond line".to_string()];
    let lines = github::annotations(&report, "conf,igs/lip:fp.toml");
    assert_eq!(
        lines,
        vec![
            "::error file=conf%2Cigs/lip%3Afp.toml,line=42,title=lipfp gate bad%2C gate%3A x \
             failed::VRA 50%25 < 95%25%0D%0Asecond line (float32, eps 0.3, mode standard)"
                .to_string()
        ]
    );
    // no policy line: no `line=`
    report.gates[1].policy_line = None;
    let lines = github::annotations(&report, "lipfp.toml");
    assert!(
        lines[0].starts_with("::error file=lipfp.toml,title="),
        "{}",
        lines[0]
    );
    assert!(lines.iter().all(|l| !l.contains('\n') && !l.contains('\r')));
}

#[test]
fn github_annotations_are_capped_at_ten() {
    let mut report = two_gates();
    report.gates = (0..13)
        .map(|i| gate(&format!("g{i}"), Some(false), &FAILURES))
        .chain([gate("ok", Some(true), &[])])
        .collect();
    let lines = github::annotations(&report, "lipfp.toml");
    assert_eq!(lines.len(), 11);
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("::error ")).count(),
        10
    );
    assert!(
        lines[10].starts_with("::warning::3 more gates failed"),
        "{}",
        lines[10]
    );
    // exactly ten: no warning
    report.gates.truncate(10);
    assert_eq!(github::annotations(&report, "lipfp.toml").len(), 10);
    // none failing: nothing
    assert!(github::annotations(&two_gates_passing(), "lipfp.toml").is_empty());
}

/// A gate that met its thresholds but a warn-level one.
fn warned(name: &str) -> GateReport {
    let mut g = gate(name, Some(true), &[]);
    g.status = GateStatus::Warn;
    g.warnings = vec!["standard VRA 94.10% < warn_min_vra_pct 95".to_string()];
    g.thresholds
        .push(check("warn_min_vra_pct", 95.0, "standard VRA", 94.1));
    g
}

/// Warned gates are annotated as warnings beside the errors, at most ten per level with the
/// rest folded into one summarising warning; they never read as failures.
#[test]
fn warned_gates_get_warning_annotations_within_the_cap() {
    let mut report = two_gates();
    report.gates = vec![warned("w0"), gate("ok", Some(true), &[])];
    let lines = github::annotations(&report, "lipfp.toml");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("::warning file=lipfp.toml,line=17,title=lipfp gate w0 warned::")
            && lines[0].contains("warn_min_vra_pct"),
        "{}",
        lines[0]
    );
    assert_eq!(report.tally().warned, 1);
    assert!(github::step_summary(&report).contains("⚠️ warn"));
    assert!(github::outputs(&report).contains("passed=true\n"));
    // 30 failing and 30 warned gates: 10 errors; 10 warnings, two of them the summaries
    report.gates = (0..30)
        .map(|i| gate(&format!("f{i}"), Some(false), &FAILURES))
        .chain((0..30).map(|i| warned(&format!("w{i}"))))
        .collect();
    let lines = github::annotations(&report, "lipfp.toml");
    let count = |p: &str| lines.iter().filter(|l| l.starts_with(p)).count();
    assert_eq!(count("::error "), 10);
    assert_eq!(count("::warning "), 8);
    assert_eq!(count("::warning::"), 2);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("::warning::22 more gates warned")),
        "{lines:?}"
    );
}

fn two_gates_passing() -> Report {
    let mut r = two_gates();
    r.gates[1].passed = Some(true);
    r.gates[1].status = GateStatus::Pass;
    r.gates[1].failures.clear();
    r
}

#[test]
fn github_outputs_use_sanitised_keys() {
    let mut report = two_gates();
    report.gates[0].name = "digits-float32.v2 (ftz)".to_string();
    report
        .gates
        .push(gate("digits_float32_v2__ftz_", None, &[]));
    report.gates[2].accuracy_pct = None;
    for m in report.gates[2].modes.values_mut() {
        m.vra = None;
        m.vra_pct = None;
    }
    let out = github::outputs(&report);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            "passed=false",
            "digits_float32_v2__ftz__vra_pct=94.1",
            "digits_float32_v2__ftz__certified_pct=94.1",
            "digits_float32_v2__ftz__passed=true",
            "digits_float32_v2__ftz__status=pass",
            "breast_cancer_float32_vra_pct=94.1",
            "breast_cancer_float32_certified_pct=94.1",
            "breast_cancer_float32_passed=false",
            "breast_cancer_float32_status=fail",
            "digits_float32_v2__ftz__2_vra_pct=",
            "digits_float32_v2__ftz__2_certified_pct=94.1",
            "digits_float32_v2__ftz__2_passed=",
            "digits_float32_v2__ftz__2_status=report",
            lines[13],
        ]
    );
    // every per-gate output again, as one JSON value a composite action can expose
    let gates: serde_json::Value =
        serde_json::from_str(lines[13].strip_prefix("gates=").unwrap()).unwrap();
    assert_eq!(gates.as_object().unwrap().len(), 3, "{gates}");
    let g = &gates["digits-float32.v2 (ftz)"];
    assert_eq!(g["key"], "digits_float32_v2__ftz_");
    assert_eq!(g["vra_pct"], 94.1);
    assert_eq!(g["passed"], true);
    assert_eq!(g["status"], "pass");
    let g = &gates["digits_float32_v2__ftz_"];
    assert_eq!(g["key"], "digits_float32_v2__ftz__2");
    assert!(g["vra_pct"].is_null() && g["passed"].is_null(), "{g}");
    for l in &lines {
        let (key, _) = l.split_once('=').unwrap();
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{key}"
        );
    }
    assert!(github::outputs(&two_gates_passing()).starts_with("passed=true\n"));
}

#[test]
fn github_summary_has_a_table() {
    let s = github::step_summary(&two_gates());
    assert!(s.starts_with("## "), "{s}");
    assert!(
        s.contains(
            "\n| gate | mode | format | eps | accuracy | certified | VRA | real ceiling (unsound) \
             | fp cost | thresholds (margin) | result |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
        ),
        "{s}"
    );
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| gate "))
        .collect();
    assert_eq!(rows.len(), 2, "{s}");
    // a passing gate shows its thresholds and the margin to them too
    assert!(
        rows[0].contains("| min\\_vra\\_pct ≥ 90: 94.10% (+4.10 pp) ✅ | ✅ pass |"),
        "{}",
        rows[0]
    );
    assert!(rows[1].contains("❌ fail"), "{}", rows[1]);
    assert!(rows[1].contains("float16 +ftz"), "{}", rows[1]);
    assert!(rows[1].contains("96.00% (unsound)"), "{}", rows[1]);
    assert!(rows[1].contains("| 1.90 pp |"), "{}", rows[1]);
    assert!(
        rows[1].contains(
            "| min\\_vra\\_pct ≥ 95: 94.10% (-0.90 pp) ❌<br>max\\_fp\\_cost\\_pp ≤ 1: 1.90 pp \
             (-0.90 pp) ❌ |"
        ),
        "{}",
        rows[1]
    );
    assert!(s.contains("### Notes"), "{s}");

    let mut report = two_gates();
    report.gates[0] = gate("a|b", None, &[]);
    let s = github::step_summary(&report);
    assert!(
        s.contains("| a\\|b |") && s.contains("| — | ➖ report |"),
        "{s}"
    );
}

#[test]
fn github_summary_stays_below_one_mebibyte() {
    let mut report = two_gates();
    report.gates = (0..3000)
        .map(|i| {
            gate(
                &format!("gate-{i}-{}", "x".repeat(400)),
                Some(i % 2 == 0),
                &FAILURES,
            )
        })
        .collect();
    let s = github::step_summary(&report);
    assert!(s.len() <= 1_000_000, "{} bytes", s.len());
    let rows = s.lines().filter(|l| l.starts_with("| gate-")).count();
    let last = s.lines().last().unwrap();
    assert!(
        last.contains(&format!("{} gate rows", 3000 - rows)) && last.contains("omitted"),
        "{last}"
    );
    assert!(rows > 100 && rows < 3000);
}

#[test]
fn github_append_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    github::append(&path, "a=1\n").unwrap();
    github::append(&path, "b=2").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a=1\nb=2\n");
}

// ---------------------------------------------------------------------------------------------
// Errored gates
// ---------------------------------------------------------------------------------------------

#[test]
fn an_errored_gate_is_an_error_testcase_whose_message_is_the_error() {
    let root = parse_junit(&junit::render(&three_gates(), "lipfp: lipfp.toml"));
    let suite = root.all("testsuite")[0];
    assert_eq!(suite.attr("tests"), Some("3"));
    assert_eq!(suite.attr("failures"), Some("1"));
    assert_eq!(suite.attr("errors"), Some("1"));
    let case = root.all("testcase")[2];
    assert_eq!(case.attr("name"), Some("conv-gate"));
    assert_eq!(case.attr("classname"), Some("models/conv"));
    let error = case.elems("error").next().expect("an <error>");
    assert_eq!(error.attr("message"), Some(CONV_ERROR));
    assert!(error.text.starts_with(CONV_ERROR), "{}", error.text);
    assert!(
        error
            .text
            .contains("threshold min_vra_pct >= 90: not evaluated (the gate errored)"),
        "{}",
        error.text
    );
}

#[test]
fn an_errored_gate_is_annotated_summarised_output_and_printed() {
    let report = three_gates();
    let lines = github::annotations(&report, "lipfp.toml");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        lines[1],
        format!(
            "::error file=lipfp.toml,line=30,title=lipfp gate conv-gate errored::{CONV_ERROR} \
             (eps 0.1, mode standard)"
        )
    );

    let s = github::step_summary(&report);
    assert!(s.starts_with("## ❌ "), "{s}");
    assert!(
        s.contains("1 passed, 1 failed, 1 errored, 0 without thresholds (3 gates)"),
        "{s}"
    );
    let row = s
        .lines()
        .find(|l| l.starts_with("| conv-gate |"))
        .expect("a row for the errored gate");
    assert!(
        row.ends_with(
            "| min\\_vra\\_pct ≥ 90: not evaluated (the gate errored) | ⛔ error: \
             models/conv.onnx: node \\`/conv/Conv\\` (op Conv): this op is not part of a dense \
             ReLU classifier |"
        ),
        "{row}"
    );

    let out = github::outputs(&report);
    assert!(out.starts_with("passed=false\n"), "{out}");
    assert!(
        out.contains("\nconv_gate_passed=\nconv_gate_status=error\n"),
        "{out}"
    );
    assert!(out.contains("\nconv_gate_vra_pct=\n"), "{out}");

    let text = console::render(&report, false);
    assert!(
        text.contains(&format!(
            "ERROR  conv-gate  [format n/a, eps 0.1, mode standard]\n       error: {CONV_ERROR}\n"
        )),
        "{text}"
    );
    assert!(
        text.ends_with("1 passed, 1 failed, 1 errored, 0 without thresholds (3 gates)\n"),
        "{text}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&lipfp::report::json::render(&report)).unwrap();
    let g = &json["gates"][2];
    assert_eq!(g["status"], "error");
    assert_eq!(g["error"], CONV_ERROR);
    assert!(g["passed"].is_null() && g["format"].is_null(), "{g:#}");
    assert_eq!(json["gates"][0]["status"], "pass");
    assert_eq!(json["gates"][1]["status"], "fail");
}

#[test]
fn an_error_outside_every_gate_is_annotated_on_the_policy_and_summarised() {
    let message = "lipfp.toml: invalid policy: TOML parse error at line 1\n  |\n1 | [model";
    assert_eq!(
        github::error_annotation(Some("conf/lip,fp.toml"), message),
        "::error file=conf/lip%2Cfp.toml,title=lipfp error::lipfp.toml: invalid policy: TOML \
         parse error at line 1%0A  |%0A1 | [model"
    );
    assert_eq!(
        github::error_annotation(None, "x"),
        "::error title=lipfp error::x"
    );
    let s = github::error_summary(Some("lipfp.toml"), message);
    assert!(s.starts_with("## ⛔ lipfp check: lipfp.toml\n"), "{s}");
    assert!(s.contains("**error**: lipfp.toml: invalid policy"), "{s}");
    let out = github::error_outputs(message);
    assert!(
        out.starts_with("passed=false\ngates={}\nerror<<ghadelimiter_"),
        "{out}"
    );
}

#[test]
fn huge_or_missing_conservatism_ratios_print_no_infinity() {
    let mut report = two_gates();
    let modes = &mut report.gates[0].modes;
    modes.get_mut("standard").unwrap().conservatism_ratio = Some(1e300);
    let text = console::render(&report, false);
    assert!(text.contains("fp degradation 1.000e300 x L eps"), "{text}");
    assert!(junit::render(&report, "s").contains("fp degradation 1.000e300 x L eps"));
    report.gates[0]
        .modes
        .get_mut("standard")
        .unwrap()
        .conservatism_ratio = None;
    let text = console::render(&report, false);
    assert!(text.contains("fp degradation n/a"), "{text}");
    assert!(!text.contains("inf"), "{text}");
}

/// Without `-v` every distinct note is printed once, after the gates, shortened and naming
/// the gate that carries it (or how many, or every gate); `--verbose` prints every note in
/// full under every gate. JUnit keeps every note in every testcase.
#[test]
fn the_console_says_each_note_once() {
    let mut report = two_gates();
    let shared = "runtime: IEEE execution only";
    let long = format!("own note of the second {}", "and more words ".repeat(10));
    report.gates[0].notes = vec![shared.into(), "own note of the first".into()];
    report.gates[1].notes = vec![long.clone(), shared.into()];
    let text = console::render(&report, false);
    assert_eq!(text.matches(shared).count(), 1, "{text}");
    let (gates, notes) = text
        .split_once("notes (each once, shortened; -v prints every note in full under its gate):\n")
        .expect("a notes section");
    assert!(!gates.contains("note"), "{text}");
    let first = &report.gates[0].name;
    let second = &report.gates[1].name;
    let shown = format!("  {second}: own note of the second and more words and more words");
    assert_eq!(
        notes.lines().collect::<Vec<_>>()[..2],
        [
            format!("  every gate: {shared}"),
            format!("  {first}: own note of the first"),
        ]
    );
    let third = notes.lines().nth(2).unwrap();
    assert!(third.starts_with(&shown) && third.ends_with('…'), "{text}");
    assert!(!text.contains(&long), "{text}");
    assert_eq!(
        notes.lines().filter(|l| l.starts_with("  ")).count(),
        3,
        "{text}"
    );
    let verbose = console::render(&report, true);
    assert_eq!(verbose.matches(shared).count(), 2, "{verbose}");
    assert!(
        verbose.contains(&format!("       note: {long}\n")),
        "{verbose}"
    );
    assert!(!verbose.contains("notes (each once"), "{verbose}");
    assert!(verbose.contains("       time: norms"), "{verbose}");
    assert_eq!(junit::render(&report, "s").matches(shared).count(), 2);
    // shared by some gates only: counted
    let mut three = report.clone();
    let mut third = three.gates[1].clone();
    third.name = "third".into();
    third.notes.clear();
    three.gates.push(third);
    let text = console::render(&three, false);
    assert!(text.contains(&format!("  2 gates: {shared}\n")), "{text}");
}

/// Prints the rendered reports (`cargo test --test report reporters::show_rendered_reports -- --ignored --nocapture`).
#[test]
#[ignore]
fn show_rendered_reports() {
    let mut r = three_gates();
    r.gates.push(gate("report-only", None, &[]));
    println!("{}", junit::render(&r, "lipfp: lipfp.toml"));
    println!(
        "{}",
        junit::render_error("lipfp: lipfp.toml", "x.toml: bad\nmore")
    );
    println!("{}", github::step_summary(&r));
    println!("{}", github::annotations(&r, "lipfp.toml").join("\n"));
    println!("{}", github::outputs(&r));
}

/// The pull-request comment: the marker first, one row per gate with its verdict, and never
/// above 64 KiB (with 200 gates of long names, the rows that do not fit are counted).
#[test]
fn pr_comment_is_marked_and_bounded() {
    use lipfp::report::pr_comment::{render, MARKER, PR_COMMENT_LIMIT_BYTES};
    let report = two_gates();
    let body = render(&report);
    assert!(body.starts_with(MARKER), "{body}");
    for g in &report.gates {
        assert!(body.contains(&g.name), "{body}");
    }
    assert!(body.contains("❌"), "{body}");
    let mut big = two_gates();
    big.gates = (0..200)
        .map(|i| {
            gate(
                &format!("gate {i} {}", "x".repeat(300)),
                Some(i % 3 != 0),
                &FAILURES,
            )
        })
        .collect();
    let body = render(&big);
    assert!(body.len() <= PR_COMMENT_LIMIT_BYTES, "{}", body.len());
    assert!(
        body.contains("more gates not shown"),
        "{}",
        &body[body.len() - 300..]
    );
    assert!(body.starts_with(MARKER));
}

/// A gate compared point by point with a certificate baseline shows the regression in the
/// summary (VRA with intervals, lost and gained per class, the first lost indices) and on the
/// console; the JSON report holds every lost index.
#[test]
fn a_per_point_regression_is_shown_where_reviewers_look() {
    let mut report = two_gates_passing();
    let before = vec![true; 60];
    let mut now = before.clone();
    now[10..35].fill(false);
    let labels: Vec<usize> = (0..60).map(|i| i % 3).collect();
    report.gates[0].regression = Some(lipfp::gate::regression::of_verdicts(
        "prev.lipfp",
        &before,
        &now,
        &labels,
    ));
    let summary = github::step_summary(&report);
    assert!(summary.contains("### Against the baseline"), "{summary}");
    assert!(
        summary.contains("25 lost / 0 gained (McNemar p = 6.0e-8)"),
        "{summary}"
    );
    assert!(summary.contains("| 1 | 9 | 0 |"), "{summary}");
    assert!(
        summary.contains("Lost (test-set indices): 10, 11,") && summary.contains("and 5 more"),
        "{summary}"
    );
    let console = lipfp::report::console::render(&report, false);
    assert!(console.contains("baseline: VRA 100.00%"), "{console}");
    let json: serde_json::Value =
        serde_json::from_str(&lipfp::report::json::render(&report)).unwrap();
    assert_eq!(
        json["gates"][0]["regression"]["lost"]
            .as_array()
            .unwrap()
            .len(),
        25
    );
}

/// `text` with the JUnit suites' render-time `timestamp` attributes blanked.
fn untimestamped(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("timestamp=\"") {
        let value = &rest[i + "timestamp=\"".len()..];
        let end = value.find('"').unwrap_or(value.len());
        out.push_str(&rest[..i]);
        out.push_str("timestamp=\"T\"");
        rest = &value[(end + 1).min(value.len())..];
    }
    out.push_str(rest);
    out
}

/// Every reporter's output for three gates (passing, failing, errored), pinned by snapshot
/// files in `tests/report/snapshots/` (`cargo insta review` after an intended change).
#[test]
fn every_reporter_output_is_pinned() {
    let r = three_gates();
    insta::assert_snapshot!("console", console::render(&r, false));
    insta::assert_snapshot!("console_verbose", console::render(&r, true));
    insta::assert_snapshot!(
        "junit",
        untimestamped(&junit::render(&r, "lipfp: lipfp.toml"))
    );
    insta::assert_snapshot!("step_summary", github::step_summary(&r));
    insta::assert_snapshot!(
        "annotations",
        github::annotations(&r, "lipfp.toml").join("\n")
    );
    insta::assert_snapshot!("outputs", github::outputs(&r));
    insta::assert_snapshot!("pr_comment", lipfp::report::pr_comment::render(&r));
    insta::assert_snapshot!("json", lipfp::report::json::render(&r));
}

/// A JSON report reads back as a baseline into the figures it was written from: each mode
/// through the same `ModeReport` type, the gate's identity by the names it is written under.
#[test]
fn a_json_report_reads_back_as_its_own_baseline() {
    use lipfp::gate::baseline::{Baseline, Identity};
    let r = two_gates_passing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    std::fs::write(&path, lipfp::report::json::render(&r)).unwrap();
    let baseline = Baseline::load(&path).unwrap();
    for g in &r.gates {
        let now = Identity {
            epsilon: g.epsilon.clone(),
            epsilons_sha256: g.epsilons_sha256.clone(),
            format: g.format.map(|f| f.name().to_string()),
            execution: g.execution.clone(),
            test_set_hash: g.test_set_hash.clone(),
            ball: Some(g.ball.clone()),
        };
        for (mode, m) in &g.modes {
            let back = baseline
                .compare(&g.name, mode, &now)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.certified_pct, m.certified_pct);
            assert_eq!(back.vra_pct, m.vra_pct);
        }
    }
}
