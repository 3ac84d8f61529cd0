//! `lipfp verify`'s request as the tests make it: the model's own format, the default
//! execution, 12 Gram iterations.

#![allow(dead_code)]

use lipfp::commands::verify::VerifyRequest;
use lipfp::engine::verify::VerifyOptions;

/// A request with `timeout_s` seconds per instance and branch and bound as `options` says.
pub fn request(timeout_s: f64, options: VerifyOptions) -> VerifyRequest {
    VerifyRequest {
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        gram_iterations: 12,
        timeout_s,
        options,
    }
}
