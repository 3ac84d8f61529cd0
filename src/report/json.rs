//! The JSON report (names read by downstream tooling: see docs/formats.md).

use std::path::Path;

use crate::error::LipfpError;
use crate::report::Report;

/// Render the report as pretty JSON.
pub fn render(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("the report serialises")
}

/// Write the report to `path` (atomically: a temporary file, then a rename).
pub fn write(report: &Report, path: &Path) -> Result<(), LipfpError> {
    crate::files::write_atomic(path, (render(report) + "\n").as_bytes(), "JSON report")
}
