//! Bad input never panics: corrupted models and data files give an error (or, when the
//! corruption happens to leave a valid file, a result), never a crash.

use std::path::Path;

use lipfp::arith::format::Format;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn mutations(bytes: &[u8], count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 33
    };
    (0..count)
        .map(|k| {
            let mut b = bytes.to_vec();
            match k % 3 {
                // flip a few bytes
                0 => {
                    for _ in 0..1 + next() % 4 {
                        let i = next() as usize % b.len();
                        b[i] ^= 1 << (next() % 8);
                    }
                }
                // truncate
                1 => b.truncate(next() as usize % b.len()),
                // overwrite a run with one value
                _ => {
                    let i = next() as usize % b.len();
                    let len = (1 + next() as usize % 16).min(b.len() - i);
                    let v = next() as u8;
                    b[i..i + len].fill(v);
                }
            }
            b
        })
        .collect()
}

#[test]
fn corrupted_models_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    for example in ["digits", "breast-cancer"] {
        let bytes =
            std::fs::read(root().join("examples").join(example).join("model.onnx")).unwrap();
        for (k, m) in mutations(&bytes, 300, 11).into_iter().enumerate() {
            let p = tmp.path().join(format!("m{k}.onnx"));
            std::fs::write(&p, &m).unwrap();
            let r = std::panic::catch_unwind(|| {
                lipfp::onnx::model::load(&p, Format::Float32, false).map(|_| ())
            });
            assert!(r.is_ok(), "{example} mutation {k} panicked");
        }
    }
}

#[test]
fn corrupted_inputs_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let d = root().join("examples/digits");
    let net = lipfp::onnx::model::load(&d.join("model.onnx"), Format::Float32, false).unwrap();
    let bytes = std::fs::read(d.join("x_test.npy")).unwrap();
    // mutate mostly the header, where the parsing is
    let header: Vec<u8> = bytes[..256].to_vec();
    for (k, mut m) in mutations(&header, 300, 5).into_iter().enumerate() {
        if m.len() == 256 {
            m.extend_from_slice(&bytes[256..]);
        }
        let p = tmp.path().join(format!("x{k}.npy"));
        std::fs::write(&p, &m).unwrap();
        let r = std::panic::catch_unwind(|| {
            lipfp::engine::data::load_inputs(&p, &net, Format::Float32).map(|_| ())
        });
        assert!(r.is_ok(), "input mutation {k} panicked");
        let r = std::panic::catch_unwind(|| {
            lipfp::engine::data::load_labels(&p, None, 450, 10).map(|_| ())
        });
        assert!(r.is_ok(), "label mutation {k} panicked");
    }
}

#[test]
fn a_header_announcing_more_data_than_the_file_holds_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let d = root().join("examples/digits");
    let net = lipfp::onnx::model::load(&d.join("model.onnx"), Format::Float32, false).unwrap();
    let bytes = std::fs::read(d.join("x_test.npy")).unwrap();
    // same header length: the longer shape eats into the space padding before the newline
    let (old, new) = (
        b"(450, 1, 8, 8), }".as_slice(),
        b"(999999999999, 1, 8, 8), }".as_slice(),
    );
    let at = bytes.windows(old.len()).position(|w| w == old).unwrap();
    let mut m = bytes[..at].to_vec();
    m.extend_from_slice(new);
    let rest = &bytes[at + old.len()..];
    m.extend_from_slice(&rest[new.len() - old.len()..]);
    assert_eq!(m.len(), bytes.len());
    let p = tmp.path().join("huge.npy");
    std::fs::write(&p, &m).unwrap();
    let e = lipfp::engine::data::load_inputs(&p, &net, Format::Float32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("header announces"), "{e}");
}
