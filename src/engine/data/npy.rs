//! The `.npy` reader's first steps, before npyz parses anything: the file (or a `.npz`
//! archive's member) opened, its preamble and header read and checked (size, bracket nesting,
//! a shape whose element count can be counted), and the data the header announces checked to
//! fit in what is there.

use std::fs::File;
use std::io::{BufReader, Chain, Cursor, Read};
use std::path::Path;

use npyz::{NpyFile, TypeChar};

use crate::error::LipfpError;
use crate::files::is_npz;

/// Largest `.npy` header accepted (numpy writes a few hundred bytes; npyz's header parser must
/// never see a large one).
pub const MAX_NPY_HEADER_BYTES: usize = 64 * 1024;

/// Deepest bracket nesting accepted in an `.npy` header (numpy writes 2: the dict and the shape
/// tuple; npyz's parser takes time exponential in the depth).
pub const MAX_NPY_HEADER_NESTING: usize = 8;

/// What npyz reads: the preamble and header already read and checked here, then the file (or
/// the `.npz` member).
pub(super) type Source = BufReader<Chain<Cursor<Vec<u8>>, Box<dyn Read + Send>>>;

/// Largest `.npz` member read (uncompressed); larger test sets stream from `.npy` files.
pub const MAX_NPZ_MEMBER_BYTES: u64 = 4 << 30;

/// Which array of a `.npz` archive a role reads: `x` for inputs, `y` for labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Member {
    X,
    Y,
}

/// The bytes behind `path` for `member`: the file itself, or the array's `.npy` member of a
/// `.npz` archive read into memory; with their length.
fn raw_source(path: &Path, member: Member) -> Result<(Box<dyn Read + Send>, u64), LipfpError> {
    let f = File::open(path).map_err(|e| crate::files::read_error(path, "file", &e))?;
    if !is_npz(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        return Ok((Box::new(f), len));
    }
    let bad = |m: String| LipfpError::data(path, m);
    let mut zip = zip::ZipArchive::new(BufReader::new(f))
        .map_err(|e| bad(format!("not a valid .npz (zip) archive: {e}")))?;
    let name = match member {
        Member::X => "x",
        Member::Y => "y",
    };
    let mut entry = zip.by_name(&format!("{name}.npy")).map_err(|_| {
        bad(format!(
            "the archive has no array `{name}` (numpy's savez(path, x=inputs, y=labels) writes \
             `x.npy` and `y.npy`)"
        ))
    })?;
    let mut bytes = Vec::new();
    (&mut entry)
        .take(MAX_NPZ_MEMBER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            bad(format!(
                "could not read array `{name}` from the archive: {e}"
            ))
        })?;
    if bytes.len() as u64 > MAX_NPZ_MEMBER_BYTES {
        return Err(bad(format!(
            "array `{name}` is larger than {MAX_NPZ_MEMBER_BYTES} bytes uncompressed; use .npy \
             files for a test set this large"
        )));
    }
    let len = bytes.len() as u64;
    Ok((Box::new(Cursor::new(bytes)), len))
}

/// The deepest nesting of `(`, `[` and `{` outside string literals of an `.npy` header.
fn nesting_depth(header: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for &b in header {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    max
}

/// Read the `.npy` preamble (magic, version, header length) and header of `f` and check them
/// before npyz parses anything: headers above [`MAX_NPY_HEADER_BYTES`] or nested deeper than
/// [`MAX_NPY_HEADER_NESTING`] are refused. Returns a reader that replays what was read.
fn checked_header(path: &Path, mut f: Box<dyn Read + Send>) -> Result<Source, LipfpError> {
    let bad = |m: String| LipfpError::data(path, format!("not a valid .npy file: {m}"));
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => bad("the file ends inside the .npy header".into()),
        _ => crate::files::read_error(path, "file", &e),
    };
    let mut pre = vec![0u8; 8];
    f.read_exact(&mut pre).map_err(io)?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err(bad(
            "it does not start with the .npy magic \\x93NUMPY".into()
        ));
    }
    let len_bytes = match pre[6] {
        1 => 2,
        2 | 3 => 4,
        v => {
            return Err(bad(format!(
                "unsupported .npy format version {v}.{}",
                pre[7]
            )))
        }
    };
    let mut len = [0u8; 4];
    f.read_exact(&mut len[..len_bytes]).map_err(io)?;
    pre.extend_from_slice(&len[..len_bytes]);
    let header_len = u32::from_le_bytes(len) as usize;
    if header_len > MAX_NPY_HEADER_BYTES {
        return Err(bad(format!(
            "the header is {header_len} bytes; at most {MAX_NPY_HEADER_BYTES} are accepted"
        )));
    }
    let mut header = vec![0u8; header_len];
    f.read_exact(&mut header).map_err(io)?;
    let depth = nesting_depth(&header);
    if depth > MAX_NPY_HEADER_NESTING {
        return Err(bad(format!(
            "the header nests brackets {depth} deep; at most {MAX_NPY_HEADER_NESTING} are accepted"
        )));
    }
    for shape in declared_shapes(&header) {
        if shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .is_none()
        {
            return Err(bad(format!(
                "the header's shape {shape:?} has more elements than can be counted"
            )));
        }
    }
    pre.extend_from_slice(&header);
    Ok(BufReader::new(Cursor::new(pre).chain(f)))
}

/// Every `'shape'` an `.npy` header declares, read as npyz reads it (a Python dict literal whose
/// `'shape'` is a tuple or list of integers; npyz keeps the last of repeated keys). npyz
/// multiplies the dimensions without checking for overflow (a panic with overflow checks, a
/// wrong count without), so [`checked_header`] checks the product first. A header npyz cannot
/// read yields no shape here; npyz then says what is wrong with it.
fn declared_shapes(header: &[u8]) -> Vec<Vec<u64>> {
    let text = header.strip_suffix(b"\n").unwrap_or(header);
    let Some(py_literal::Value::Dict(entries)) = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<py_literal::Value>().ok())
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|(k, _)| k.as_string().is_some_and(|k| k == "shape"))
        .filter_map(|(_, v)| match v {
            py_literal::Value::Tuple(dims) | py_literal::Value::List(dims) => dims
                .iter()
                .map(|d| match d {
                    py_literal::Value::Integer(d) => u64::try_from(d).ok(),
                    _ => None,
                })
                .collect(),
            _ => None,
        })
        .collect()
}

/// Open an `.npy` file, checking its header (see [`checked_header`]) and that the data it
/// announces fits in the file (so a corrupted header cannot make a reader allocate for data
/// that is not there).
pub(super) fn open(path: &Path, member: Member) -> Result<NpyFile<Source>, LipfpError> {
    let (f, file_len) = raw_source(path, member)?;
    let npy = NpyFile::new(checked_header(path, f)?)
        .map_err(|e| LipfpError::data(path, format!("not a valid .npy file: {e}")))?;
    let item = match npy.dtype() {
        npyz::DType::Plain(ts) => ts.num_bytes().unwrap_or(usize::MAX) as u64,
        _ => 1,
    };
    let values = npy.shape().iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    match values.and_then(|v| v.checked_mul(item)) {
        Some(bytes) if bytes <= file_len => Ok(npy),
        _ => Err(LipfpError::data(
            path,
            format!(
                "the header announces shape {:?} but the file holds only {file_len} bytes (truncated or corrupted)",
                npy.shape()
            ),
        )),
    }
}

pub(super) fn dtype_desc(npy: &NpyFile<Source>) -> (Option<(TypeChar, u64)>, String) {
    match npy.dtype() {
        npyz::DType::Plain(ts) => (Some((ts.type_char(), ts.size_field())), ts.to_string()),
        other => (None, format!("{other:?}")),
    }
}
