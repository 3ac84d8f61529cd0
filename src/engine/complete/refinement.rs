//! Whether a ReLU-splitting subdomain computes its hidden layers again above its split
//! ([`crate::bounds::local::Known::Refine`]): a rule that watches what doing so achieves in the
//! search so far. Either choice is sound (docs/soundness.md B10); the rule only trades time per
//! subdomain against subdomains.
//!
//! Computing the layers above a split again costs CROWN's substitution for their unstable
//! units. On deep networks it stabilises many of them (on mnistfc 256x4 `prop_0_0.03`, about
//! 15% of those the parent's bounds leave unstable, and the search needs 50 times fewer
//! subdomains); on some searches it stabilises under 1% and only slows each subdomain (1.5
//! times on 256x2 `prop_1_0.03`, for 3% fewer subdomains). So the layers are computed again
//! while the share they stabilise, over the search so far, is at least [`MIN_SHARE_PERMILLE`];
//! the first [`WARM_UP_LAYERS`] layers always are, and a sample of the subdomains (one in
//! [`PROBE_EVERY`]) always is, so the share keeps being measured.
//!
//! The tally is updated between batches, from integer counts summed in the batch's order, so
//! every choice, and the search, is the same on every thread count. It counts the subdomains
//! whose bounds were computed; one shown infeasible while its layers were computed again adds
//! nothing, so the tally understates what computing again achieves (the rule errs towards
//! saying no, which costs subdomains, never soundness).

use crate::bounds::local::Refined;

/// Layers computed again before the rule may say no.
pub const WARM_UP_LAYERS: usize = 64;
/// Of every this many subdomains (by creation number), one computes its layers again whatever
/// the share.
pub const PROBE_EVERY: u64 = 8;
/// The share (per mille) of the units left unstable by the starting bounds that the
/// recomputed bounds must stabilise for the rule to keep computing them.
pub const MIN_SHARE_PERMILLE: usize = 20;

/// Whether a ReLU-splitting subdomain computes its hidden layers again above its split (both
/// sound, docs/soundness.md B10; the choice trades time per subdomain against subdomains).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recompute {
    /// As the search's tally says ([`RefinementRule`]).
    #[default]
    Adaptive,
    /// Every subdomain.
    Always,
    /// No subdomain: every layer keeps its parent's bounds, the splits clamped.
    Never,
}

impl Recompute {
    /// Reads `adaptive`, `always` or `never` (`lipfp verify --recompute`).
    pub fn parse(text: &str) -> Result<Recompute, String> {
        match text {
            "adaptive" => Ok(Recompute::Adaptive),
            "always" => Ok(Recompute::Always),
            "never" => Ok(Recompute::Never),
            other => Err(format!(
                "`{other}` is not a recompute setting: use \"adaptive\", \"always\" or \"never\""
            )),
        }
    }
}

/// The search's tally of what computing layers again achieved, and the setting it serves.
#[derive(Clone, Copy, Debug, Default)]
pub struct RefinementRule {
    tally: Refined,
    recompute: Recompute,
}

impl RefinementRule {
    /// A rule for the setting `recompute`, with nothing tallied yet.
    pub fn new(recompute: Recompute) -> Self {
        RefinementRule {
            tally: Refined::default(),
            recompute,
        }
    }

    /// Adds a subdomain's tally.
    pub fn record(&mut self, refined: Refined) {
        self.tally = self.tally.plus(refined);
    }

    /// Whether the subdomain numbered `id` computes its layers again.
    pub fn refine(&self, id: u64) -> bool {
        match self.recompute {
            Recompute::Always => true,
            Recompute::Never => false,
            Recompute::Adaptive => {
                self.tally.layers < WARM_UP_LAYERS
                    || id.is_multiple_of(PROBE_EVERY)
                    || stabilised_share_permille(self.tally) >= MIN_SHARE_PERMILLE
            }
        }
    }
}

/// The share, per mille and rounded down, of the units the starting bounds left unstable that
/// the recomputed bounds stabilised: `1000 (before - after) / before` (1000 when none was
/// unstable: nothing is lost by computing again).
pub fn stabilised_share_permille(t: Refined) -> usize {
    match t.unstable_before {
        0 => 1000,
        before => 1000 * before.saturating_sub(t.unstable_after) / before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(layers: usize, before: usize, after: usize) -> Refined {
        Refined {
            layers,
            unstable_before: before,
            unstable_after: after,
        }
    }

    /// The shares measured on mnistfc (session 18): 256x4 `prop_0_0.03` stabilised 5,499 of
    /// 37,542 (146 per mille), 256x2 `prop_1_0.03` 556 of 78,564 (7 per mille).
    #[test]
    fn the_share_is_per_mille_of_the_units_left_unstable() {
        assert_eq!(stabilised_share_permille(tally(1048, 37_542, 32_043)), 146);
        assert_eq!(stabilised_share_permille(tally(860, 78_564, 78_008)), 7);
        assert_eq!(stabilised_share_permille(tally(3, 0, 0)), 1000);
        assert_eq!(stabilised_share_permille(tally(1, 50, 49)), 20);
        assert_eq!(stabilised_share_permille(tally(1, 51, 50)), 19);
    }

    #[test]
    fn layers_are_computed_again_while_it_pays_and_in_every_probe() {
        let mut rule = RefinementRule::default();
        // warm-up: always, however little it achieves
        rule.record(tally(WARM_UP_LAYERS - 1, 1000, 1000));
        assert!(rule.refine(1));
        // past it: only the probes while the share is under the minimum
        rule.record(tally(1, 0, 0));
        assert!(!rule.refine(1) && !rule.refine(PROBE_EVERY + 1));
        assert!(rule.refine(0) && rule.refine(3 * PROBE_EVERY));
        // a share at the minimum turns it on again
        rule.record(tally(10, 20, 0));
        assert_eq!(stabilised_share_permille(rule.tally), 19);
        rule.record(tally(1, 0, 0));
        rule.record(tally(1, 1, 0));
        assert_eq!(stabilised_share_permille(rule.tally), 20);
        assert!(rule.refine(1));
    }

    #[test]
    fn the_three_settings_are_read_by_name() {
        assert_eq!(Recompute::parse("adaptive"), Ok(Recompute::Adaptive));
        assert_eq!(Recompute::parse("always"), Ok(Recompute::Always));
        assert_eq!(Recompute::parse("never"), Ok(Recompute::Never));
        assert!(Recompute::parse("Never").is_err_and(|e| e.contains("`Never`")));
    }

    /// `always` and `never` ignore the tally, warm-up and probes included.
    #[test]
    fn always_and_never_ignore_the_tally() {
        for (recompute, want) in [(Recompute::Always, true), (Recompute::Never, false)] {
            let mut rule = RefinementRule::new(recompute);
            for t in [tally(0, 0, 0), tally(WARM_UP_LAYERS, 1000, 1000)] {
                rule.record(t);
                assert!((0..3 * PROBE_EVERY).all(|id| rule.refine(id) == want));
            }
        }
    }
}
