//! Floating-point arithmetic the bounds are built on: deployment formats and their constants
//! ([`format`](mod@format)), directed-rounding scalars ([`sound`]), the execution model a
//! certificate covers ([`execution`]) and the named runtimes that map a format to one
//! ([`runtime`]).
//!
//! Imports: [`crate::error`] only. Everything above may import `arith`.

pub mod execution;
pub mod format;
pub mod runtime;
pub mod sound;
