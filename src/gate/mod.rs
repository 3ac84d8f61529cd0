//! Judging and every figure reported: a run's figures against a gate's thresholds
//! ([`verdict`]), against the same gate in a previous report ([`baseline`], per point
//! [`regression`]), the robustness curve ([`curve::CurveReport`]), the falsifier's bracket
//! ([`attack`]), complete decisions ([`complete`]), per-class figures ([`classes`]), and the
//! gate's report that holds them all ([`gate_report`]), built once by [`assemble`]. Reporters render these; they compute
//! nothing.
//!
//! Imports: [`crate::engine`] (outcomes), [`crate::policy`], [`crate::bounds`],
//! [`crate::arith`] and the shared leaves.

pub mod assemble;
pub mod attack;
pub mod baseline;
pub mod classes;
pub mod complete;
pub mod curve;
pub mod gate_report;
pub mod regression;
pub mod verdict;
