//! A `lipfp.toml` policy: `Policy::parse` (see `lipfp_fuzz::policy`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lipfp_fuzz::policy(data);
});
