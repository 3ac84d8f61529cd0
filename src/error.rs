//! The library's one diagnostic type. Every variant names the file, and where it applies the
//! node, field or index at fault. All of them are input or usage errors: exit code 2.

use std::path::{Path, PathBuf};

/// An error in a model, a data file, a policy or the file system.
#[derive(Debug, thiserror::Error)]
pub enum LipfpError {
    /// A file could not be read or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The model is not a supported dense ReLU classifier.
    #[error("{}: {}{message}", path.display(), node.as_ref().map(|(n, op)| format!("node `{n}` (op {op}): ")).unwrap_or_default())]
    Model {
        /// The ONNX file.
        path: PathBuf,
        /// The node at fault and its op type.
        node: Option<(String, String)>,
        /// What is wrong.
        message: String,
    },
    /// A data file (inputs, labels, radii) is unusable.
    #[error("{}: {message}", path.display())]
    Data {
        /// The `.npy` file.
        path: PathBuf,
        /// What is wrong, naming the index when one is at fault.
        message: String,
    },
    /// The policy file is invalid.
    #[error("{}: {message}", path.display())]
    Policy {
        /// The policy file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// Invalid command-line usage not caught by the parser.
    #[error("{0}")]
    Usage(String),
}

impl LipfpError {
    /// A model error not tied to one node.
    pub fn model(path: &Path, message: impl Into<String>) -> Self {
        LipfpError::Model {
            path: path.to_path_buf(),
            node: None,
            message: message.into(),
        }
    }

    /// A problem at one node (its configuration, inputs or weight values).
    pub fn at_node(path: &Path, node: &str, op: &str, message: impl Into<String>) -> Self {
        LipfpError::Model {
            path: path.to_path_buf(),
            node: Some((node.to_string(), op.to_string())),
            message: message.into(),
        }
    }

    /// A node whose op type is not supported: the message lists the `supported` set (the reader
    /// passes its list, so this type depends on no layer).
    pub fn unsupported(path: &Path, node: &str, op: &str, why: &str, supported: &str) -> Self {
        LipfpError::Model {
            path: path.to_path_buf(),
            node: Some((node.to_string(), op.to_string())),
            message: format!("{why}. Supported: {supported}"),
        }
    }

    /// A data error.
    pub fn data(path: &Path, message: impl Into<String>) -> Self {
        LipfpError::Data {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// A policy error.
    pub fn policy(path: &Path, message: impl Into<String>) -> Self {
        LipfpError::Policy {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}
