//! JUnit XML report, for CI systems that display test results (Jenkins, GitLab, GitHub test
//! reporters, Azure Pipelines).
//!
//! One `testsuite` per policy, one `testcase` per gate — never one per test point — named by
//! the gate, with the model as the classname. A gate that fails its thresholds becomes a
//! `failure` whose `message` is a one-line verdict and whose body repeats that line first and
//! then every figure (GitLab shows only the body); a gate that could not be evaluated becomes
//! an `error` whose `message` is the error. A gate without thresholds is a passing testcase
//! whose `system-out` says so. The `junit-report` crate has no
//! `properties` element, so the per-gate properties (format, ftz, epsilon, mode, model hash,
//! tool version) are `name: value` lines at the top of each testcase's `system-out`, and the tool
//! version and policy go into the suite's `system-out`.
//!
//! Like every reporter this only formats [`Report`]; the one derived figure is the
//! floating-point cost (real certified rate minus the gated mode's certified rate).
//!
//! The suite's `timestamp` is the time of rendering (the crate's default): the renderer is
//! called right after the run, so it is the run's time.

use std::fmt::Write as _;
use std::path::Path;

use junit_report::{Duration, ReportBuilder, TestCase, TestCaseBuilder, TestSuiteBuilder};

use crate::bounds::certify::Mode;
use crate::error::LipfpError;
use crate::policy::thresholds::Direction;
use crate::report::figure_text::{fmt_pct, fmt_ratio};
use crate::report::{GateReport, GateStatus, ModeReport, Report};

/// Classname and name of the single testcase of [`render_error`].
const ERROR_CASE: &str = "lipfp";

/// Remove the characters XML 1.0 forbids (control characters other than tab, newline and
/// carriage return, U+FFFE and U+FFFF). C1 controls and DEL are allowed by XML 1.0 but are
/// removed too: they only garble CI displays.
fn xml_chars(s: &str) -> String {
    s.chars()
        .filter(|&c| {
            !((c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
                || c == '\u{FFFE}'
                || c == '\u{FFFF}')
        })
        .collect()
}

/// A string safe for an attribute value: forbidden characters removed, and tab, newline and
/// carriage return turned into spaces (a parser would normalise them to spaces anyway, so the
/// value reads back the same).
fn attr(s: &str) -> String {
    xml_chars(s)
        .chars()
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A string safe for a CDATA section: forbidden characters removed, and every `]]>` split
/// across two CDATA sections (`]]` ends the first, `>` starts the second) so the text reads
/// back unchanged.
fn cdata(s: &str) -> String {
    xml_chars(s).replace("]]>", "]]]]><![CDATA[>")
}

/// Seconds as a `Duration`, clamped to a non-negative finite range the `time` crate accepts.
fn duration(seconds: f64) -> Duration {
    if seconds.is_finite() && seconds > 0.0 {
        Duration::seconds_f64(seconds.min(1e12))
    } else {
        Duration::ZERO
    }
}

/// The testcase classname of a model: its path as the policy names it (relative to the policy
/// file), without the extension, `.` components dropped and every remaining dot replaced by
/// `_` (Jenkins splits a classname into package and class at its last dot; this keeps it
/// whole), e.g. `examples/digits/model.onnx` -> `examples/digits/model`.
fn classname(model: &str) -> String {
    let path = Path::new(model);
    let without_ext = match (path.parent(), path.file_stem()) {
        (Some(dir), Some(stem)) if !stem.is_empty() => dir.join(stem),
        _ => path.to_path_buf(),
    };
    let parts: Vec<String> = without_ext
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .map(|c| c.as_os_str().to_string_lossy().replace('.', "_"))
        .collect();
    let name = parts.join("/").replace("//", "/");
    if name.is_empty() {
        "model".to_string()
    } else {
        attr(&name)
    }
}

/// The one-line verdict of a failing gate: its failed thresholds joined with `"; "`.
fn verdict_line(g: &GateReport) -> String {
    let line = g
        .failures
        .iter()
        .map(|f| attr(f).trim().to_string())
        .filter(|f| !f.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if line.is_empty() {
        "gate failed its thresholds".to_string()
    } else {
        line
    }
}

/// The modes of a gate in the canonical order, then any other (unknown) names.
fn ordered_modes(g: &GateReport) -> Vec<(&str, &ModeReport)> {
    let mut out: Vec<(&str, &ModeReport)> = Mode::ALL
        .iter()
        .filter_map(|m| g.modes.get_key_value(m.name()))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    for (k, v) in &g.modes {
        if Mode::ALL.iter().all(|m| m.name() != k) {
            out.push((k.as_str(), v));
        }
    }
    out
}

/// Every figure of a gate, one per line.
fn figures(g: &GateReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "points: {}", g.n);
    let _ = writeln!(
        out,
        "accuracy: {}",
        fmt_pct(g.accuracy_pct, "n/a (no labels)")
    );
    let gated = g.mode.name();
    for (name, m) in ordered_modes(g) {
        let mut label = name.to_string();
        if !m.sound {
            label.push_str(" [UNSOUND for floating-point execution]");
        }
        if name == gated {
            label.push_str(" [gated]");
        }
        let ratio = match (m.conservatism_ratio, m.sound) {
            (Some(r), _) => format!(", fp degradation {} x L eps", fmt_ratio(r)),
            (None, true) => ", fp degradation n/a".to_string(),
            (None, false) => String::new(),
        };
        let _ = writeln!(
            out,
            "{label}: certified {} ({:.2}%), VRA {}{ratio}",
            m.certified,
            m.certified_pct,
            fmt_pct(m.vra_pct, "n/a (no labels)")
        );
    }
    if let Some(cost) = g.fp_cost_pp {
        let _ = writeln!(
            out,
            "floating-point cost ({gated}): {cost:.2} pp (real certified minus {gated} certified)"
        );
    }
    if let Some(line) = crate::report::attack::bracket_line(g) {
        let _ = writeln!(out, "attack: {line}");
    }
    if let Some(c) = &g.complete {
        let _ = writeln!(out, "{}", c.line());
    }
    for f in &g.failures {
        let _ = writeln!(out, "failed: {f}");
    }
    for w in &g.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    thresholds(&mut out, g);
    for n in &g.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "time: norms {:.3}s, certify {:.3}s",
        g.timing.norms_s, g.timing.certify_s
    );
    out
}

/// One line per threshold: the limit, the figure and the margin to it.
fn thresholds(out: &mut String, g: &GateReport) {
    for c in &g.thresholds {
        let op = match c.def.direction {
            Direction::AtLeast => ">=",
            Direction::AtMost => "<=",
        };
        let unit = c.def.unit_suffix();
        match (c.value, c.margin_pp) {
            (Some(v), Some(m)) => {
                let _ = writeln!(
                    out,
                    "threshold {} {op} {}: {} {v:.2}{unit}, margin {m:+.2} pp",
                    c.key, c.limit, c.what
                );
            }
            _ => {
                let why = c.skipped.as_deref().unwrap_or("not evaluated");
                let _ = writeln!(
                    out,
                    "threshold {} {op} {}: not evaluated ({why})",
                    c.key, c.limit
                );
            }
        }
    }
}

/// The per-gate properties as `name: value` lines.
fn properties(g: &GateReport, version: &str) -> String {
    let mut out = String::new();
    if let Some(f) = g.format {
        let _ = writeln!(out, "format: {f}");
    }
    let _ = writeln!(out, "ftz: {}", g.ftz);
    match (&g.epsilon, &g.epsilons) {
        (Some(e), _) => {
            let _ = writeln!(out, "epsilon: {e}");
        }
        (None, Some(p)) => {
            let _ = writeln!(out, "epsilons: {p}");
        }
        (None, None) => {}
    }
    if g.ball != "l2" {
        let _ = writeln!(out, "input set: {}", g.ball);
    }
    let _ = writeln!(out, "mode: {}", g.mode);
    let _ = writeln!(out, "model: {}", g.model);
    if let Some(h) = &g.model_hash {
        let _ = writeln!(out, "model_hash: {h}");
    }
    if let Some(h) = &g.test_set_hash {
        let _ = writeln!(out, "test_set_hash: {h}");
    }
    let _ = writeln!(out, "gram_iterations: {}", g.gram_iterations);
    if let Some(line) = g.policy_line {
        let _ = writeln!(out, "policy_line: {line}");
    }
    let _ = writeln!(out, "lipfp_version: {version}");
    out
}

/// The testcase of one gate.
fn testcase(g: &GateReport, version: &str) -> TestCase {
    let name = attr(&g.name);
    let time = duration(g.timing.norms_s + g.timing.certify_s);
    let props = properties(g, version);
    let (mut builder, out) = match g.status {
        GateStatus::Error => {
            let error = g
                .error
                .as_deref()
                .unwrap_or("the gate could not be evaluated");
            let mut b = TestCaseBuilder::error(&name, time, "error", attr(error).trim());
            let body = if g.modes.is_empty() {
                let mut t = String::new();
                thresholds(&mut t, g);
                for n in &g.notes {
                    let _ = writeln!(t, "note: {n}");
                }
                format!("{error}\n\n{t}")
            } else {
                format!("{error}\n\n{}", figures(g))
            };
            b.set_trace(&cdata(&body));
            (b, props)
        }
        GateStatus::Fail => {
            let line = verdict_line(g);
            let body = format!("{line}\n\n{}", figures(g));
            let mut b = TestCaseBuilder::failure(&name, time, "threshold", &line);
            b.set_trace(&cdata(&body));
            (b, props)
        }
        GateStatus::Pass => (
            TestCaseBuilder::success(&name, time),
            format!("passed\n\n{props}\n{}", figures(g)),
        ),
        GateStatus::Warn => (
            TestCaseBuilder::success(&name, time),
            format!(
                "passed with warnings (warn-level thresholds never fail a gate)\n\n{props}\n{}",
                figures(g)
            ),
        ),
        GateStatus::Report => (
            TestCaseBuilder::success(&name, time),
            format!(
                "no thresholds: this gate reports and never fails\n\n{props}\n{}",
                figures(g)
            ),
        ),
    };
    builder.set_classname(&classname(g.model_name.as_deref().unwrap_or(&g.model)));
    builder.set_system_out(&cdata(&out));
    builder.build()
}

/// Serialise a JUnit report built by this module.
fn to_string(report: &junit_report::Report) -> String {
    let mut out = Vec::new();
    report
        .write_xml(&mut out)
        .expect("writing XML to memory cannot fail");
    let mut xml = String::from_utf8(out).expect("the XML is built from UTF-8 strings");
    xml.push('\n');
    xml
}

/// Render `report` as JUnit XML: one testsuite named `suite_name` (e.g. `"lipfp: lipfp.toml"`)
/// with one testcase per gate.
///
/// Testcase name = gate name; classname = the model as the policy names it, without the
/// extension, dots replaced by `_` (see `classname`); time = norms + certify seconds. A gate
/// that could not be evaluated (`status == error`) has an `error` whose `message` is the
/// error (on one line) and whose body is the error, then the thresholds it did not evaluate. A failing gate (`passed == Some(false)`) has a `failure`
/// whose `message` is the one-line verdict (its failed thresholds joined with `"; "`) and whose
/// body repeats that line first, then every figure (accuracy, each mode with `real` labelled
/// UNSOUND, the floating-point cost, the notes). The gate's properties (format, ftz, epsilon or
/// epsilons file, mode, model, model hash, Gram iterations, tool version) are `name: value`
/// lines in its `system-out`; a gate without thresholds is a passing testcase whose
/// `system-out` starts with "no thresholds". Characters XML 1.0 forbids are removed.
pub fn render(report: &Report, suite_name: &str) -> String {
    let version = attr(&report.lipfp_version);
    let mut suite_out = format!("lipfp_version: {version}\n");
    if let Some(p) = &report.policy {
        let _ = writeln!(suite_out, "policy: {p}");
    }
    let suite = TestSuiteBuilder::new(&attr(suite_name))
        .add_testcases(report.gates.iter().map(|g| testcase(g, &version)))
        .set_system_out(&cdata(&suite_out))
        .build();
    to_string(&ReportBuilder::new().add_testsuite(suite).build())
}

/// Render a run that failed with a usage, model, data or policy error (exit code 2): one
/// testsuite named `suite_name` with one testcase (name and classname `lipfp`) carrying an
/// `error` whose `message` is the error's first line and whose body is the full message.
pub fn render_error(suite_name: &str, message: &str) -> String {
    let first = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("lipfp failed");
    let mut case = TestCaseBuilder::error(ERROR_CASE, Duration::ZERO, "error", &attr(first));
    case.set_classname(ERROR_CASE).set_trace(&cdata(message));
    let suite = TestSuiteBuilder::new(&attr(suite_name))
        .add_testcase(case.build())
        .build();
    to_string(&ReportBuilder::new().add_testsuite(suite).build())
}

/// Write rendered XML to `path` atomically (a temporary file next to it, then a rename),
/// creating the parent directory. Fails with [`LipfpError::Io`] naming `path`.
pub fn write(xml: &str, path: &Path) -> Result<(), LipfpError> {
    crate::files::write_atomic(path, xml.as_bytes(), "JUnit report")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_characters_are_removed() {
        assert_eq!(xml_chars("a\u{1}b\tc\u{FFFF}\u{7f}"), "ab\tc");
        assert_eq!(attr("a\nb\r\tc"), "a b  c");
    }

    #[test]
    fn cdata_end_is_split() {
        assert_eq!(cdata("x]]>y"), "x]]]]><![CDATA[>y");
    }

    #[test]
    fn classname_is_the_model_path_without_extension_or_dots() {
        assert_eq!(classname("models/v1.2/net.v3.onnx"), "models/v1_2/net_v3");
        assert_eq!(
            classname("./examples/digits/model.onnx"),
            "examples/digits/model"
        );
        assert_eq!(classname("model.onnx"), "model");
        assert_eq!(classname(""), "model");
    }

    #[test]
    fn durations_are_clamped() {
        assert_eq!(duration(f64::NAN), Duration::ZERO);
        assert_eq!(duration(-1.0), Duration::ZERO);
        assert!(duration(f64::INFINITY) == Duration::ZERO);
        assert!(duration(1e300) > Duration::ZERO);
    }
}
