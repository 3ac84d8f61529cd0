//! The `lipfp` command line: a thin shell over the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = lipfp::cli::Cli::parse();
    let code = lipfp::cli::run(cli);
    ExitCode::from(code.as_u8())
}
