//! Reading inputs and writing reports.
//!
//! Reads are bounded: every file read whole has a size limit (checked while streaming, so
//! `/dev/zero` or a FIFO cannot exhaust memory), and errors name the file and the limit.
//!
//! Writes are atomic (a temporary file next to the target, then a rename) so a reader never
//! sees half a report.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::LipfpError;

/// Largest policy file read (1 MiB; a policy is a few kilobytes).
pub const POLICY_LIMIT: u64 = 1 << 20;
/// Largest baseline JSON report read (16 MiB; a report holds no per-point data).
pub const BASELINE_LIMIT: u64 = 16 << 20;
/// Largest certificate file read (1 GiB: about ten million points' certificates).
pub const CERTIFICATES_LIMIT: u64 = 1 << 30;

/// The error for a failed read of `path` (`what` names the file's role, e.g. "policy file").
pub fn read_error(path: &Path, what: &str, e: &std::io::Error) -> LipfpError {
    LipfpError::Io {
        path: path.to_path_buf(),
        message: if e.kind() == std::io::ErrorKind::NotFound {
            format!("{what} not found")
        } else {
            format!("could not read the {what}: {e}")
        },
    }
}

/// A limit in words: `1 MiB (1048576 bytes)`.
fn limit_text(limit: u64) -> String {
    let (value, unit) = match limit {
        l if l >= 1 << 30 && l % (1 << 30) == 0 => (l >> 30, "GiB"),
        l if l >= 1 << 20 && l % (1 << 20) == 0 => (l >> 20, "MiB"),
        l if l >= 1 << 10 && l % (1 << 10) == 0 => (l >> 10, "KiB"),
        l => (l, "bytes"),
    };
    if unit == "bytes" {
        format!("{value} bytes")
    } else {
        format!("{value} {unit} ({limit} bytes)")
    }
}

fn too_large(path: &Path, what: &str, limit: u64) -> LipfpError {
    LipfpError::Io {
        path: path.to_path_buf(),
        message: format!(
            "the {what} is larger than the limit of {}; refusing to read it",
            limit_text(limit)
        ),
    }
}

/// Open `path` for reading; a regular file larger than `limit` is refused before reading.
fn open_limited(path: &Path, what: &str, limit: u64) -> Result<File, LipfpError> {
    let f = File::open(path).map_err(|e| read_error(path, what, &e))?;
    if let Ok(m) = f.metadata() {
        if m.is_file() && m.len() > limit {
            return Err(too_large(path, what, limit));
        }
    }
    Ok(f)
}

/// Read a whole file of at most `limit` bytes. Works for non-regular files (FIFOs, devices):
/// at most `limit + 1` bytes are read before the file is refused.
pub fn read_limited(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>, LipfpError> {
    let f = open_limited(path, what, limit)?;
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(path, what, &e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(path, what, limit));
    }
    Ok(bytes)
}

/// One base-128 varint, appended to `out`; `None` at end of file before its first byte.
fn read_varint(r: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<Option<u64>> {
    let mut value = 0u64;
    for k in 0..10 {
        let mut byte = [0u8; 1];
        if r.read(&mut byte)? == 0 {
            return if k == 0 {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        out.push(byte[0]);
        value |= u64::from(byte[0] & 0x7f) << (7 * k);
        if byte[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "varint longer than 10 bytes",
    ))
}

/// Read a protobuf message of at most `limit` bytes, checking its top-level framing while
/// reading: every field must have a valid tag and wire type, and no length may reach past the
/// limit. Garbage (e.g. `/dev/zero`, whose first byte is no valid tag) is refused after a few
/// bytes instead of being read up to the limit.
pub fn read_protobuf(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>, LipfpError> {
    let f = open_limited(path, what, limit)?;
    let mut r = BufReader::new(f);
    let mut out = Vec::new();
    let bad = |at: usize, why: &str| {
        LipfpError::data(path, format!("not a lipfp {what}: {why} at byte {at}"))
    };
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            LipfpError::data(path, format!("not a lipfp {what}: truncated"))
        }
        _ => read_error(path, what, &e),
    };
    loop {
        let at = out.len();
        let Some(tag) = read_varint(&mut r, &mut out).map_err(io)? else {
            return Ok(out);
        };
        let len = match (tag >> 3, tag & 7) {
            (0, _) => return Err(bad(at, "field number 0")),
            (_, 0) => {
                read_varint(&mut r, &mut out)
                    .map_err(io)?
                    .ok_or_else(|| io(std::io::ErrorKind::UnexpectedEof.into()))?;
                0
            }
            (_, 1) => 8,
            (_, 5) => 4,
            (_, 2) => read_varint(&mut r, &mut out)
                .map_err(io)?
                .ok_or_else(|| io(std::io::ErrorKind::UnexpectedEof.into()))?,
            (_, w) => return Err(bad(at, &format!("unsupported wire type {w}"))),
        };
        if (out.len() as u64).saturating_add(len) > limit {
            return Err(too_large(path, what, limit));
        }
        let got = (&mut r).take(len).read_to_end(&mut out).map_err(io)?;
        if (got as u64) < len {
            return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Write `bytes` to `path` atomically, creating the parent directory.
pub fn write_atomic(path: &Path, bytes: &[u8], what: &str) -> Result<(), LipfpError> {
    let err = |e: std::io::Error| LipfpError::Io {
        path: path.to_path_buf(),
        message: format!("could not write the {what}: {e}"),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_and_names_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/report.json");
        write_atomic(&p, b"{}", "JSON report").unwrap();
        assert_eq!(read_limited(&p, "JSON report", 2).unwrap(), b"{}");
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            1
        );
        let e = read_limited(&dir.path().join("nope.toml"), "policy file", 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nope.toml") && e.contains("policy file not found"),
            "{e}"
        );
    }

    #[test]
    fn reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.toml");
        std::fs::write(&p, vec![b'#'; 2048]).unwrap();
        let e = read_limited(&p, "policy file", 1024)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("big.toml") && e.contains("1 KiB (1024 bytes)"),
            "{e}"
        );
        let e = read_limited(Path::new("/dev/zero"), "policy file", 4096)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero") && e.contains("limit"), "{e}");
    }

    #[test]
    fn protobuf_framing_is_checked_while_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.pb");
        // field 1 (string "ab"), field 3 (varint 300), field 2 (fixed64)
        let good = [
            0x0a, 2, b'a', b'b', 0x18, 0xac, 0x02, 0x11, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        std::fs::write(&p, good).unwrap();
        assert_eq!(read_protobuf(&p, "certificate file", 100).unwrap(), good);
        let e = read_protobuf(&p, "certificate file", 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("limit"), "{e}");
        std::fs::write(&p, &good[..3]).unwrap();
        let e = read_protobuf(&p, "certificate file", 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let e = read_protobuf(Path::new("/dev/zero"), "certificate file", 1 << 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("field number 0 at byte 0"), "{e}");
    }
}
