//! Deciding a VNN-LIB property ([`crate::policy::vnnlib`]) with incomplete, floating-point-sound
//! bounds and a falsifier (docs/soundness.md "Properties"):
//!
//! * **holds** (`unsat`) only when every disjunct of the unsafe region is excluded: one of its
//!   constraints `a . Y + c <= 0` has a sound lower bound above zero over the input box, from the
//!   local bounds of the deployed execution ([`crate::engine::run::box_lower_bounds`]). The box
//!   bounded is the property's real box widened to hold every deployment-format rounding of its
//!   points, and the bounds cover the exact network too (a zero rounding error is covered);
//! * **violated** (`sat`) only with a counterexample: a deployment-format input inside the real
//!   box (checked in rationals) whose outputs, computed by lipfp's own covered execution
//!   ([`crate::engine::exec::Executor`]), satisfy every constraint of a disjunct (checked in rationals);
//! * with complete verification ([`VerifyOptions::complete`]), the disjuncts the bounds leave
//!   open go to branch and bound ([`crate::engine::complete`]): **holds** when every subdomain
//!   closes, **violated** when a leaf's candidate is confirmed as above;
//! * otherwise **unknown**, or **timeout** when the budget ran out first.
//!
//! The falsifier ([`falsifier`]) is a projected sign-gradient descent on the largest constraint
//! value of each disjunct not excluded, from the box's centre and seeded random points of it
//! (`SURE_STARTS` per disjunct, all in lockstep, then up to `STARTS` for low-dimensional inputs
//! within `FALSIFIER_SHARE` of the budget); it runs before branch and bound.

pub mod falsifier;
pub mod instance;
pub mod property;
pub use property::{
    bounded_box, verify, Counterexample, SearchSummary, Verdict, VerifyOptions, VerifyOutcome,
};
