//! Per-instance certificates: the classical real-arithmetic check (unsound for floating-point
//! execution, shown as the ceiling) and the paper's Standard floating-point certificate
//! (Theorem "Floating-point robustness certificate").
//!
//! Everything that depends only on the model is precomputed once in [`ModelBounds`]; the
//! per-instance work is a handful of upward-rounded scalar steps per layer and per class pair.

pub mod affine;
mod centre;
pub mod componentwise;
pub mod head;
mod layer_bounds;
mod local_certificate;
mod mode;
mod model_bounds;
pub mod modes;
pub mod quantities;
mod refusal;
pub mod tensor_core;

pub use centre::{Centre, Decided, HiCentre, PointResult};
pub use local_certificate::{local_overflow, LocalMargins};
pub use mode::{parse_mode_list, Mode, MODE_NAMES};
pub use model_bounds::{
    margin_lower, predicted_class, LayerBounds, ModelBounds, PairBounds, Verdict,
};
pub use modes::Certifier;
pub use refusal::Refusal;
