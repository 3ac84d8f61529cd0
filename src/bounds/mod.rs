//! The bounds: sound spectral-norm upper bounds per layer, computed on every run
//! ([`norms::NetworkNorms`]), and the per-instance certificates built on them
//! ([`certify::ModelBounds`], [`certify::Certifier`]), over the input sets of [`ball`]. Every quantity rounds toward the safe
//! side ([`crate::arith::sound`]).
//!
//! Imports: [`crate::onnx`] (the network), [`crate::arith`], [`crate::error`].

pub mod ball;
pub mod certify;
pub mod local;
pub mod norms;
