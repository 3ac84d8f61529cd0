//! The JSON report (names read by downstream tooling: see docs/formats.md).

use std::path::Path;

use serde::Serialize;

use crate::error::LipfpError;
use crate::gate::baseline::REPORT_SCHEMA;
use crate::report::Report;

/// The report with its schema version first.
#[derive(Serialize)]
struct Versioned<'a> {
    schema: u64,
    #[serde(flatten)]
    report: &'a Report,
}

/// Render the report as pretty JSON: `{"schema": 1, "lipfp_version": ..., ...}`.
pub fn render(report: &Report) -> String {
    let versioned = Versioned {
        schema: REPORT_SCHEMA,
        report,
    };
    serde_json::to_string_pretty(&versioned).expect("the report serialises")
}

/// Write the report to `path` (atomically: a temporary file, then a rename).
pub fn write(report: &Report, path: &Path) -> Result<(), LipfpError> {
    crate::files::write_atomic(path, (render(report) + "\n").as_bytes(), "JSON report")
}
