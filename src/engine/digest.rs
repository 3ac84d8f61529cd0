//! SHA-256 digests of what a run certified — the test set as converted and the per-instance
//! radii — so that reports can be compared like with like (see [`crate::gate::baseline`]).

use sha2::{Digest, Sha256};

use crate::arith::format::Format;

/// The SHA-256 of a test set as certified, computed while the rows stream through the forward
/// passes: a domain tag, the format, the number of points and features, every converted input
/// value's float64 bits (little-endian, row-major), then `labels` or `no labels` and every
/// label as a little-endian `u64`.
pub struct TestSetHasher(Sha256);

impl TestSetHasher {
    /// Start the hash of `n` points of `dim` features in `format`.
    pub fn new(format: Format, n: usize, dim: usize) -> Self {
        let mut h = Sha256::new();
        h.update(b"lipfp-test-set-v1\0");
        h.update(format.name().as_bytes());
        h.update([0]);
        h.update((n as u64).to_le_bytes());
        h.update((dim as u64).to_le_bytes());
        TestSetHasher(h)
    }

    /// Add converted input values, in row-major order.
    pub fn inputs(&mut self, values: &[f64]) {
        update_f64s(&mut self.0, values);
    }

    /// Finish with the labels, when there are any.
    pub fn finish(mut self, labels: Option<&[usize]>) -> String {
        match labels {
            Some(l) => {
                self.0.update(b"labels");
                let mut bytes = Vec::with_capacity(l.len() * 8);
                for &y in l {
                    bytes.extend_from_slice(&(y as u64).to_le_bytes());
                }
                self.0.update(&bytes);
            }
            None => self.0.update(b"no labels"),
        }
        hex(&self.0.finalize())
    }
}

/// Values hashed per step: the bytes go through a fixed buffer of 64 KiB, never a copy of the
/// whole block.
const CHUNK: usize = 8192;

/// Hash `values` as little-endian float64 bits.
fn update_f64s(h: &mut Sha256, values: &[f64]) {
    let mut buf = Vec::with_capacity(CHUNK * 8);
    for chunk in values.chunks(CHUNK) {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        h.update(&buf);
    }
}

/// Lower-case hexadecimal digits of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of per-instance radii (the whole file's, as float64 bits, little-endian, after a
/// domain tag): reports record it so that a baseline is compared only at the same radii.
pub fn radii_hash(radii: &[f64]) -> String {
    let mut h = Sha256::new();
    h.update(b"lipfp-radii-v1\0");
    update_f64s(&mut h, radii);
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(format: Format, values: &[f64], labels: Option<&[usize]>) -> String {
        let mut h = TestSetHasher::new(format, values.len(), 1);
        // streamed in blocks or at once: the same digest
        for block in values.chunks(2) {
            h.inputs(block);
        }
        h.finish(labels)
    }

    #[test]
    fn the_test_set_hash_covers_values_labels_and_format() {
        let x = [0.5, 1.0, -2.0];
        let base = hash(Format::Float32, &x, Some(&[0, 1, 2]));
        assert_eq!(base.len(), 64);
        let mut once = TestSetHasher::new(Format::Float32, 3, 1);
        once.inputs(&x);
        assert_eq!(once.finish(Some(&[0, 1, 2])), base);
        assert_ne!(hash(Format::Float16, &x, Some(&[0, 1, 2])), base);
        assert_ne!(hash(Format::Float32, &x, Some(&[0, 1, 1])), base);
        assert_ne!(hash(Format::Float32, &x, None), base);
        assert_ne!(
            hash(Format::Float32, &[0.5, 1.0, -0.0], Some(&[0, 1, 2])),
            base
        );
        assert_ne!(radii_hash(&[0.3, 0.3]), radii_hash(&[0.3, 0.25]));
    }
}
