//! Local bounds: lower bounds on a network's logit margins over the l2 ball around a point, by
//! linear bound propagation (CROWN: per-layer pre-activation bounds, linear ReLU relaxations,
//! backward substitution, the l2 dual norm at the input), computed in float64 with every rounding
//! bounded (docs/soundness.md "Local bounds").
//!
//! The network is the real one, or, with a [`Deployment`], the deployed execution: each layer's
//! rounding error enters as a bounded input (`deployed`), so the bounds hold for every execution
//! the model covers and the certificate of mode `local` subtracts nothing more. Pre-activation
//! bounds of each hidden layer are the
//! intersection of three sound sources: the per-unit Lipschitz bound around the centre
//! (`|z_j(x) - z_j(x0)| <= ||W_j|| prod_{k<l} ||W_k|| eps`), interval propagation from the
//! previous layer, and CROWN's backward substitution for the units the first two leave unstable.

mod backward;
mod deployed;
mod hidden;
mod hidden_pass;
pub mod interval;
mod local_net;
mod lookahead;
mod region;
pub mod relax;
mod row_search;
mod rows;
#[cfg(test)]
mod seeded_net;
mod slopes;
mod split;
pub mod split_score;
mod unit_branching;
pub use backward::Trace;
pub use deployed::{Deployment, LayerRounding};
pub use hidden::{HiddenBounds, KeptBounds, Known, Refined};
pub use local_net::{LocalLayer, LocalNet, SlopeSearch, SplitBounds, SplitJob, SplitOutcome};
pub use lookahead::Estimated;
pub use region::InputSet;
pub use row_search::{group_rank, RowGroups, Warm};
pub use slopes::{Multipliers, StoredMultipliers};
pub use split::{Infeasible, Phase, Splits};
pub use unit_branching::UnitBranching;
