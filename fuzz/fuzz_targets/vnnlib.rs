//! A VNN-LIB property file parsed (see `lipfp_fuzz::vnnlib`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lipfp_fuzz::vnnlib(data);
});
