//! Progress on stderr: stage lines, quiet when asked. Reports go to files or stdout; logs never
//! mix with them.

use std::io::IsTerminal;

/// Where progress goes.
#[derive(Clone, Debug)]
pub struct Progress {
    quiet: bool,
    terminal: bool,
}

impl Progress {
    /// Progress on stderr, unless `quiet`.
    pub fn new(quiet: bool) -> Self {
        Progress {
            quiet,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// A progress sink that prints nothing.
    pub fn silent() -> Self {
        Progress {
            quiet: true,
            terminal: false,
        }
    }

    /// Announce a stage of long work.
    pub fn stage(&self, msg: &str) {
        if !self.quiet {
            if self.terminal {
                eprintln!("  \u{2022} {msg}");
            } else {
                eprintln!("lipfp: {msg}");
            }
        }
    }

    /// A warning (shown even when quiet).
    pub fn warn(&self, msg: &str) {
        eprintln!("lipfp: warning: {msg}");
    }
}
