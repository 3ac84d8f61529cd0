//! Determinism (identical reports with one thread and with all threads) and sharding
//! (`lipfp report` over the shards' certificate files gives the figures of one whole run).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run lipfp, returning the exit code.
fn lipfp(args: &[&str], threads: Option<usize>) -> i32 {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lipfp"));
    cmd.current_dir(root()).arg("-q").args(args);
    if let Some(t) = threads {
        cmd.env("RAYON_NUM_THREADS", t.to_string());
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.code().is_some(),
        "lipfp crashed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.code().unwrap()
}

/// The JSON report without timings and notes that name shards or merges.
fn figures(path: &Path) -> Value {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for g in v["gates"].as_array_mut().unwrap() {
        let g = g.as_object_mut().unwrap();
        // an unverified merge does not recompute the test-set hash (`report --config` does)
        for key in ["timing", "notes", "test_set_hash"] {
            g.remove(key);
        }
        for (_, m) in g.get_mut("modes").unwrap().as_object_mut().unwrap() {
            let m = m.as_object_mut().unwrap();
            m.remove("seconds");
            // a sum over points: equal up to the order of floating-point additions
            if let Some(r) = m.get("conservatism_ratio").and_then(Value::as_f64) {
                m.insert(
                    "conservatism_ratio".into(),
                    Value::from((r * 1e6).round() / 1e6),
                );
            }
        }
    }
    v
}

fn digits_args(json: &Path) -> Vec<String> {
    let d = "examples/digits";
    vec![
        "certify".into(),
        "--model".into(),
        format!("{d}/model.onnx"),
        "--inputs".into(),
        format!("{d}/x_test.npy"),
        "--labels".into(),
        format!("{d}/y_test.npy"),
        "--epsilon".into(),
        "0.3".into(),
        "--json".into(),
        json.display().to_string(),
    ]
}

#[test]
fn one_thread_and_all_threads_give_identical_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, all) = (tmp.path().join("one.json"), tmp.path().join("all.json"));
    let a1 = digits_args(&one);
    let a2 = digits_args(&all);
    let args1: Vec<&str> = a1.iter().map(String::as_str).collect();
    let args2: Vec<&str> = a2.iter().map(String::as_str).collect();
    assert_eq!(lipfp(&args1, Some(1)), 0);
    assert_eq!(lipfp(&args2, None), 0);
    assert_eq!(figures(&one), figures(&all));
}

fn sharded_equals_whole(model: &Path, inputs: &Path, labels: &Path, eps: &str, shards: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole.json");
    let base: Vec<String> = vec![
        "certify".into(),
        "--model".into(),
        model.display().to_string(),
        "--inputs".into(),
        inputs.display().to_string(),
        "--labels".into(),
        labels.display().to_string(),
        "--epsilon".into(),
        eps.into(),
    ];
    let run = |extra: Vec<String>| {
        let args: Vec<String> = base.iter().cloned().chain(extra).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        lipfp(&refs, None)
    };
    assert_eq!(run(vec!["--json".into(), whole.display().to_string()]), 0);
    let mut files: Vec<PathBuf> = Vec::new();
    for k in 1..=shards {
        let f = tmp.path().join(format!("shard{k}.pb"));
        assert_eq!(
            run(vec![
                "--shard".into(),
                format!("{k}/{shards}"),
                "--certificates".into(),
                f.display().to_string()
            ]),
            0
        );
        files.push(f);
    }
    let merged = tmp.path().join("merged.json");
    let mut args: Vec<String> = vec!["report".into()];
    args.extend(files.iter().rev().map(|f| f.display().to_string()));
    args.extend(["--json".into(), merged.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(lipfp(&refs, None), 0);
    assert_eq!(figures(&whole), figures(&merged));
    // one shard alone is not passed off as the whole set
    let refs = ["report", files[0].to_str().unwrap()];
    assert_eq!(lipfp(&refs, None), 2);
}

#[test]
fn digits_shards_merge_to_the_whole_run() {
    let d = root().join("examples/digits");
    sharded_equals_whole(
        &d.join("model.onnx"),
        &d.join("x_test.npy"),
        &d.join("y_test.npy"),
        "0.3",
        3,
    );
}

#[test]
#[cfg_attr(
    not(lipfp_shared),
    ignore = "../shared/benchmarks not found: the benchmark data is not part of the repository"
)]
fn mnist_halves_merge_to_the_whole_run() {
    let d = root().join("../shared/benchmarks/mnist");
    sharded_equals_whole(
        &d.join("model.onnx"),
        &d.join("x_test.npy"),
        &d.join("y_test.npy"),
        "0.3",
        2,
    );
}

/// Streaming the inputs from the file in blocks gives exactly what a run over the same inputs
/// held in memory gives, across several streaming blocks and with a shard offset.
#[test]
fn streamed_inputs_match_inputs_in_memory() {
    use lipfp::arith::format::Format;
    use lipfp::bounds::certify::Mode;
    use lipfp::engine::run::{self, ReferencePlan, Shard, SubjectSpec, STREAM_ROWS};
    use lipfp::progress::Progress;
    use npyz::WriterBuilder;

    let tmp = tempfile::tempdir().unwrap();
    let model = root().join("examples/digits/model.onnx");
    let rows = 2 * STREAM_ROWS + 123;
    let mut seed = 7u64;
    let data: Vec<f32> = (0..rows * 64)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    let x = tmp.path().join("x.npy");
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[rows as u64, 1, 8, 8])
        .writer(std::io::BufWriter::new(std::fs::File::create(&x).unwrap()))
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();

    let spec = SubjectSpec {
        model: model.clone(),
        format: Some(Format::Float32),
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: x.clone(),
        labels: None,
        gram_iterations: 12,
        reference: ReferencePlan::Every { products: true },
        shard: Some(Shard { index: 1, count: 2 }),
        decision: lipfp::policy::Decision::Argmax,
        label_column: None,
        ball: Default::default(),
    };
    let streamed = run::prepare(&spec, &Progress::silent()).unwrap();
    let net = lipfp::onnx::model::load(&model, Format::Float32, false).unwrap();
    let mut all = lipfp::engine::data::load_inputs(&x, &net, Format::Float32).unwrap();
    let (first, count) = Shard { index: 1, count: 2 }.range(rows);
    all.values = all.values[first * 64..(first + count) * 64].to_vec();
    all.n = count;
    let loaded = run::prepare_loaded(
        &spec,
        net,
        &all,
        None,
        vec![],
        (first, rows),
        &Progress::silent(),
    )
    .unwrap();
    assert_eq!(streamed.n(), count);
    assert_eq!(streamed.first, first);
    assert_eq!(streamed.logits, loaded.logits);
    assert_eq!(streamed.x_norms, loaded.x_norms);
    let (a, b) = (
        streamed.reference.as_ref().unwrap(),
        loaded.reference.as_ref().unwrap(),
    );
    assert_eq!(
        (&a.logits, &a.norms, &a.gaps),
        (&b.logits, &b.norms, &b.gaps)
    );
    let eps = lipfp::policy::Radius::parse_decimal("0.3").unwrap();
    let (oa, ob) = (
        run::certify(&streamed, &eps, &Mode::SOUND).unwrap(),
        run::certify(&loaded, &eps, &Mode::SOUND).unwrap(),
    );
    for (ma, mb) in oa.modes.iter().zip(&ob.modes) {
        assert_eq!(ma.verdicts, mb.verdicts, "{}", ma.mode);
    }
}
