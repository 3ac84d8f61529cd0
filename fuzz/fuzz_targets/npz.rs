//! A `.npz` archive read as a test set: `x` as inputs, `y` as labels (see `lipfp_fuzz::npz`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lipfp_fuzz::Scratch;

/// One scratch directory for the process (inputs are written there, then read back).
fn scratch() -> &'static Scratch {
    static SCRATCH: OnceLock<Scratch> = OnceLock::new();
    SCRATCH.get_or_init(Scratch::new)
}

fuzz_target!(|data: &[u8]| {
    let _ = lipfp_fuzz::npz(scratch(), data);
});
