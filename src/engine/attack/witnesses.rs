//! `--attack-witnesses PATH.npy`: the adversarial inputs found, float64 `[F, ...input shape]`,
//! and their indices in the test set, int64 `[F]`, in `PATH` with the extension `indices.npy`.

use std::path::{Path, PathBuf};

use super::outcome::AttackOutcome;
use crate::engine::run::Subject;
use crate::files::{npy_bytes, Artifact};

/// The indices file next to a witnesses file: `w.npy` -> `w.indices.npy`.
pub fn indices_path(path: &Path) -> PathBuf {
    path.with_extension("indices.npy")
}

/// The two artifacts of `a`'s witnesses on `subject`, written to `path` and [`indices_path`].
pub fn artifacts(path: &Path, subject: &Subject, a: &AttackOutcome) -> Vec<Artifact> {
    let mut shape = vec![a.witnesses.len() as u64];
    shape.extend(subject.net.input_shape.iter().map(|&d| d as u64));
    let values: Vec<f64> = a
        .witnesses
        .iter()
        .flat_map(|w| w.input.iter().copied())
        .collect();
    let indices: Vec<i64> = a
        .witnesses
        .iter()
        .map(|w| (subject.first + w.index) as i64)
        .collect();
    vec![
        Artifact::new(path, npy_bytes(&shape, &values), "witnesses file"),
        Artifact::new(
            &indices_path(path),
            npy_bytes(&[indices.len() as u64], &indices),
            "witness indices file",
        ),
    ]
}
