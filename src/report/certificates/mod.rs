//! Certificate files (`proto/lipfp.proto`, `CertificateFile`): per-instance results and run
//! metadata, written by `--certificates` and merged by `lipfp report` (the basis for sharding a
//! large test set across CI jobs). `write` writes them; `merge` checks and merges them,
//! rebuilding the engine's [`crate::engine::run::CertifyOutcome`] so the reports come from the
//! same code path as a direct run; `read` reads one as untrusted input; `baseline` reads one as the baseline of `lipfp
//! check`.

mod baseline;
mod complete;
mod merge;
mod read;
mod write;
pub use baseline::read_baseline;
pub use merge::{merge, MergedGate};
pub use read::read;
pub use write::{artifact, gate_certificates, GateMeta};
