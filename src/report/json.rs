//! The JSON report (names read by downstream tooling: see the README).

use std::path::Path;

use crate::error::LipfpError;
use crate::report::Report;

/// Render the report as pretty JSON.
pub fn render(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("the report serialises")
}

/// Write the report to `path` (atomically: a temporary file, then a rename).
pub fn write(report: &Report, path: &Path) -> Result<(), LipfpError> {
    let io = |e: std::io::Error| LipfpError::Io {
        path: path.to_path_buf(),
        message: format!("could not write the JSON report: {e}"),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, render(report) + "\n").map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
