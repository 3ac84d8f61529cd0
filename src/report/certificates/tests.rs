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
    let back = thresholds::from_proto(Some(&thresholds::to_proto(&t)));
    assert_eq!(back, t);
    assert_eq!(thresholds::from_proto(None), Thresholds::default());
}

/// A file's input set is a claim shown in every report: only a description lipfp writes is
/// accepted (a newline could start a workflow command in a GitHub annotation).
#[test]
fn a_shard_naming_an_unknown_input_set_is_refused() {
    let shard = |ball: &str| GateCertificates {
        gate: "g".into(),
        modes: vec!["real".into()],
        threshold_mode: "real".into(),
        total: 1,
        count: 1,
        instances: vec![Instance::default()],
        ball: ball.into(),
        ..GateCertificates::default()
    };
    let path = Path::new("c.lipfp");
    for ok in ["", "l2", "linf in [0, 1]"] {
        assert!(check_shard(path, &shard(ok)).is_ok(), "{ok:?}");
    }
    let err = check_shard(path, &shard("linf\n::error::forged")).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown input set `linf\\n::error::forged`"),
        "{err}"
    );
}
