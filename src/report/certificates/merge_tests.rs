//! Unit tests of the certificate files.

use super::*;

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
