//! The Mermaid checker (`tests/common/mermaid.rs`, `tests/mermaid/parse.mjs`) runs Mermaid's
//! real parser: a valid `xychart-beta` passes, broken ones are refused with the parser's own
//! message, and so is a series whose length differs from the x-axis's. Ignored without node and
//! `npm ci --prefix tests/mermaid` (see `build.rs`; `LIPFP_REQUIRE_MERMAID=1` makes that a
//! build failure).

use std::path::PathBuf;

use crate::common::mermaid::{check_mermaid, mermaid_available};

const IGNORE: &str = "needs node and `npm ci --prefix tests/mermaid`";

const VALID: &str = r#"xychart-beta
    title "Certified accuracy vs radius"
    x-axis "radius" [0, 0.1, 0.2, 0.3]
    y-axis "certified %" 0 --> 100
    line [98.4, 97.9, 96.9, 95.5]
    line [98.4, 98.0, 97.1, 95.7]"#;

/// A step summary around `chart`, as lipfp writes it: prose, a table, the fenced chart.
fn summary(dir: &tempfile::TempDir, name: &str, chart: &str) -> PathBuf {
    let path = dir.path().join(name);
    let text = format!(
        "## lipfp\n\n| gate | certified |\n|---|---|\n| g | 98.4% |\n\n```mermaid\n{chart}\n```\n\nDone.\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
#[cfg_attr(
    not(lipfp_mermaid),
    ignore = "needs node and `npm ci --prefix tests/mermaid`"
)]
fn valid_xychart_parses() {
    assert!(mermaid_available(), "{IGNORE}");
    let dir = tempfile::tempdir().unwrap();
    let md = summary(&dir, "valid.md", VALID);
    assert_eq!(check_mermaid(&md), Ok(vec!["xychart".to_owned()]));

    // named series (a legend from mermaid 11.17), two blocks
    let named = VALID.replacen("line [", "line \"real\" [", 1).replacen(
        "line [",
        "line \"sound float32\" [",
        1,
    );
    let path = dir.path().join("two.md");
    std::fs::write(
        &path,
        format!("```mermaid\n{VALID}\n```\n\ntext\n\n```mermaid\n{named}\n```\n"),
    )
    .unwrap();
    assert_eq!(
        check_mermaid(&path),
        Ok(vec!["xychart".to_owned(), "xychart".to_owned()])
    );
}

#[test]
#[cfg_attr(
    not(lipfp_mermaid),
    ignore = "needs node and `npm ci --prefix tests/mermaid`"
)]
fn broken_xycharts_are_refused_with_the_parsers_message() {
    assert!(mermaid_available(), "{IGNORE}");
    let dir = tempfile::tempdir().unwrap();

    let unclosed = VALID.replace("[0, 0.1, 0.2, 0.3]", "[0, 0.1, 0.2, 0.3");
    let e = check_mermaid(&summary(&dir, "unclosed.md", &unclosed)).unwrap_err();
    assert!(
        e.contains("mermaid block 1")
            && e.contains("lines 7-14")
            && e.contains("Parse error on line 3")
            && e.contains("Expecting 'SQUARE_BRACES_END', 'COMMA', got 'NEWLINE'"),
        "{e}"
    );

    let letters = VALID.replace("line [98.4, 98.0, 97.1, 95.7]", "line [a, b, c, d]");
    let e = check_mermaid(&summary(&dir, "letters.md", &letters)).unwrap_err();
    assert!(
        e.contains("Parse error on line 6") && e.contains("got 'ALPHA'"),
        "{e}"
    );

    // not a syntax error, but drawn with a gap: refused by the checker's own count check
    let short = VALID.replace("line [98.4, 98.0, 97.1, 95.7]", "line [98.4, 98.0, 97.1]");
    let e = check_mermaid(&summary(&dir, "short.md", &short)).unwrap_err();
    assert!(
        e.contains("line 2 has 3 values but the x-axis has 4 categories"),
        "{e}"
    );
}

#[test]
#[cfg_attr(
    not(lipfp_mermaid),
    ignore = "needs node and `npm ci --prefix tests/mermaid`"
)]
fn markdown_without_a_mermaid_block_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.md");
    std::fs::write(
        &path,
        "## lipfp\n\n````markdown\n```mermaid\nxychart-beta\n```\n````\n",
    )
    .unwrap();
    let e = check_mermaid(&path).unwrap_err();
    assert!(e.starts_with("no mermaid block"), "{e}");
}
