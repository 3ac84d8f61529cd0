//! The `lipfp` command line: a thin shell over the library.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: with glibc's malloc, branch and bound's long-lived kept bounds between large
/// temporaries held about twice the queue's memory cap (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = lipfp::cli::Cli::parse();
    let code = lipfp::cli::run(cli);
    ExitCode::from(code.as_u8())
}
