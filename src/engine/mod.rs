//! The engine: test data ([`data`]), lipfp's own centre execution ([`exec`]), runs of the
//! certifier over a test set with outcomes per mode and curve ([`run`]), one gate's work in one call
//! ([`gate_work`]: certification, complete decisions, curve and falsifier), digests of what was
//! certified ([`digest`]), margin gradients of the network ([`gradient`], the falsifier's search
//! direction and the local bounds' first-order filter) and the falsifier ([`attack`]). It returns outcomes
//! ([`run::CertifyOutcome`], [`run::CurveOutcome`], [`attack::AttackOutcome`]); it never renders
//! them.
//!
//! Imports: [`crate::policy`], [`crate::bounds`], [`crate::onnx`], [`crate::arith`] and the
//! shared leaves ([`crate::error`], [`crate::files`], [`crate::progress`]). No reporter, no gate.

pub mod attack;
pub mod complete;
pub mod data;
pub mod digest;
pub mod exec;
pub mod gate_work;
pub mod gradient;
pub mod run;
pub mod verify;
