//! Reading inputs and writing reports: errors that name the file, and atomic writes (a
//! temporary file next to the target, then a rename) so a reader never sees half a report.

use std::path::{Path, PathBuf};

use crate::error::LipfpError;

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

/// Read a whole file.
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>, LipfpError> {
    std::fs::read(path).map_err(|e| read_error(path, what, &e))
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
        assert_eq!(read(&p, "JSON report").unwrap(), b"{}");
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            1
        );
        let e = read(&dir.path().join("nope.toml"), "policy file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nope.toml") && e.contains("policy file not found"),
            "{e}"
        );
    }
}
