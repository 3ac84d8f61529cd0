//! Test sets as CSV: a header row, then one row per point; every column but the label column
//! (policy `label_column`, CLI `--label-column`) is a feature, in order. Cells are read as
//! numbers (surrounding spaces allowed); an empty cell, a cell that is not a number, or a row
//! with another number of cells than the header is refused naming the row (its index in the
//! test set and its line in the file) and the column.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::LipfpError;

/// A CSV file's layout: its header, and where the label column is.
struct Layout {
    header: Vec<String>,
    label: Option<usize>,
}

fn reader(path: &Path) -> Result<csv::Reader<File>, LipfpError> {
    let f = File::open(path).map_err(|e| crate::files::read_error(path, "file", &e))?;
    Ok(csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(f))
}

/// The header of `r` and the index of `label_column` in it (refused when it is missing).
fn layout(
    path: &Path,
    r: &mut csv::Reader<File>,
    label_column: Option<&str>,
) -> Result<Layout, LipfpError> {
    let header: Vec<String> = r
        .headers()
        .map_err(|e| LipfpError::data(path, format!("could not read the CSV header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if header.is_empty() || header.iter().all(String::is_empty) {
        return Err(LipfpError::data(path, "the CSV file has no header row"));
    }
    let label = match label_column {
        None => None,
        Some(name) => Some(header.iter().position(|h| h == name).ok_or_else(|| {
            LipfpError::data(
                path,
                format!(
                    "label_column `{name}` is not a column (the header has: {})",
                    header.join(", ")
                ),
            )
        })?),
    };
    Ok(Layout { header, label })
}

/// The cells of data row `row` (0-based; `line` in the file) of a layout, checked for count.
fn cells<'r>(
    path: &Path,
    layout: &Layout,
    record: &'r csv::StringRecord,
    row: usize,
) -> Result<impl Iterator<Item = (usize, &'r str)>, LipfpError> {
    let line = record.position().map_or(0, |p| p.line());
    if record.len() != layout.header.len() {
        return Err(LipfpError::data(
            path,
            format!(
                "row {row} (line {line}) has {} cells; the header has {} columns",
                record.len(),
                layout.header.len()
            ),
        ));
    }
    Ok(record.iter().enumerate())
}

/// One cell as a number, or the error naming its row, line and column.
fn number(
    path: &Path,
    layout: &Layout,
    (row, line): (usize, u64),
    col: usize,
    cell: &str,
) -> Result<f64, LipfpError> {
    let name = &layout.header[col];
    let t = cell.trim();
    if t.is_empty() {
        return Err(LipfpError::data(
            path,
            format!("row {row} (line {line}), column `{name}`: missing value"),
        ));
    }
    t.parse::<f64>().map_err(|_| {
        LipfpError::data(
            path,
            format!("row {row} (line {line}), column `{name}`: `{t}` is not a number"),
        )
    })
}

/// The feature values of a CSV file, row by row (the label column left out).
pub struct CsvRows {
    path: PathBuf,
    reader: csv::Reader<File>,
    layout: Layout,
    buffer: VecDeque<f64>,
    row: usize,
    /// Data rows in the file.
    pub n: usize,
    /// Features per row.
    pub features: usize,
}

impl CsvRows {
    /// Open `path` (with its label column `label_column`), counting its rows.
    pub fn open(path: &Path, label_column: Option<&str>) -> Result<CsvRows, LipfpError> {
        let mut counter = reader(path)?;
        let layout = layout(path, &mut counter, label_column)?;
        let mut n = 0;
        let mut record = csv::StringRecord::new();
        while counter
            .read_record(&mut record)
            .map_err(|e| LipfpError::data(path, format!("not a valid CSV file: {e}")))?
        {
            n += 1;
        }
        // a reader with headers skips the header row itself
        let r = reader(path)?;
        let features = layout.header.len() - usize::from(layout.label.is_some());
        Ok(CsvRows {
            path: path.to_path_buf(),
            reader: r,
            layout,
            buffer: VecDeque::new(),
            row: 0,
            n,
            features,
        })
    }

    /// The next feature value (row-major), `None` after the last row.
    pub fn next_value(&mut self) -> Option<Result<f64, LipfpError>> {
        if self.buffer.is_empty() {
            if let Err(e) = self.fill() {
                return Some(Err(e));
            }
        }
        self.buffer.pop_front().map(Ok)
    }

    /// Read the next row's features into the buffer (nothing at the end of the file).
    fn fill(&mut self) -> Result<(), LipfpError> {
        let path = &self.path;
        let mut record = csv::StringRecord::new();
        let more = self
            .reader
            .read_record(&mut record)
            .map_err(|e| LipfpError::data(path, format!("not a valid CSV file: {e}")))?;
        if !more {
            return Ok(());
        }
        let line = record.position().map_or(0, |p| p.line());
        for (col, cell) in cells(path, &self.layout, &record, self.row)? {
            if Some(col) != self.layout.label {
                let v = number(path, &self.layout, (self.row, line), col, cell)?;
                self.buffer.push_back(v);
            }
        }
        self.row += 1;
        Ok(())
    }
}

/// The label column `label_column` of a CSV file: integers, one per row.
pub fn labels(path: &Path, label_column: &str) -> Result<Vec<i128>, LipfpError> {
    let mut r = reader(path)?;
    let layout = layout(path, &mut r, Some(label_column))?;
    let col = layout.label.unwrap_or_default();
    let mut out = Vec::new();
    let mut record = csv::StringRecord::new();
    while r
        .read_record(&mut record)
        .map_err(|e| LipfpError::data(path, format!("not a valid CSV file: {e}")))?
    {
        let row = out.len();
        let line = record.position().map_or(0, |p| p.line());
        let cell = cells(path, &layout, &record, row)?
            .nth(col)
            .map_or("", |(_, c)| c);
        let v = number(path, &layout, (row, line), col, cell)?;
        if v.fract() != 0.0 || v.abs() > 1e18 {
            return Err(LipfpError::data(
                path,
                format!(
                    "row {row} (line {line}), column `{label_column}`: label {v} is not an integer"
                ),
            ));
        }
        out.push(v as i128);
    }
    Ok(out)
}
