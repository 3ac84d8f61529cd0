//! A gate's branch-and-bound budget (`mode = "complete"`): the keys `complete_budget_s`,
//! `complete_total_s`, `complete_subdomains` and `complete_memory_mib`, validated with errors
//! that name the key.

use super::attack::check_attack_request;
use super::radius::Radius;
use crate::bounds::certify::Mode;

/// The limits of branch and bound at a gate's points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompleteBudget {
    /// Seconds per point (`complete_budget_s`, default 10).
    pub seconds: f64,
    /// Seconds for all the points together (`complete_total_s`; `None`: no limit); the points it
    /// leaves are undecided.
    pub total_s: Option<f64>,
    /// Subdomains per point (`complete_subdomains`, default 2000): a budget that gives the same
    /// decisions on every machine.
    pub subdomains: usize,
    /// Bytes one search's queue may hold (`complete_memory_mib`, default 1024 MiB).
    pub memory_bytes: usize,
}

impl Default for CompleteBudget {
    fn default() -> Self {
        CompleteBudget {
            seconds: 10.0,
            total_s: None,
            subdomains: 2_000,
            memory_bytes: 1 << 30,
        }
    }
}

/// The largest subdomain budget per point.
const MAX_SUBDOMAINS: u64 = 1 << 32;
/// The largest queue per search, in MiB (1 TiB).
const MAX_MEMORY_MIB: u64 = 1 << 20;

/// The budget keys as written in a `[[gate]]`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CompleteKeys {
    pub budget_s: Option<f64>,
    pub total_s: Option<f64>,
    pub subdomains: Option<u64>,
    pub memory_mib: Option<u64>,
}

impl CompleteKeys {
    /// The budget of a gate with `modes` at `radius` (`None` without mode `complete`), or the
    /// error, naming the key (`at`: how errors name the gate).
    pub(super) fn budget(
        self,
        modes: &[Mode],
        radius: &Radius,
        curve: bool,
    ) -> Result<Option<CompleteBudget>, String> {
        let set = [
            ("complete_budget_s", self.budget_s.is_some()),
            ("complete_total_s", self.total_s.is_some()),
            ("complete_subdomains", self.subdomains.is_some()),
            ("complete_memory_mib", self.memory_mib.is_some()),
        ];
        if !modes.contains(&Mode::Complete) {
            return match set.iter().find(|(_, given)| *given) {
                Some((key, _)) => Err(format!(
                    "{key} is set, but the gate's mode has no `complete` (add it: mode = \"complete\")"
                )),
                None => Ok(None),
            };
        }
        check_attack_request(radius, Mode::Complete).map_err(|m| format!("mode complete: {m}"))?;
        if curve {
            return Err(
                "curve: a robustness curve is not computed for mode `complete` (branch and bound \
                 runs at the gate's radius); put the curve on a gate with mode = \"best\""
                    .into(),
            );
        }
        let seconds = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!(
                    "{key}: {v} is not a number of seconds (finite, > 0)"
                ))
            }
        };
        let count = |key: &str, v: u64, max: u64| {
            if (1..=max).contains(&v) {
                Ok(v as usize)
            } else {
                Err(format!("{key}: {v} must be between 1 and {max}"))
            }
        };
        let d = CompleteBudget::default();
        Ok(Some(CompleteBudget {
            seconds: match self.budget_s {
                Some(v) => seconds("complete_budget_s", v)?,
                None => d.seconds,
            },
            total_s: self
                .total_s
                .map(|v| seconds("complete_total_s", v))
                .transpose()?,
            subdomains: match self.subdomains {
                Some(v) => count("complete_subdomains", v, MAX_SUBDOMAINS)?,
                None => d.subdomains,
            },
            memory_bytes: match self.memory_mib {
                Some(v) => count("complete_memory_mib", v, MAX_MEMORY_MIB)? << 20,
                None => d.memory_bytes,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform() -> Radius {
        Radius::parse_decimal("0.1").expect("a radius")
    }

    #[test]
    fn the_keys_are_checked_and_need_the_mode() {
        let none = CompleteKeys::default();
        let complete = [Mode::Complete];
        assert_eq!(
            none.budget(&complete, &uniform(), false),
            Ok(Some(CompleteBudget::default()))
        );
        assert_eq!(none.budget(&[Mode::Best], &uniform(), false), Ok(None));
        let keys = CompleteKeys {
            budget_s: Some(2.5),
            total_s: Some(600.0),
            subdomains: Some(50),
            memory_mib: Some(64),
        };
        assert_eq!(
            keys.budget(&complete, &uniform(), false),
            Ok(Some(CompleteBudget {
                seconds: 2.5,
                total_s: Some(600.0),
                subdomains: 50,
                memory_bytes: 64 << 20,
            }))
        );
        let err = |k: CompleteKeys, modes: &[Mode], curve: bool| {
            k.budget(modes, &uniform(), curve).expect_err("refused")
        };
        assert!(err(keys, &[Mode::Best], false).starts_with("complete_budget_s is set"));
        let only_total = CompleteKeys {
            total_s: Some(1.0),
            ..none
        };
        assert!(err(only_total, &[Mode::Local], false).starts_with("complete_total_s is set"));
        for (k, key) in [
            (
                CompleteKeys {
                    budget_s: Some(0.0),
                    ..none
                },
                "complete_budget_s",
            ),
            (
                CompleteKeys {
                    budget_s: Some(f64::NAN),
                    ..none
                },
                "complete_budget_s",
            ),
            (
                CompleteKeys {
                    total_s: Some(-1.0),
                    ..none
                },
                "complete_total_s",
            ),
            (
                CompleteKeys {
                    subdomains: Some(0),
                    ..none
                },
                "complete_subdomains",
            ),
            (
                CompleteKeys {
                    memory_mib: Some(u64::MAX),
                    ..none
                },
                "complete_memory_mib",
            ),
        ] {
            assert!(err(k, &complete, false).starts_with(key), "{key}");
        }
        assert!(err(none, &complete, true).starts_with("curve:"));
        let per_instance = Radius::PerInstance("radii.npy".into());
        assert!(none
            .budget(&complete, &per_instance, false)
            .expect_err("refused")
            .contains("one radius"));
    }
}
