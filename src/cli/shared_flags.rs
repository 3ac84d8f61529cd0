//! Flags more than one command takes: the deployment ([`DeploymentFlags`]), a format flag, a shard.

use clap::Args;

use crate::arith::format::Format;
use crate::arith::runtime::{RuntimeChoice, RuntimeFlags};
use crate::engine::run::Shard;
use crate::error::LipfpError;

/// The deployment a command certifies for: format, accumulation, flush-to-zero and runtime
/// (shared by `certify` and `verify`).
#[derive(Debug, Args)]
pub struct DeploymentFlags {
    /// Deployment (storage) format: float64, float32, float16, bfloat16 (default: the format
    /// the model's weights are stored in).
    #[arg(long)]
    pub format: Option<String>,
    /// Accumulation format of the runtime's dense layers, e.g. float32 for float16 storage
    /// (default: the storage format or the next wider one, both covered).
    #[arg(long)]
    pub accumulate: Option<String>,
    /// Flush-to-zero / denormals-are-zero execution.
    #[arg(long)]
    pub ftz: bool,
    /// The runtime the model is served on and its settings.
    #[command(flatten)]
    pub runtime: RuntimeFlags,
}

/// The parsed [`DeploymentFlags`]: format, accumulation, flush-to-zero, runtime.
pub(super) type Deployment = (Option<Format>, Option<Format>, bool, Option<RuntimeChoice>);

impl DeploymentFlags {
    /// The flags parsed; a usage error names the flag.
    pub(super) fn parse(&self) -> Result<Deployment, LipfpError> {
        Ok((
            parse_format_flag("--format", self.format.as_deref())?,
            parse_format_flag("--accumulate", self.accumulate.as_deref())?,
            self.ftz,
            (self.runtime.keys().choice()).map_err(|m| LipfpError::Usage(format!("--{m}")))?,
        ))
    }
}

/// Parse an optional format flag, naming the flag in the error.
pub(super) fn parse_format_flag(
    flag: &str,
    text: Option<&str>,
) -> Result<Option<Format>, LipfpError> {
    text.map(|t| {
        t.parse::<Format>()
            .map_err(|m| LipfpError::Usage(format!("{flag}: {m}")))
    })
    .transpose()
}

pub(super) fn parse_shard(text: Option<&str>) -> Result<Option<Shard>, LipfpError> {
    text.map(|t| Shard::parse(t).map_err(|m| LipfpError::Usage(format!("--shard {m}"))))
        .transpose()
}
