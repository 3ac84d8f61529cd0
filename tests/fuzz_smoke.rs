//! Issue 10 item 7, fuzzing on stable Rust: the fuzz targets' entry points (`fuzz/src/lib.rs`,
//! included here as a module) on mutated seed files, so CI exercises what the fuzzers run.
//!
//! For each reader (ONNX models, `.npy` arrays, TOML policies, certificate files) every seed of
//! `fuzz/corpus/<target>/` is read as is, then a few hundred mutants of the seeds (bit flips,
//! byte overwrites, insertions, deletions, truncations and block copies, half of them aimed at
//! the first bytes, where the headers are). A case passes when the entry point returns, a loaded
//! result or an error naming the file, without panicking and within [`CASE_LIMIT`]; the entry
//! points also check the invariants of what loads. The random generator is seeded: a run is
//! reproducible; `LIPFP_FUZZ_SMOKE_SEED` and `LIPFP_FUZZ_SMOKE_CASES` change the seed and the
//! number of mutants per reader.
//!
//! The fuzzers themselves run on nightly with `fuzz/run.sh` (docs/fuzzing.md).
//! `write_seed_corpus` (ignored; `fuzz/make_corpus.sh` runs it) regenerates the seeds from the
//! repository's own files.

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::Scratch;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Mutants per reader (`LIPFP_FUZZ_SMOKE_CASES` overrides it).
const CASES: u32 = 500;

/// The longest one input may take (the fuzzers' `-timeout` is 10 s).
const CASE_LIMIT: Duration = Duration::from_secs(5);

/// Mutations aimed at the head of a file land in its first this many bytes.
const HEAD: usize = 512;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The committed seeds of a fuzz target: the files of `fuzz/corpus/<target>/` whose name has an
/// extension (what libFuzzer adds to the directory is named by a hash without one), and for
/// `onnx` and `npy` the real exports of `tests/corpus/` (`corpus/<name>`), as `fuzz/run.sh`
/// gives them to the fuzzers.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("fuzz/corpus").join(target);
    let files = |dir: &Path, ext: Option<&str>| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e} (run fuzz/make_corpus.sh)", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| match ext {
                Some(ext) => p.extension().is_some_and(|e| e == ext),
                None => p.extension().is_some(),
            })
            .collect()
    };
    let read = |p: &Path, prefix: &str| {
        let name = p.file_name().unwrap().to_string_lossy();
        (
            format!("{prefix}{name}"),
            std::fs::read(p).expect("read a seed"),
        )
    };
    let mut out: Vec<(String, Vec<u8>)> = files(&dir, None).iter().map(|p| read(p, "")).collect();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    let exports = root().join("tests/corpus");
    if matches!(target, "onnx" | "npy") && exports.is_dir() {
        let found = files(&exports, Some(target));
        out.extend(found.iter().map(|p| read(p, "corpus/")));
    }
    out.sort();
    out
}

/// A position in a file: anywhere, or within its first [`HEAD`] bytes.
#[derive(Clone, Copy, Debug)]
struct Pos {
    head: bool,
    x: usize,
}

impl Pos {
    /// An index in `0..len` (`0` when `len` is 0).
    fn within(self, len: usize) -> usize {
        let span = if self.head { len.min(HEAD) } else { len };
        if span == 0 {
            0
        } else {
            self.x % span
        }
    }
}

/// One edit of a seed file.
#[derive(Clone, Debug)]
enum Mutation {
    Flip {
        at: Pos,
        bit: u8,
    },
    Set {
        at: Pos,
        byte: u8,
    },
    Insert {
        at: Pos,
        bytes: Vec<u8>,
    },
    Delete {
        at: Pos,
        len: usize,
    },
    Truncate {
        at: Pos,
    },
    /// Copy `len` bytes from `from` over the bytes at `to` (repeats fields, tables, headers).
    Copy {
        from: Pos,
        to: Pos,
        len: usize,
    },
}

impl Mutation {
    fn apply(&self, b: &mut Vec<u8>) {
        let len = b.len();
        match *self {
            Mutation::Flip { at, bit } if len > 0 => b[at.within(len)] ^= 1 << bit,
            Mutation::Set { at, byte } if len > 0 => b[at.within(len)] = byte,
            Mutation::Insert { at, ref bytes } => {
                let k = at.within(len + 1);
                b.splice(k..k, bytes.iter().copied());
            }
            Mutation::Delete { at, len: n } if len > 0 => {
                let k = at.within(len);
                b.drain(k..(k + n).min(len));
            }
            Mutation::Truncate { at } => b.truncate(at.within(len + 1)),
            Mutation::Copy { from, to, len: n } if len > 0 => {
                let (f, t) = (from.within(len), to.within(len));
                let block: Vec<u8> = b[f..(f + n).min(len)].to_vec();
                let end = (t + block.len()).min(len);
                b[t..end].copy_from_slice(&block[..end - t]);
            }
            _ => {}
        }
    }
}

fn pos() -> impl Strategy<Value = Pos> {
    (any::<bool>(), any::<usize>()).prop_map(|(head, x)| Pos { head, x })
}

/// Bytes that matter to the formats: boundaries of varints and integers, quotes, newlines.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => any::<u8>(),
        1 => prop::sample::select(vec![0u8, 0xff, 0x7f, 0x80, 0x01, b'\n', b'"', b'\'', b'(', b','])
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (pos(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        3 => (pos(), byte()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        2 => (pos(), vec(byte(), 1..16)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        2 => (pos(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => pos().prop_map(|at| Mutation::Truncate { at }),
        1 => (pos(), pos(), 1usize..256).prop_map(|(from, to, len)| Mutation::Copy { from, to, len }),
    ]
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Run `entry` on `bytes`, failing when it takes longer than [`CASE_LIMIT`]; `Ok` when it
/// accepted the input.
fn timed(
    entry: &impl Fn(&Scratch, &[u8]) -> Result<(), String>,
    scratch: &Scratch,
    bytes: &[u8],
) -> Result<bool, TestCaseError> {
    let start = Instant::now();
    let accepted = entry(scratch, bytes).is_ok();
    let took = start.elapsed();
    prop_assert!(
        took < CASE_LIMIT,
        "took {took:?} on {} bytes (limit {CASE_LIMIT:?})",
        bytes.len()
    );
    Ok(accepted)
}

/// Every seed of `target` as is (those in `valid` must be accepted), then the mutants.
fn smoke(target: &str, valid: &[&str], entry: impl Fn(&Scratch, &[u8]) -> Result<(), String>) {
    let seeds = seeds(target);
    let scratch = Scratch::new();
    for (name, bytes) in &seeds {
        let start = Instant::now();
        let result = entry(&scratch, bytes);
        assert!(start.elapsed() < CASE_LIMIT, "{target}/{name}: too slow");
        if valid.contains(&name.as_str()) {
            assert_eq!(result, Ok(()), "{target}/{name}: a valid seed is refused");
        }
    }
    for name in valid {
        assert!(
            seeds.iter().any(|(n, _)| n == name),
            "{target}: seed {name} missing (run fuzz/make_corpus.sh)"
        );
    }
    let config = Config {
        cases: env_number("LIPFP_FUZZ_SMOKE_CASES").map_or(CASES, |c| c as u32),
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let seed = env_number("LIPFP_FUZZ_SMOKE_SEED").unwrap_or(0x6c_6970_6670);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..8 + target.len().min(24)].copy_from_slice(&target.as_bytes()[..target.len().min(24)]);
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let accepted = std::cell::Cell::new(0usize);
    let cases = (0..seeds.len(), vec(mutation(), 1..4));
    let outcome = runner.run(&cases, |(k, mutations)| {
        let mut bytes = seeds[k].1.clone();
        for m in &mutations {
            m.apply(&mut bytes);
        }
        if timed(&entry, &scratch, &bytes)? {
            accepted.set(accepted.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{target}: {e}");
    }
    eprintln!(
        "{target}: {} seeds, {} mutants ({} accepted)",
        seeds.len(),
        runner.config().cases,
        accepted.get()
    );
}

#[test]
fn onnx_reader_survives_mutated_models() {
    smoke(
        "onnx",
        &["digits-model.onnx", "breast-cancer-model.onnx"],
        harness::onnx,
    );
}

#[test]
fn npy_readers_survive_mutated_arrays() {
    smoke(
        "npy",
        &[
            "digits-x_test-4.npy",
            "digits-y_test.npy",
            "breast-cancer-x_test.npy",
            "radii-f8.npy",
        ],
        harness::npy,
    );
}

#[test]
fn csv_readers_survive_mutated_files() {
    smoke(
        "csv",
        &[
            "digits-4-label-first.csv",
            "digits-4-label-last.csv",
            "digits-4-inputs.csv",
        ],
        harness::csv,
    );
}

#[test]
fn npz_readers_survive_mutated_archives() {
    smoke(
        "npz",
        &[
            "digits-4-stored.npz",
            "digits-4-deflated.npz",
            "digits-x-only.npz",
        ],
        harness::npz,
    );
}

#[test]
fn policy_parser_survives_mutated_policies() {
    smoke(
        "policy",
        &["lipfp.toml", "readme-reference.toml"],
        |_, b| harness::policy(b),
    );
}

#[test]
fn vnnlib_parser_survives_mutated_properties() {
    smoke(
        "vnnlib",
        &["box-argmin.vnnlib", "linear-terms.vnnlib"],
        |_, b| harness::vnnlib(b),
    );
}

#[test]
fn certificate_reader_survives_mutated_files() {
    smoke(
        "certificates",
        &["digits-modes.pb", "digits-shards.pb", "check.pb"],
        harness::certificates,
    );
}

#[test]
fn declared_shapes_are_scanned_from_headers() {
    let header = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (450, 1, 8, 8), }";
    assert_eq!(harness::declared_shape(header), Some(vec![450, 1, 8, 8]));
    let scalar = b"{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
    assert_eq!(harness::declared_shape(scalar), Some(vec![]));
    assert_eq!(harness::declared_shape(b"'shape': [3]"), None);
}

// ---------------------------------------------------------------------------------------------
// Seed corpora

/// An `.npy` file (format `version`.0) of `data` (already in the byte order of `descr`).
fn npy_file(descr: &str, fortran: bool, shape: &[usize], data: &[u8], version: u8) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let fortran = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
    let len_bytes = if version == 1 { 2 } else { 4 };
    let preamble = 8 + len_bytes;
    let total = (preamble + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - preamble - header.len() - 1));
    header.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    let len = header.len() as u32;
    out.extend_from_slice(&len.to_le_bytes()[..len_bytes]);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn read_npy<T: npyz::Deserialize>(path: &Path) -> Vec<T> {
    let f = std::fs::File::open(path).expect("open an example array");
    npyz::NpyFile::new(std::io::BufReader::new(f))
        .expect("an example .npy")
        .into_vec()
        .expect("example values")
}

/// A `.npz` archive of `members` (name, bytes) compressed with `method`, in memory.
fn npz_file(members: &[(&str, Vec<u8>)], method: zip::CompressionMethod) -> Vec<u8> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in members {
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        zip.start_file(*name, options)
            .expect("an archive in memory");
        zip.write_all(bytes).expect("an archive in memory");
    }
    zip.finish().expect("an archive in memory").into_inner()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("create the corpus directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

/// Run the lipfp binary in `dir`.
fn lipfp(dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .arg("-q")
        .args(args)
        .current_dir(dir)
        .env_remove("GITHUB_ACTIONS")
        .output()
        .expect("run lipfp");
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "lipfp {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Regenerate the committed seeds of `fuzz/corpus/{npy,policy,certificates}` and the example
/// models of `fuzz/corpus/onnx` from the repository's files (`fuzz/make_corpus.sh` adds the
/// models the ONNX test suites build).
#[test]
#[ignore = "writes fuzz/corpus; run by fuzz/make_corpus.sh"]
fn write_seed_corpus() {
    let corpus = root().join("fuzz/corpus");
    let examples = root().join("examples");

    // onnx: the example models
    for ex in ["digits", "breast-cancer"] {
        let bytes = std::fs::read(examples.join(ex).join("model.onnx")).unwrap();
        write(&corpus.join("onnx"), &format!("{ex}-model.onnx"), &bytes);
    }

    // npy: the example arrays, cut to a few rows, in every dtype, byte order, layout and
    // format version the reader handles
    let npy = corpus.join("npy");
    let x: Vec<f32> = read_npy(&examples.join("digits/x_test.npy"));
    let y: Vec<i64> = read_npy(&examples.join("digits/y_test.npy"));
    let le32 = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let x4 = &x[..4 * 64];
    let x_seed = npy_file("<f4", false, &[4, 1, 8, 8], &le32(x4), 1);
    write(&npy, "digits-x_test-4.npy", &x_seed);
    let be64: Vec<u8> = x4
        .iter()
        .flat_map(|&v| f64::from(v).to_be_bytes())
        .collect();
    write(
        &npy,
        "digits-x-f8-be.npy",
        &npy_file(">f8", false, &[4, 64], &be64, 1),
    );
    let f16: Vec<u8> = x4
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    write(
        &npy,
        "digits-x-f2.npy",
        &npy_file("<f2", false, &[4, 64], &f16, 1),
    );
    let fortran: Vec<f32> = (0..64)
        .flat_map(|j| (0..3).map(move |i| (i, j)))
        .map(|(i, j)| x[i * 64 + j])
        .collect();
    write(
        &npy,
        "digits-x-fortran.npy",
        &npy_file("<f4", true, &[3, 64], &le32(&fortran), 1),
    );
    write(
        &npy,
        "digits-x-v2.npy",
        &npy_file("<f4", false, &[2, 64], &le32(&x[..128]), 2),
    );
    write(
        &npy,
        "digits-x-v3.npy",
        &npy_file("<f4", false, &[2, 64], &le32(&x[..128]), 3),
    );
    write(
        &npy,
        "digits-x-empty.npy",
        &npy_file("<f4", false, &[0, 64], &[], 1),
    );
    for f in ["x_test.npy", "y_test.npy"] {
        let bytes = std::fs::read(examples.join("breast-cancer").join(f)).unwrap();
        write(&npy, &format!("breast-cancer-{f}"), &bytes);
    }
    let bytes = std::fs::read(examples.join("digits/y_test.npy")).unwrap();
    write(&npy, "digits-y_test.npy", &bytes);
    let y4 = &y[..4];
    let labels: [(&str, Vec<u8>); 6] = [
        ("|i1", y4.iter().map(|&v| v as i8 as u8).collect()),
        (
            ">i2",
            y4.iter().flat_map(|&v| (v as i16).to_be_bytes()).collect(),
        ),
        (
            "<u4",
            y4.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
        ),
        (
            ">u8",
            y4.iter().flat_map(|&v| (v as u64).to_be_bytes()).collect(),
        ),
        ("<i8", y4.iter().flat_map(|&v| v.to_le_bytes()).collect()),
        ("|b1", y4.iter().map(|&v| u8::from(v > 4)).collect()),
    ];
    for (descr, data) in &labels {
        let name = format!("digits-y-{}.npy", &descr[1..]);
        write(&npy, &name, &npy_file(descr, false, &[4], data, 1));
    }
    let column: Vec<u8> = y4.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
    write(
        &npy,
        "digits-y-column.npy",
        &npy_file("<i4", false, &[4, 1], &column, 1),
    );
    let radii = [0.3f64, 0.25, 0.0, 1e-3];
    let r8: Vec<u8> = radii.iter().flat_map(|r| r.to_le_bytes()).collect();
    write(&npy, "radii-f8.npy", &npy_file("<f8", false, &[4], &r8, 1));
    let r4: Vec<u8> = radii
        .iter()
        .flat_map(|&r| (r as f32).to_be_bytes())
        .collect();
    write(
        &npy,
        "radii-f4-be.npy",
        &npy_file(">f4", false, &[4], &r4, 1),
    );
    write(
        &npy,
        "scalar.npy",
        &npy_file("<f8", false, &[], &0.5f64.to_le_bytes(), 1),
    );

    // npz: four digits rows as `x` with their labels as `y`, stored and deflated, and `x` alone
    let y4: Vec<u8> = y[..4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let members = [
        ("x.npy", npy_file("<f4", false, &[4, 64], &le32(x4), 1)),
        ("y.npy", npy_file("<i8", false, &[4], &y4, 1)),
    ];
    let npz = corpus.join("npz");
    for (name, method, take) in [
        ("digits-4-stored.npz", zip::CompressionMethod::Stored, 2),
        ("digits-4-deflated.npz", zip::CompressionMethod::Deflated, 2),
        ("digits-x-only.npz", zip::CompressionMethod::Stored, 1),
    ] {
        write(&npz, name, &npz_file(&members[..take], method));
    }

    // csv: four digits rows with their labels, the label first or last, and inputs only
    let rows = |label_first: bool, with_label: bool| {
        let mut text = String::new();
        let names: Vec<String> = (0..64).map(|j| format!("p{j}")).collect();
        let header = match (with_label, label_first) {
            (false, _) => names.join(","),
            (true, true) => format!("label,{}", names.join(",")),
            (true, false) => format!("{},label", names.join(",")),
        };
        text.push_str(&header);
        text.push('\n');
        for i in 0..4 {
            let cells: Vec<String> = x4[i * 64..(i + 1) * 64]
                .iter()
                .map(|v| f64::from(*v).to_string())
                .collect();
            let line = match (with_label, label_first) {
                (false, _) => cells.join(","),
                (true, true) => format!("{},{}", y[i], cells.join(",")),
                (true, false) => format!("{},{}", cells.join(","), y[i]),
            };
            text.push_str(&line);
            text.push('\n');
        }
        text
    };
    let csv = corpus.join("csv");
    write(
        &csv,
        "digits-4-label-first.csv",
        rows(true, true).as_bytes(),
    );
    write(
        &csv,
        "digits-4-label-last.csv",
        rows(false, true).as_bytes(),
    );
    write(&csv, "digits-4-inputs.csv", rows(true, false).as_bytes());

    // policy: the repository's policy, the reference in docs/policy.md, and variants of both
    let policy = corpus.join("policy");
    let root_policy = std::fs::read_to_string(root().join("lipfp.toml")).unwrap();
    write(&policy, "lipfp.toml", root_policy.as_bytes());
    let policy_doc = std::fs::read_to_string(root().join("docs/policy.md")).unwrap();
    let reference = policy_doc
        .split("## Every key")
        .nth(1)
        .and_then(|s| s.split("```toml\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the policy reference in docs/policy.md");
    write(&policy, "readme-reference.toml", reference.as_bytes());
    let variants = [
        (
            "epsilons-baseline.toml",
            "[model]\npath = \"m.onnx\"\ngram_iterations = 3\nftz = true\n\n[data]\ninputs = \"x.npy\"\n\n\
             [baseline]\nreport = \"previous/lipfp.json\"\nrequired = true\n\n[[gate]]\nname = \"per-point\"\n\
             epsilons = \"radii.npy\"\nmode = \"real, standard\"\nmin_certified_pct = 10\n\
             max_certified_drop_pp = 0.5\n\n[[gate]]\nname = \"f16\"\nepsilon = \"2.5e-1\"\n\
             format = \"bfloat16\"\naccumulate = \"float64\"\nmodel = \"other.onnx\"\nlabels = \"y.npy\"\n\
             min_accuracy_pct = 99.5\nmax_vra_drop_pp = 0\n",
        ),
        (
            "cache.toml",
            "[model]\npath = \"m.onnx\"\n[data]\ninputs = \"x.npy\"\n[cache]\ndir = \".lipfp-cache\"\n\
             [[gate]]\nname = \"g\"\nepsilon = \"0.1\"\n",
        ),
        (
            "inline.toml",
            "model = { path = 'm.onnx', format = 'float16' }\ndata = { inputs = 'x.npy', labels = 'y.npy' }\n\
             gate = [ { name = \"a\\u00e9\", epsilon = \"1e-6\", mode = \"best,measured,hybrid,float64-centre\" } ]\n",
        ),
    ];
    for (name, text) in variants {
        write(&policy, name, text.as_bytes());
    }

    // certificates: files lipfp writes for a few points of the examples (every mode, without
    // labels, per-instance radii, two shards in one file, a policy run)
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for ex in ["digits", "breast-cancer"] {
        std::fs::copy(
            examples.join(ex).join("model.onnx"),
            t.join(format!("{ex}.onnx")),
        )
        .unwrap();
    }
    std::fs::write(t.join("x.npy"), &x_seed).unwrap();
    let y8: Vec<u8> = y4.iter().flat_map(|&v| v.to_le_bytes()).collect();
    std::fs::write(t.join("y.npy"), npy_file("<i8", false, &[4], &y8, 1)).unwrap();
    std::fs::write(t.join("radii.npy"), npy_file("<f8", false, &[4], &r8, 1)).unwrap();
    let bx: Vec<f32> = read_npy(&examples.join("breast-cancer/x_test.npy"));
    std::fs::write(
        t.join("bx.npy"),
        npy_file("<f4", false, &[3, 30], &le32(&bx[..90]), 1),
    )
    .unwrap();
    let digits = ["certify", "--model", "digits.onnx", "--inputs", "x.npy"];
    let labelled = [&digits[..], &["--labels", "y.npy"]].concat();
    lipfp(
        t,
        &[
            &labelled[..],
            &[
                "--epsilon",
                "0.3",
                "--mode",
                "best,standard,hybrid,measured,float64-centre",
            ],
            &["--certificates", "digits-modes.pb"],
        ]
        .concat(),
    );
    lipfp(
        t,
        &[
            &labelled[..],
            &[
                "--epsilons",
                "radii.npy",
                "--ftz",
                "--certificates",
                "digits-radii.pb",
            ],
        ]
        .concat(),
    );
    for k in 1..=2 {
        let shard = format!("{k}/2");
        let file = format!("shard-{k}.pb");
        lipfp(
            t,
            &[
                &labelled[..],
                &[
                    "--epsilon",
                    "0.3",
                    "--shard",
                    &shard,
                    "--certificates",
                    &file,
                ],
            ]
            .concat(),
        );
    }
    lipfp(
        t,
        &[
            "certify",
            "--model",
            "breast-cancer.onnx",
            "--inputs",
            "bx.npy",
            "--epsilon",
            "0.25",
            "--format",
            "float16",
            "--certificates",
            "breast-cancer-f16.pb",
        ],
    );
    std::fs::write(
        t.join("lipfp.toml"),
        "[model]\npath = \"digits.onnx\"\n[data]\ninputs = \"x.npy\"\nlabels = \"y.npy\"\n\n\
         [[gate]]\nname = \"pass\"\nepsilon = \"0.1\"\nmin_vra_pct = 10\n\n\
         [[gate]]\nname = \"fail: 100%\"\nepsilon = \"1e1\"\nmode = \"measured,real\"\nmin_vra_pct = 100\n\
         max_fp_cost_pp = 0\nmin_accuracy_pct = 100\n",
    )
    .unwrap();
    lipfp(t, &["check", "--certificates", "check.pb"]);
    let certs = corpus.join("certificates");
    for f in [
        "digits-modes.pb",
        "digits-radii.pb",
        "breast-cancer-f16.pb",
        "check.pb",
    ] {
        write(&certs, f, &std::fs::read(t.join(f)).unwrap());
    }
    write(
        &certs,
        "digits-shard-1.pb",
        &std::fs::read(t.join("shard-1.pb")).unwrap(),
    );
    let mut both = std::fs::read(t.join("shard-1.pb")).unwrap();
    both.extend(std::fs::read(t.join("shard-2.pb")).unwrap());
    write(&certs, "digits-shards.pb", &both);
}

/// Replay files through a target's entry point on stable Rust (a crash file of
/// `fuzz/artifacts/<target>/`, or a whole corpus directory):
/// `LIPFP_FUZZ_REPLAY=<target>:<file or directory> cargo test --release --test fuzz_smoke
/// replay -- --ignored --nocapture`. Prints how many inputs each reader accepted.
#[test]
#[ignore = "needs LIPFP_FUZZ_REPLAY=<target>:<path>"]
fn replay() {
    let spec = std::env::var("LIPFP_FUZZ_REPLAY").expect("LIPFP_FUZZ_REPLAY=<target>:<path>");
    let (target, path) = spec.split_once(':').expect("<target>:<path>");
    let path = Path::new(path);
    let files: Vec<std::path::PathBuf> = if path.is_dir() {
        let mut v: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    let scratch = Scratch::new();
    let (mut accepted, mut slowest) = (0, Duration::ZERO);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let start = Instant::now();
        let result = match target {
            "onnx" => harness::onnx(&scratch, &bytes),
            "npy" => harness::npy(&scratch, &bytes),
            "policy" => harness::policy(&bytes),
            "certificates" => harness::certificates(&scratch, &bytes),
            other => panic!("unknown target {other}"),
        };
        slowest = slowest.max(start.elapsed());
        if files.len() == 1 {
            eprintln!("{}: {result:?}", f.display());
        }
        accepted += usize::from(result.is_ok());
    }
    eprintln!(
        "{target}: {} inputs, {accepted} accepted, slowest {slowest:?}",
        files.len()
    );
}
