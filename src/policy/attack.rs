//! Whether a gate (or `lipfp certify --attack`) can run the falsifier.

use crate::bounds::certify::Mode;

use super::radius::Radius;

/// Whether the falsifier ([`crate::engine::attack`]) can run on a gate: one uniform radius and a
/// sound first mode.
pub fn check_attack_request(radius: &Radius, mode: Mode) -> Result<(), String> {
    if let Radius::PerInstance(p) = radius {
        return Err(format!(
            "the falsifier needs one radius (epsilon); per-instance radii ({}) are not supported",
            p.display()
        ));
    }
    if !mode.is_sound() {
        return Err(
            "the falsifier attacks the points a sound mode does not certify, but the first mode is \
             `real` (unsound for floating-point execution); put a sound mode first"
                .into(),
        );
    }
    Ok(())
}
