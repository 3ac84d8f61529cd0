//! Checking the Mermaid charts lipfp writes (the GitHub step summary's ```` ```mermaid ````
//! blocks) with Mermaid's own parser: `node tests/mermaid/parse.mjs FILE.md`, with the `mermaid`
//! and `jsdom` versions pinned in `tests/mermaid/package-lock.json`
//! (`npm ci --prefix tests/mermaid`, which `.ci/run` does).
//!
//! Without node or the installed packages the tests that need them are reported as ignored
//! (`cfg(lipfp_mermaid)`, see `build.rs`), and with `LIPFP_REQUIRE_MERMAID=1` the build fails
//! instead.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/mermaid`: the checker script and its `node_modules`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mermaid")
}

/// The node executable: `$LIPFP_NODE`, else `node`.
fn node() -> String {
    std::env::var("LIPFP_NODE").unwrap_or_else(|_| "node".into())
}

/// Whether [`check_mermaid`] can run: node runs and `tests/mermaid/node_modules` holds mermaid
/// and jsdom.
pub fn mermaid_available() -> bool {
    let modules = dir().join("node_modules");
    modules.join("mermaid/package.json").is_file()
        && modules.join("jsdom/package.json").is_file()
        && Command::new(node())
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
}

/// Parses every ```` ```mermaid ```` block of `markdown` with `mermaid.parse`; `Ok` holds the
/// blocks' diagram types in order (`"xychart"` for `xychart-beta`), `Err` the parser's messages
/// (one per failing block, naming the block's lines) or why nothing was checked (no mermaid
/// block: exit status 3; the checker could not run: 2).
///
/// Besides Mermaid's syntax errors the checker refuses an xychart `line`/`bar` whose number of
/// values differs from the x-axis's number of categories (Mermaid draws it silently wrong).
pub fn check_mermaid(markdown: &Path) -> Result<Vec<String>, String> {
    let script = dir().join("parse.mjs");
    let out = Command::new(node())
        .arg(&script)
        .arg(markdown)
        .output()
        .map_err(|e| format!("cannot run `{} {}`: {e}", node(), script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => stdout
            .lines()
            .map(|l| {
                l.strip_prefix("ok ")
                    .map(str::to_owned)
                    .ok_or_else(|| format!("unexpected checker output {l:?} in:\n{stdout}"))
            })
            .collect(),
        Some(1) => Err(stderr.trim_end().to_owned()),
        Some(3) => Err(format!("no mermaid block: {}", stderr.trim_end())),
        code => Err(format!(
            "the mermaid checker failed (exit status {code:?}): {}{}",
            stderr.trim_end(),
            stdout.trim_end()
        )),
    }
}
