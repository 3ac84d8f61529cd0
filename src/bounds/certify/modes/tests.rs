//! Unit tests of the per-point decision helpers.

use super::{nan_safe_min, verdict_of, Refusal};

#[test]
fn only_a_positive_slack_certifies() {
    assert_eq!(verdict_of(f64::MIN_POSITIVE), Ok(()));
    for s in [0.0, -0.0, -1.0, f64::NAN] {
        assert_eq!(verdict_of(s), Err(Refusal::Margin), "{s}");
    }
}

#[test]
fn a_nan_slack_on_either_side_wins_the_minimum() {
    assert_eq!(nan_safe_min(1.0, 2.0), 1.0);
    assert_eq!(nan_safe_min(2.0, -1.0), -1.0);
    assert!(nan_safe_min(f64::NAN, 2.0).is_nan());
    assert!(nan_safe_min(2.0, f64::NAN).is_nan());
    assert!(nan_safe_min(f64::INFINITY, f64::NAN).is_nan());
}
