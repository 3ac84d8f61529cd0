//! The exit-code contract (documented in [`crate::cli`]): [`Exit`] and how a report maps onto it.

use crate::report::Report;

/// Process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Success / all gates passed.
    Pass = 0,
    /// A gate failed.
    PolicyFailed = 1,
    /// Usage, policy or input error.
    InputError = 2,
    /// `lipfp verify`: neither holds nor violated was shown.
    Unknown = 3,
    /// `lipfp verify`: the time budget ran out first.
    Timeout = 4,
}

impl Exit {
    /// The numeric code.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// 2 when any gate errored, else 1 when any failed, else 0.
pub(super) fn exit_for(report: &Report) -> Exit {
    let t = report.tally();
    if t.errored > 0 {
        Exit::InputError
    } else if t.failed > 0 {
        Exit::PolicyFailed
    } else {
        Exit::Pass
    }
}
