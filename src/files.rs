//! Reading inputs and writing reports.
//!
//! Reads are bounded: every file read whole has a size limit (checked while streaming, so
//! `/dev/zero` or a FIFO cannot exhaust memory), and errors name the file and the limit.
//!
//! Writes are all-or-nothing: a command renders every artifact to memory, [`stage`]s them all
//! (a temporary file next to each target, written and synced; targets that are not regular
//! files, such as `/dev/stdout`, a FIFO or a device, are written directly, after every
//! temporary file succeeded) and only then [`Staged::commit`]s them (renames into place). When
//! anything fails, the temporary files are removed and the error names the path and the OS
//! error (e.g. "No space left on device"). A symlink to a regular file is kept: the file it
//! points to is replaced atomically.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
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

/// One file a command writes.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// Where it goes, as the user named it.
    pub path: PathBuf,
    /// Its complete contents.
    pub bytes: Vec<u8>,
    /// Its role in messages, e.g. "JSON report".
    pub what: &'static str,
}

impl Artifact {
    /// An artifact for `path`.
    pub fn new(path: &Path, bytes: impl Into<Vec<u8>>, what: &'static str) -> Artifact {
        Artifact {
            path: path.to_path_buf(),
            bytes: bytes.into(),
            what,
        }
    }

    fn error(&self, e: &std::io::Error) -> LipfpError {
        LipfpError::Io {
            path: self.path.clone(),
            message: format!("could not write the {}: {e}", self.what),
        }
    }
}

/// How a target is written.
enum WriteTarget {
    /// A regular file (or a new one) at this path, after following symlinks: replaced
    /// atomically through a temporary file in its directory.
    Replace(PathBuf),
    /// Something that is not a regular file (device, FIFO, `/dev/stdout`): written directly.
    Direct,
}

/// Symlink hops followed before giving up (Linux's limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// Classify `path`, following symlinks hop by hop (so a dangling symlink's target is created
/// and the symlink kept). Anything reached through `/proc` or `/dev/fd` (e.g. `/dev/stdout`)
/// is a file descriptor's file and written directly.
fn classify(path: &Path) -> std::io::Result<WriteTarget> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        if p.starts_with("/proc") || p.starts_with("/dev/fd") {
            return Ok(WriteTarget::Direct);
        }
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(WriteTarget::Replace(p))
            }
            Err(e) => return Err(e),
        };
        if m.file_type().is_symlink() {
            let link = std::fs::read_link(&p)?;
            p = match p.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
        } else if m.is_file() {
            return Ok(WriteTarget::Replace(p));
        } else if m.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        } else {
            return Ok(WriteTarget::Direct);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "too many levels of symbolic links",
    ))
}

/// A temporary file next to `target` holding `bytes`, synced to disk (so a full disk is
/// reported here, not lost at close). New files get the usual `0666 & !umask` mode, replaced
/// files keep theirs.
fn temporary(target: &Path, bytes: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix).suffix(".lipfp-tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = b.tempfile_in(dir)?;
    if let Ok(m) = std::fs::metadata(target) {
        tmp.as_file().set_permissions(m.permissions())?;
    }
    tmp.as_file_mut().write_all(bytes)?;
    tmp.as_file().sync_all()?;
    Ok(tmp)
}

/// Write `bytes` to a target that is not a regular file (appending: `/dev/stdout` redirected
/// to a file keeps what is already there).
fn write_direct(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

/// Artifacts written to temporary files, waiting for [`Staged::commit`]. Dropping it without
/// committing removes the temporary files.
#[must_use = "staged artifacts are discarded unless committed"]
pub struct Staged {
    pending: Vec<(tempfile::NamedTempFile, PathBuf, Artifact)>,
}

/// Stage every artifact: temporary files for regular targets first, then direct writes to
/// targets that are not regular files. On the first failure everything staged so far is
/// removed and the error names the artifact's path and the OS error.
pub fn stage(artifacts: &[Artifact]) -> Result<Staged, LipfpError> {
    let mut pending = Vec::new();
    let mut direct = Vec::new();
    for a in artifacts {
        match classify(&a.path).map_err(|e| a.error(&e))? {
            WriteTarget::Replace(real) => {
                let tmp = temporary(&real, &a.bytes).map_err(|e| a.error(&e))?;
                pending.push((tmp, real, a.clone()));
            }
            WriteTarget::Direct => direct.push(a),
        }
    }
    for a in direct {
        write_direct(&a.path, &a.bytes).map_err(|e| a.error(&e))?;
    }
    Ok(Staged { pending })
}

impl Staged {
    /// Rename every temporary file into place. A failure removes the temporary files not yet
    /// renamed.
    pub fn commit(self) -> Result<(), LipfpError> {
        for (tmp, real, a) in self.pending {
            tmp.persist(&real).map_err(|e| a.error(&e.error))?;
        }
        Ok(())
    }
}

/// Check, before any work is done, that `path` can be a report target: it must not be a
/// directory (or a symlink loop). The error is the one writing would give.
pub fn check_target(path: &Path, what: &'static str) -> Result<(), LipfpError> {
    classify(path)
        .map(|_| ())
        .map_err(|e| Artifact::new(path, Vec::new(), what).error(&e))
}

/// Write one artifact (see [`stage`]).
pub fn write_atomic(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), LipfpError> {
    stage(&[Artifact::new(path, bytes, what)])?.commit()
}

/// Whether `path` names a CSV test set (by its extension).
pub fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// Whether `path` names a `.npz` archive (by its extension): a test set whose inputs are its
/// array `x` and whose labels are its array `y`.
pub fn is_npz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

/// An `.npy` file of `shape` holding `data`, in memory.
pub fn npy_bytes<T: npyz::AutoSerialize + Copy>(shape: &[u64], data: &[T]) -> Vec<u8> {
    use npyz::WriterBuilder;
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .expect("writing to memory cannot fail");
    w.extend(data.iter().copied())
        .expect("writing to memory cannot fail");
    w.finish().expect("writing to memory cannot fail");
    out.into_inner()
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

    #[cfg(unix)]
    #[test]
    fn symlinks_are_kept_and_devices_written_directly() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write_atomic(&link, b"new", "JSON report").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink("created.json", &dangling).unwrap();
        write_atomic(&dangling, b"x", "JSON report").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("created.json")).unwrap(),
            b"x"
        );
        let full = dir.path().join("full.json");
        std::os::unix::fs::symlink("/dev/full", &full).unwrap();
        let e = write_atomic(&full, b"x", "JSON report")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("full.json") && e.contains("No space left"),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&full)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 5);
    }
}
