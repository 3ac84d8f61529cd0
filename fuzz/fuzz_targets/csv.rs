//! A CSV file read as a test set, with and without a label column (see `lipfp_fuzz::csv`).
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
    let _ = lipfp_fuzz::csv(scratch(), data);
});
