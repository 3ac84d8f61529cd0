//! The certification modes ([`Mode`]): their names, order and soundness.

use std::fmt;

use serde::Serialize;

/// A certification mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Classical real-arithmetic check `m_hat > L eps`: the ceiling; **unsound** for
    /// floating-point execution.
    Real,
    /// The paper's Standard certificate (deployment-time, worst-case radii).
    Standard,
    /// Hybrid-Centre (Theorem "Hybrid-Centre certificate"): the centre deviation measured
    /// against a float64 execution.
    Hybrid,
    /// Measured-Radii (Theorem "Measured-Radii certificate"): radii from the float64 execution.
    Measured,
    /// Beyond the paper: a float64 lower bound on the real centre margin, with the measured ball.
    #[serde(rename = "float64-centre")]
    Float64Centre,
    /// Per competing class, the best sound centre bound and the smallest sound ball bound.
    Best,
    /// Beyond the paper: local bounds on the deployed execution's margins over the ball (linear
    /// bound propagation with each layer's rounding as a bounded input, [`crate::bounds::local`]).
    Local,
    /// Beyond the paper: `best` with local bounds at every point, then the falsifier and branch
    /// and bound over the set at the points they leave (`crate::engine::complete`).
    Complete,
}

impl Mode {
    /// Name used in policies, flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Real => "real",
            Mode::Standard => "standard",
            Mode::Hybrid => "hybrid",
            Mode::Measured => "measured",
            Mode::Float64Centre => "float64-centre",
            Mode::Best => "best",
            Mode::Local => "local",
            Mode::Complete => "complete",
        }
    }

    /// Whether the mode consults a float64 reference execution (pre-deployment modes).
    pub fn needs_reference(self) -> bool {
        matches!(
            self,
            Mode::Hybrid | Mode::Measured | Mode::Float64Centre | Mode::Best | Mode::Complete
        )
    }

    /// The mode whose per-point certificate this mode's is: `complete`'s is `best`'s (branch
    /// and bound then decides what it leaves), every other mode's its own.
    pub fn certifies_as(self) -> Mode {
        match self {
            Mode::Complete => Mode::Best,
            m => m,
        }
    }

    /// Whether the mode's certificate reads local bounds at every point it is asked for.
    pub fn needs_local(self) -> bool {
        matches!(self, Mode::Local | Mode::Complete)
    }

    /// Every mode, in report order.
    pub const ALL: [Mode; 8] = [
        Mode::Real,
        Mode::Standard,
        Mode::Hybrid,
        Mode::Measured,
        Mode::Float64Centre,
        Mode::Best,
        Mode::Local,
        Mode::Complete,
    ];

    /// The sound modes `lipfp certify` computes when no mode is given.
    pub const SOUND: [Mode; 5] = [
        Mode::Standard,
        Mode::Hybrid,
        Mode::Measured,
        Mode::Float64Centre,
        Mode::Best,
    ];

    /// Whether the mode is sound for floating-point execution.
    pub fn is_sound(self) -> bool {
        !matches!(self, Mode::Real)
    }

    /// Parse a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// The names accepted for modes.
pub const MODE_NAMES: &str =
    "standard, hybrid, measured, float64-centre, best, local, complete, real";

/// Parse a comma-separated list of modes (duplicates dropped, order kept).
pub fn parse_mode_list(text: &str) -> Result<Vec<Mode>, String> {
    let mut modes = Vec::new();
    for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let m = Mode::parse(part)
            .ok_or_else(|| format!("unknown mode `{part}` (supported: {MODE_NAMES})"))?;
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    if modes.is_empty() {
        return Err(format!("no mode given (supported: {MODE_NAMES})"));
    }
    Ok(modes)
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            assert!(MODE_NAMES.contains(m.name()));
        }
        assert!(!Mode::Real.is_sound());
        assert!(Mode::Standard.is_sound());
    }
}
