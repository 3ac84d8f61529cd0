//! A certificate file read as untrusted input ([`read`]): size-limited, decoded, gate names
//! checked for control characters.

use std::path::Path;

use prost::Message;

use crate::error::LipfpError;
use crate::proto_gen::CertificateFile;

/// Read a certificate file (at most [`crate::files::CERTIFICATES_LIMIT`] bytes). Gate names
/// with control characters are refused: they would break out of report lines.
pub fn read(path: &Path) -> Result<CertificateFile, LipfpError> {
    let bytes =
        crate::files::read_protobuf(path, "certificate file", crate::files::CERTIFICATES_LIMIT)?;
    let file = CertificateFile::decode(bytes.as_slice())
        .map_err(|e| LipfpError::data(path, format!("not a lipfp certificate file: {e}")))?;
    for (k, g) in file.gates.iter().enumerate() {
        if let Some(c) = g.gate.chars().find(|c| c.is_control()) {
            return Err(LipfpError::data(
                path,
                format!(
                    "gate #{} (`{}`): the name contains the control character U+{:04X}",
                    k + 1,
                    g.gate.escape_debug(),
                    c as u32
                ),
            ));
        }
    }
    Ok(file)
}
