//! Test data from `.npy` files: inputs (float16/32/64), labels (any integer dtype) and
//! per-instance radii (float64). The reader dispatches on the header's dtype (ndarray-npy reads
//! only the exact Rust type and no float16), handles either byte order and Fortran order, and
//! names the file and the index of any value at fault. A `.npz` archive (numpy's `savez`, plain
//! or compressed) holds the inputs as its array `x` and the labels as its array `y`; each is read
//! through the same checks, from memory (at most [`MAX_NPZ_MEMBER_BYTES`]).

use std::path::{Path, PathBuf};

use npyz::{NpyFile, Order, TypeChar};

mod csv;
mod npy;
use self::csv::CsvRows;
use self::npy::{dtype_desc, open, Member, Source};
pub use self::npy::{MAX_NPY_HEADER_BYTES, MAX_NPY_HEADER_NESTING, MAX_NPZ_MEMBER_BYTES};

use crate::arith::format::Format;
use crate::error::LipfpError;
use crate::files::{is_csv, is_npz};
use crate::onnx::model::DenseNet;

/// A numeric array read from `.npy`, in C order.
struct Array<T> {
    shape: Vec<usize>,
    data: Vec<T>,
}

/// Reorder Fortran-order data to C order.
fn fortran_to_c<T: Copy>(shape: &[usize], data: Vec<T>) -> Vec<T> {
    if shape.len() < 2 {
        return data;
    }
    let total = data.len();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..total {
        // Fortran offset of the C-order multi-index
        let mut off = 0usize;
        let mut stride = 1usize;
        for (k, &i) in idx.iter().enumerate() {
            off += i * stride;
            stride *= shape[k];
        }
        out.push(data[off]);
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

fn read_as<T: npyz::Deserialize, U>(
    path: &Path,
    npy: NpyFile<Source>,
    f: impl Fn(T) -> U,
) -> Result<Array<U>, LipfpError>
where
    U: Copy,
{
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let order = npy.order();
    let raw: Vec<T> = npy
        .into_vec()
        .map_err(|e| LipfpError::data(path, format!("could not read the array data: {e}")))?;
    let data: Vec<U> = raw.into_iter().map(f).collect();
    let data = if order == Order::Fortran {
        fortran_to_c(&shape, data)
    } else {
        data
    };
    Ok(Array { shape, data })
}

/// Read a float16/float32/float64 array as exact `f64` values (`member` of a `.npz`).
fn read_floats(path: &Path, member: Member) -> Result<Array<f64>, LipfpError> {
    let npy = open(path, member)?;
    let (kind, desc) = dtype_desc(&npy);
    match kind {
        Some((TypeChar::Float, 2)) => read_as(path, npy, |x: half::f16| x.to_f64()),
        Some((TypeChar::Float, 4)) => read_as(path, npy, |x: f32| x as f64),
        Some((TypeChar::Float, 8)) => read_as(path, npy, |x: f64| x),
        _ => Err(LipfpError::data(
            path,
            format!("dtype {desc} is not supported; inputs must be float16, float32 or float64"),
        )),
    }
}

/// Read an integer array of any width and signedness as `i128` (lossless).
fn read_ints(path: &Path) -> Result<Array<i128>, LipfpError> {
    let npy = open(path, Member::Y)?;
    let (kind, desc) = dtype_desc(&npy);
    match kind {
        Some((TypeChar::Int, 1)) => read_as(path, npy, |x: i8| x as i128),
        Some((TypeChar::Int, 2)) => read_as(path, npy, |x: i16| x as i128),
        Some((TypeChar::Int, 4)) => read_as(path, npy, |x: i32| x as i128),
        Some((TypeChar::Int, 8)) => read_as(path, npy, |x: i64| x as i128),
        Some((TypeChar::Uint, 1)) => read_as(path, npy, |x: u8| x as i128),
        Some((TypeChar::Uint, 2)) => read_as(path, npy, |x: u16| x as i128),
        Some((TypeChar::Uint, 4)) => read_as(path, npy, |x: u32| x as i128),
        Some((TypeChar::Uint, 8)) => read_as(path, npy, |x: u64| x as i128),
        _ => Err(LipfpError::data(
            path,
            format!("dtype {desc} is not supported; labels must have an integer dtype"),
        )),
    }
}

/// Test inputs converted to the deployment format, row-major `[n, dim]`.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The `.npy` file.
    pub path: PathBuf,
    /// Number of examples.
    pub n: usize,
    /// Features per example (`n_1`).
    pub dim: usize,
    /// Converted values (exact format values stored as `f64`).
    pub values: Vec<f64>,
    /// How many values the conversion to the deployment format changed.
    pub converted_changed: usize,
    /// dtype of the file, e.g. `<f4`.
    pub dtype: String,
}

impl Inputs {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }
}

/// Element readers for the float dtypes inputs may have.
enum FloatReader {
    F16(npyz::NpyReader<half::f16, Source>),
    F32(npyz::NpyReader<f32, Source>),
    F64(npyz::NpyReader<f64, Source>),
    /// Fortran-order files cannot be read row by row: they are read whole and reordered.
    Buffered(std::vec::IntoIter<f64>),
    /// A CSV file's feature cells, row by row.
    Csv(Box<CsvRows>),
}

impl FloatReader {
    fn next(&mut self) -> Option<std::io::Result<f64>> {
        match self {
            FloatReader::F16(r) => r.next().map(|x| x.map(|v| v.to_f64())),
            FloatReader::F32(r) => r.next().map(|x| x.map(|v| v as f64)),
            FloatReader::F64(r) => r.next(),
            FloatReader::Buffered(it) => it.next().map(Ok),
            FloatReader::Csv(_) => unreachable!("CSV cells are read by InputStream::value"),
        }
    }
}

/// Test inputs read row by row (memory stays bounded for large sets), converted to the
/// deployment format and checked; errors name the file and the global index.
pub struct InputStream {
    /// The `.npy` file.
    pub path: PathBuf,
    /// Number of examples in the file.
    pub n: usize,
    /// Features per example.
    pub dim: usize,
    /// dtype of the file, e.g. `<f4`.
    pub dtype: String,
    /// Values changed by the conversion so far.
    pub converted_changed: usize,
    format: Format,
    reader: FloatReader,
    next_row: usize,
}

impl InputStream {
    /// Open `path`, checking its dtype and that its per-example shape matches the model input;
    /// a CSV file's `label_column` is not a feature.
    pub fn open(
        path: &Path,
        label_column: Option<&str>,
        net: &DenseNet,
        format: Format,
    ) -> Result<InputStream, LipfpError> {
        if is_csv(path) {
            return InputStream::open_csv(path, label_column, net, format);
        }
        let npy = open(path, Member::X)?;
        let (kind, dtype) = dtype_desc(&npy);
        let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
        if shape.is_empty() {
            return Err(LipfpError::data(
                path,
                "inputs must be an array [N, ...], found a scalar",
            ));
        }
        if shape[1..] != net.input_shape[..] {
            return Err(LipfpError::data(
                path,
                format!(
                    "per-example shape {:?} does not match the model input `{}` {:?} (array shape {:?})",
                    &shape[1..],
                    net.input_name,
                    net.input_shape,
                    shape
                ),
            ));
        }
        let unsupported = || {
            LipfpError::data(
                path,
                format!(
                    "dtype {dtype} is not supported; inputs must be float16, float32 or float64"
                ),
            )
        };
        let bad = |e: npyz::DTypeError| {
            LipfpError::data(path, format!("could not read the array data: {e}"))
        };
        let reader = if npy.order() == Order::Fortran {
            FloatReader::Buffered(read_floats(path, Member::X)?.data.into_iter())
        } else {
            match kind {
                Some((TypeChar::Float, 2)) => FloatReader::F16(npy.data().map_err(bad)?),
                Some((TypeChar::Float, 4)) => FloatReader::F32(npy.data().map_err(bad)?),
                Some((TypeChar::Float, 8)) => FloatReader::F64(npy.data().map_err(bad)?),
                _ => return Err(unsupported()),
            }
        };
        Ok(InputStream {
            path: path.to_path_buf(),
            n: shape[0],
            dim: net.input_dim(),
            dtype,
            converted_changed: 0,
            format,
            reader,
            next_row: 0,
        })
    }

    /// [`InputStream::open`] for a CSV file: its feature columns must be the model's input
    /// features, flattened.
    fn open_csv(
        path: &Path,
        label_column: Option<&str>,
        net: &DenseNet,
        format: Format,
    ) -> Result<InputStream, LipfpError> {
        let rows = CsvRows::open(path, label_column)?;
        if rows.features != net.input_dim() {
            return Err(LipfpError::data(
                path,
                format!(
                    "{} feature columns{}, but the model input `{}` {:?} has {} features",
                    rows.features,
                    if label_column.is_some() {
                        " besides the label column"
                    } else {
                        " (no label_column set)"
                    },
                    net.input_name,
                    net.input_shape,
                    net.input_dim()
                ),
            ));
        }
        Ok(InputStream {
            path: path.to_path_buf(),
            n: rows.n,
            dim: net.input_dim(),
            dtype: "csv".into(),
            converted_changed: 0,
            format,
            reader: FloatReader::Csv(Box::new(rows)),
            next_row: 0,
        })
    }

    /// Global index of the next row.
    pub fn position(&self) -> usize {
        self.next_row
    }

    fn value(&mut self, row: usize, feature: usize) -> Result<f64, LipfpError> {
        if let FloatReader::Csv(rows) = &mut self.reader {
            return rows.next_value().unwrap_or_else(|| {
                Err(LipfpError::data(
                    &self.path,
                    format!("the file ends before input {row} (flat feature {feature})"),
                ))
            });
        }
        match self.reader.next() {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(LipfpError::data(
                &self.path,
                format!("could not read input {row} (flat feature {feature}): {e}"),
            )),
            None => Err(LipfpError::data(
                &self.path,
                format!("the file ends before input {row} (flat feature {feature})"),
            )),
        }
    }

    /// Skip `rows` rows (their values are still read, not checked).
    pub fn skip(&mut self, rows: usize) -> Result<(), LipfpError> {
        for r in 0..rows {
            for f in 0..self.dim {
                self.value(self.next_row + r, f)?;
            }
        }
        self.next_row += rows;
        Ok(())
    }

    /// The next `rows` rows (fewer at the end), converted to the format.
    pub fn next_rows(&mut self, rows: usize) -> Result<Vec<f64>, LipfpError> {
        let rows = rows.min(self.n - self.next_row);
        let mut out = Vec::with_capacity(rows.saturating_mul(self.dim).min(1 << 24));
        for r in 0..rows {
            let row = self.next_row + r;
            for f in 0..self.dim {
                let v = self.value(row, f)?;
                if !v.is_finite() {
                    return Err(LipfpError::data(
                        &self.path,
                        format!("input {row} (flat feature {f}) is not finite ({v})"),
                    ));
                }
                let c = self.format.round(v);
                if !c.is_finite() {
                    return Err(LipfpError::data(
                        &self.path,
                        format!(
                            "input {row} (flat feature {f}) = {v:e} overflows {}",
                            self.format
                        ),
                    ));
                }
                if c != v {
                    self.converted_changed += 1;
                }
                out.push(c);
            }
        }
        self.next_row += rows;
        Ok(out)
    }
}

/// Read all inputs (per-example shape must match the model's input), converted to `format`;
/// non-finite values (before or after conversion) are rejected naming the index.
pub fn load_inputs(path: &Path, net: &DenseNet, format: Format) -> Result<Inputs, LipfpError> {
    let mut stream = InputStream::open(path, None, net, format)?;
    let values = stream.next_rows(stream.n)?;
    Ok(Inputs {
        path: path.to_path_buf(),
        n: stream.n,
        dim: stream.dim,
        values,
        converted_changed: stream.converted_changed,
        dtype: stream.dtype,
    })
}

/// Read labels `[n]` of any integer dtype, each in `0..classes` (from a CSV file: its column
/// `label_column`).
pub fn load_labels(
    path: &Path,
    label_column: Option<&str>,
    n: usize,
    classes: usize,
) -> Result<Vec<usize>, LipfpError> {
    let arr = match (is_csv(path), label_column) {
        (true, Some(col)) => {
            let data = self::csv::labels(path, col)?;
            Array {
                shape: vec![data.len()],
                data,
            }
        }
        (true, None) => {
            return Err(LipfpError::data(
                path,
                "labels from a CSV file need label_column (--label-column) naming its column",
            ))
        }
        (false, _) => read_ints(path)?,
    };
    let flat_ok = arr.shape.len() == 1 || (arr.shape.len() == 2 && arr.shape[1] == 1);
    if !flat_ok || arr.shape[0] != n {
        return Err(LipfpError::data(
            path,
            format!(
                "labels must have shape [{n}] to match the inputs, found {:?}",
                arr.shape
            ),
        ));
    }
    arr.data
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            if y >= 0 && (y as u128) < classes as u128 {
                Ok(y as usize)
            } else {
                Err(LipfpError::data(
                    path,
                    format!("label {y} at index {i} is out of range for {classes} classes"),
                ))
            }
        })
        .collect()
}

/// Read per-instance radii: float64 (or float32/float16) `[n]`, finite and nonnegative.
pub fn load_epsilons(path: &Path, n: usize) -> Result<Vec<f64>, LipfpError> {
    if is_npz(path) {
        return Err(LipfpError::data(path, "radii must be a .npy file"));
    }
    let arr = read_floats(path, Member::X)?;
    if arr.shape.len() != 1 || arr.shape[0] != n {
        return Err(LipfpError::data(
            path,
            format!(
                "radii must have shape [{n}] to match the inputs, found {:?}",
                arr.shape
            ),
        ));
    }
    for (i, &e) in arr.data.iter().enumerate() {
        if !(e.is_finite() && e >= 0.0) {
            return Err(LipfpError::data(
                path,
                format!("radius at index {i} is {e}; radii must be finite and >= 0"),
            ));
        }
    }
    Ok(arr.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fortran_reorder_matches_c_order() {
        // a 2x3 matrix [[0,1,2],[3,4,5]] stored column-major is 0,3,1,4,2,5
        let f = vec![0, 3, 1, 4, 2, 5];
        assert_eq!(fortran_to_c(&[2, 3], f), vec![0, 1, 2, 3, 4, 5]);
        // 3-D: shape [2,2,2], C index (i,j,k) -> value 4i+2j+k
        let shape = [2usize, 2, 2];
        let mut fdata = vec![0; 8];
        for i in 0..2 {
            for j in 0..2 {
                for k in 0..2 {
                    fdata[i + 2 * j + 4 * k] = 4 * i + 2 * j + k;
                }
            }
        }
        assert_eq!(fortran_to_c(&shape, fdata), (0..8).collect::<Vec<_>>());
    }
}
