//! Progress on stderr: stage lines, a bar on a terminal, periodic plain lines in CI logs, and
//! nothing with `--quiet`. Reports go to files or stdout; logs never mix with them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `s` on one line: control characters (newline, carriage return, escape, ...) written as
/// Rust escapes (`\n`, `\r`, `\u{1b}`).
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Where progress goes.
#[derive(Clone, Debug)]
pub struct Progress {
    quiet: bool,
    terminal: bool,
}

/// Seconds between plain progress lines when stderr is not a terminal.
const LOG_INTERVAL: Duration = Duration::from_secs(5);

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

    /// Announce a stage of long work (on one line: control characters in names and paths are
    /// escaped, so nothing a policy says can start a line of its own).
    pub fn stage(&self, msg: &str) {
        let msg = printable(msg);
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
        eprintln!("lipfp: warning: {}", printable(msg));
    }

    /// Report an error that does not stop the run (a gate that cannot be evaluated), even when
    /// quiet.
    pub fn error(&self, msg: &str) {
        eprintln!("lipfp: error: {}", printable(msg));
    }

    /// Start counting `total` units of work labelled `what` (thread-safe; see [`Task::add`]).
    pub fn task(&self, what: &str, total: u64) -> Task {
        let bar = if self.quiet || !self.terminal {
            None
        } else {
            let style = ProgressStyle::with_template(
                "  {msg:<28} [{bar:30}] {pos}/{len} ({elapsed}, eta {eta})",
            )
            .expect("a valid progress template")
            .progress_chars("=> ");
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(style)
                .with_message(what.to_string());
            Some(bar)
        };
        Task {
            what: what.to_string(),
            total,
            done: AtomicU64::new(0),
            bar,
            log: (!self.quiet && !self.terminal).then(|| Mutex::new(Instant::now())),
        }
    }
}

/// Units of work being counted; dropped (or [`Task::finish`]ed) when done.
pub struct Task {
    what: String,
    total: u64,
    done: AtomicU64,
    bar: Option<ProgressBar>,
    /// Time of the last plain line (CI logs).
    log: Option<Mutex<Instant>>,
}

impl Task {
    /// Record `n` more units done.
    pub fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
        if let Some(last) = &self.log {
            if let Ok(mut last) = last.try_lock() {
                if last.elapsed() >= LOG_INTERVAL && done < self.total {
                    *last = Instant::now();
                    eprintln!(
                        "lipfp: {}: {done}/{} ({:.0}%)",
                        printable(&self.what),
                        self.total,
                        100.0 * done as f64 / self.total.max(1) as f64
                    );
                }
            }
        }
    }

    /// Clear the bar.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_cannot_start_a_line() {
        assert_eq!(
            printable("a\n::error ::x\r\u{1b}"),
            "a\\n::error ::x\\r\\u{1b}"
        );
        assert_eq!(printable("dé-jà vu"), "dé-jà vu");
    }
}
