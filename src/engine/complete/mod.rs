//! Complete verification: branch and bound over the floating-point-sound local bounds
//! (docs/soundness.md "Complete verification").
//!
//! The question: over an input box, does some execution of the deployed model put its outputs in
//! the unsafe region, a union of disjuncts each the conjunction of constraints `a . y + c <= 0`?
//! A subdomain (a box and fixed ReLU phases, [`domain`]) is closed when, for every disjunct, the
//! local bounds show one constraint positive over it, or when its splits are infeasible. Open
//! subdomains are split, the hardest first ([`branch`]: a ReLU for high-dimensional inputs, an
//! input coordinate for low-dimensional ones or when no unit is unstable). Every bounded
//! subdomain offers a candidate, the vertex its worst linear bound is attained at, and the
//! caller's check (lipfp's own execution of the model, in rationals) alone makes it a
//! counterexample.
//!
//! Children are bounded in fixed batches, each in fixed groups whose slope searches run as one
//! (`bounding.rs`: at every layer one product for the group's rows); the groups run in parallel
//! and are merged in creation order, so the result for a budget of subdomains does not depend
//! on the thread count. The queue's memory is counted
//! against a cap: past it the search stops with `unknown`.

mod bounding;
pub mod branch;
pub mod domain;
pub mod points;
pub mod refinement;
pub mod search;
pub mod stages;
pub use bounding::excluded;
pub use refinement::Recompute;
pub use search::{Budget, CompleteOutcome, Decision, Objective, SearchSet, INPUT_SPLIT_MAX_DIM};
pub use stages::{decide, RootBranching};
