//! Gate verdicts: a run's figures against a gate's thresholds ([`verdict`]), against the same
//! gate in a previous report ([`baseline`]), and a gate's robustness-curve figures
//! ([`curve::CurveReport`]). Reporters render these; they compute nothing.
//!
//! Imports: [`crate::engine`] (outcomes), [`crate::policy`], [`crate::bounds`],
//! [`crate::arith`] and the shared leaves.

pub mod baseline;
pub mod curve;
pub mod regression;
pub mod verdict;
