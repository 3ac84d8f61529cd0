//! Unit tests of the certificate files: the thresholds round trip.

use super::*;

/// Every threshold, the warn level included, survives the certificate file unchanged.
#[test]
fn thresholds_round_trip_through_the_file_format() {
    let t = Thresholds {
        min_vra_pct: Some(80.0),
        max_certified_drop_pp: Some(1.5),
        min_class_certified_pct: Some(40.0),
        min_class_points: Some(7),
        warn: Some(Box::new(Thresholds {
            min_vra_pct: Some(90.0),
            max_vra_drop_pp: Some(0.5),
            max_vra_drop_significance: Some(0.01),
            ..Thresholds::default()
        })),
        ..Thresholds::default()
    };
    let back = from_proto_thresholds(Some(&to_proto_thresholds(&t)));
    assert_eq!(back, t);
    assert_eq!(from_proto_thresholds(None), Thresholds::default());
}
