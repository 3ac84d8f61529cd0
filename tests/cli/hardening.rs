//! Issue 10, "Nothing outside the tool can make a gate pass": hostile files and hostile
//! destinations end in exit 2 with a message naming the file, fast and in bounded memory;
//! reports are written all or nothing; nothing user-controlled can start a workflow command;
//! shards of very large `N` and merged notes are right.
//!
//! Every run is bounded: 4 GiB of address space (`ulimit -v`) and a wall-clock limit, so a
//! regression fails the test instead of exhausting the machine. Device targets are reached
//! only through symlinks in a temporary directory, so even an old binary that replaced its
//! targets could not touch `/dev`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn digits(file: &str) -> PathBuf {
    root().join("examples/digits").join(file)
}

/// One run of the binary.
#[derive(Debug)]
struct Out {
    /// `None` when killed (by a signal or the time limit).
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
}

impl Out {
    /// Exit code 2 within `max_s` seconds, nothing on stdout (no verdict) but, under GitHub
    /// Actions, lipfp's one error annotation, and every needle in stderr.
    fn assert_error(&self, max_s: f64, needles: &[&str]) {
        assert_eq!(self.code, Some(2), "{self:#?}");
        let annotation = |l: &str| {
            l.starts_with("::error file=") && l.contains(",title=lipfp error::")
                || l.starts_with("::error title=lipfp error::")
        };
        assert!(
            self.stdout.lines().all(annotation) && self.stdout.lines().count() <= 1,
            "stdout on error: {self:#?}"
        );
        assert!(self.seconds < max_s, "took {} s: {self:#?}", self.seconds);
        for n in needles {
            assert!(self.stderr.contains(n), "stderr lacks {n:?}: {self:#?}");
        }
    }

    /// No stdout or stderr line is a workflow command (after leading whitespace, as GitHub
    /// trims it) other than the `::error file=` annotations lipfp emits itself.
    fn assert_no_injected_commands(&self) {
        for line in self.stdout.lines().chain(self.stderr.lines()) {
            let t = line.trim_start();
            assert!(
                !t.starts_with("::")
                    || t.starts_with("::error file=")
                    || t.starts_with("::error title=lipfp error::"),
                "injected workflow command {line:?}: {self:#?}"
            );
        }
    }
}

/// Run `lipfp -q <args>` with `env`, at most `limit_s` seconds and 4 GiB of address space.
fn run(args: &[OsString], env: &[(&str, &Path)], limit_s: u64) -> Out {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 4194304 && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_lipfp"))
        .arg("-q")
        .args(args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_OUTPUT")
        .env_remove("GITHUB_STEP_SUMMARY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn lipfp");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(limit_s) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Out {
        code: status.and_then(|s| s.code()),
        seconds: start.elapsed().as_secs_f64(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(items: I) -> Vec<OsString> {
    items.into_iter().map(Into::into).collect()
}

/// `certify` of the digits example at eps 0.3 in standard mode, plus `extra`.
fn certify(extra: Vec<OsString>) -> Vec<OsString> {
    let mut v = args([OsString::from("certify")]);
    if !extra.iter().any(|a| a == "--model") {
        v.extend(args([
            OsString::from("--model"),
            digits("model.onnx").into(),
        ]));
    }
    v.extend(args([
        OsString::from("--epsilon"),
        "0.3".into(),
        "--mode".into(),
        "standard".into(),
    ]));
    if !extra.iter().any(|a| a == "--inputs") {
        v.extend(args([
            OsString::from("--inputs"),
            digits("x_test.npy").into(),
        ]));
    }
    v.extend(extra);
    v
}

/// A policy for the digits example with one gate named `name` (a TOML basic string body) and
/// `extra` lines; written to `dir/lipfp.toml`.
fn policy(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let text = format!(
        "[model]\npath = {:?}\n[data]\ninputs = {:?}\nlabels = {:?}\n{extra}\n[[gate]]\nname = \"{name}\"\nepsilon = \"0.3\"\nmin_vra_pct = 50.0\n",
        digits("model.onnx"),
        digits("x_test.npy"),
        digits("y_test.npy"),
    );
    let p = dir.join("lipfp.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn check(config: &Path, extra: Vec<OsString>) -> Vec<OsString> {
    let mut v = args([OsString::from("check"), "--config".into(), config.into()]);
    v.extend(extra);
    v
}

/// Write an `.npy` file with header dictionary `dict` (padded to `pad_to` bytes) and `data`.
fn npy(path: &Path, version: u8, dict: &str, pad_to: usize, data: &[u8]) {
    let pre = if version == 1 { 10 } else { 12 };
    let mut header = dict.to_string();
    while header.len() + 1 < pad_to || !(pre + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY".to_vec();
    bytes.extend([version, 0]);
    if version == 1 {
        bytes.extend((header.len() as u16).to_le_bytes());
    } else {
        bytes.extend((header.len() as u32).to_le_bytes());
    }
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A 20 KB header whose dictionary holds 30 nested lists.
fn nested_npy(path: &Path, descr: &str, shape: &str) {
    let nest = format!("{}{}", "[".repeat(30), "]".repeat(30));
    let dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, 'x': {nest}, }}");
    npy(path, 1, &dict, 20_000, &[0; 4096]);
}

#[test]
fn nested_npy_headers_are_refused_fast_for_inputs_labels_and_radii() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("nested.npy");
    for (descr, shape, role) in [
        ("<f4", "(450, 1, 8, 8)", "--inputs"),
        ("<i8", "(450,)", "--labels"),
        ("<f8", "(450,)", "--epsilons"),
    ] {
        nested_npy(&bad, descr, shape);
        let mut a = certify(args([OsString::from(role), bad.clone().into()]));
        if role == "--epsilons" {
            // --epsilon and --epsilons conflict: drop the uniform radius
            let k = a.iter().position(|x| x == "--epsilon").unwrap();
            a.drain(k..k + 2);
        }
        run(&a, &[], 30).assert_error(10.0, &["nested.npy", "nests brackets 31 deep"]);
    }
}

#[test]
fn oversized_npy_header_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("big-header.npy");
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (450, 1, 8, 8), }";
    npy(&bad, 2, dict, 100_000, &vec![0; 450 * 64 * 4]);
    let a = certify(args([OsString::from("--inputs"), bad.into()]));
    run(&a, &[], 30).assert_error(10.0, &["big-header.npy", "at most 65536"]);
}

#[test]
fn dev_zero_as_policy_baseline_or_certificates_is_refused_fast() {
    let dir = tempfile::tempdir().unwrap();
    let zero = Path::new("/dev/zero");
    run(&check(zero, Vec::new()), &[], 30)
        .assert_error(10.0, &["/dev/zero", "policy file", "limit of 1 MiB"]);
    let p = policy(
        dir.path(),
        "g",
        "[baseline]\nreport = \"/dev/zero\"\nrequired = true",
    );
    run(&check(&p, Vec::new()), &[], 30)
        .assert_error(10.0, &["/dev/zero", "baseline report", "limit of 16 MiB"]);
    run(&args(["report", "/dev/zero"]), &[], 30)
        .assert_error(10.0, &["/dev/zero", "not a lipfp certificate file"]);
}

#[cfg(unix)]
#[test]
fn an_endless_fifo_policy_is_refused_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("policy.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            let line = "# comment\n".repeat(1000);
            // until lipfp closes the FIFO (EPIPE) or far beyond the limit
            for _ in 0..1000 {
                if f.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        })
    };
    run(&check(&fifo, Vec::new()), &[], 30).assert_error(10.0, &["policy.fifo", "limit of 1 MiB"]);
    writer.join().unwrap();
}

#[test]
fn certificate_file_announcing_huge_test_set_is_refused_without_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let file = lipfp::proto_gen::CertificateFile {
        tool_version: "0.1.0".into(),
        policy: String::new(),
        gates: vec![lipfp::proto_gen::GateCertificates {
            gate: "g".into(),
            format: "float32".into(),
            epsilon: "0.3".into(),
            modes: vec!["real".into(), "standard".into()],
            threshold_mode: "standard".into(),
            total: 1 << 60,
            ..Default::default()
        }],
    };
    let p = dir.path().join("huge.pb");
    std::fs::write(&p, file.encode_to_vec()).unwrap();
    run(&args([OsString::from("report"), p.into()]), &[], 30)
        .assert_error(10.0, &["huge.pb", "hold 0 of"]);
}

/// Names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failing_json_write_writes_no_other_report_and_prints_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(dir.path().join("blocker"), "x").unwrap();
    let p = policy(dir.path(), "g", "");
    let a = check(
        &p,
        args([
            OsString::from("--certificates"),
            out.join("c.pb").into(),
            "--junit".into(),
            out.join("j.xml").into(),
            "--json".into(),
            dir.path().join("blocker/r.json").into(),
        ]),
    );
    let r = run(&a, &[], 60);
    r.assert_error(60.0, &["blocker/r.json", "could not write the JSON report"]);
    assert!(!r.stdout.contains("passed"), "{r:#?}");
    // only the JUnit error testcase the exit-2 contract asks for
    assert_eq!(listing(&out), ["j.xml"], "{r:#?}");
    let xml = std::fs::read_to_string(out.join("j.xml")).unwrap();
    assert!(
        xml.contains("<error") && !xml.contains("<testcase name=\"g\""),
        "{xml}"
    );
}

#[test]
fn a_failing_junit_write_leaves_no_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), "x").unwrap();
    let p = policy(dir.path(), "g", "");
    let json = dir.path().join("r.json");
    let a = check(
        &p,
        args([
            OsString::from("--json"),
            json.clone().into(),
            "--junit".into(),
            dir.path().join("blocker/j.xml").into(),
        ]),
    );
    let r = run(&a, &[], 60);
    r.assert_error(60.0, &["blocker/j.xml", "could not write the JUnit report"]);
    assert!(!json.exists(), "a JSON report next to a failed JUnit write");
    assert!(!r.stdout.contains("passed"), "{r:#?}");
}

#[cfg(unix)]
#[test]
fn a_full_disk_is_reported_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.json");
    std::os::unix::fs::symlink("/dev/full", &full).unwrap();
    let certs = dir.path().join("c.pb");
    let a = certify(args([
        OsString::from("--certificates"),
        certs.clone().into(),
        "--json".into(),
        full.clone().into(),
    ]));
    let r = run(&a, &[], 60);
    r.assert_error(60.0, &["full.json", "No space left on device"]);
    assert!(!certs.exists() && r.stdout.is_empty(), "{r:#?}");
    assert!(std::fs::symlink_metadata(&full)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(listing(dir.path()), ["full.json"]);

    // GitHub's output file on a full disk
    let json = dir.path().join("r.json");
    let a = certify(args([OsString::from("--json"), json.clone().into()]));
    let r = run(
        &a,
        &[
            ("GITHUB_ACTIONS", Path::new("true")),
            ("GITHUB_OUTPUT", &full),
        ],
        60,
    );
    r.assert_error(
        60.0,
        &["full.json", "GITHUB_OUTPUT", "No space left on device"],
    );
    assert!(!json.exists() && r.stdout.is_empty(), "{r:#?}");
}

#[cfg(unix)]
#[test]
fn symlinks_fifos_and_stdout_are_written_through_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    // a symlink to a regular file: the symlink stays, its target gets the report
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::fs::write(dir.path().join("real/r.json"), "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("real/r.json", &link).unwrap();
    // a FIFO read by another process
    let fifo = dir.path().join("junit.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    // /dev/stdout, through a symlink
    let stdout = dir.path().join("stdout.pb");
    std::os::unix::fs::symlink("/dev/stdout", &stdout).unwrap();
    let a = certify(args([
        OsString::from("--json"),
        link.clone().into(),
        "--junit".into(),
        fifo.clone().into(),
        "--certificates".into(),
        stdout.clone().into(),
    ]));
    let r = run(&a, &[], 60);
    assert_eq!(r.code, Some(0), "{r:#?}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("real/r.json")).unwrap())
            .unwrap();
    assert_eq!(json["gates"][0]["n"], 450);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    let xml = reader.join().unwrap();
    assert!(xml.contains("<testsuites"), "{xml}");
    assert!(std::fs::symlink_metadata(&stdout)
        .unwrap()
        .file_type()
        .is_symlink());
    // the certificates went to stdout, before the summary
    let summary = r.stdout.find("REPORT").expect("the summary is printed");
    assert!(r.stdout[..summary].contains("certify"), "{r:#?}");
    assert_eq!(
        listing(dir.path()),
        ["junit.fifo", "link.json", "real", "stdout.pb"]
    );
}

#[test]
fn gate_names_with_control_characters_are_refused_in_policies() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), "a\\n::error ::pwned", "");
    let r = run(
        &check(&p, Vec::new()),
        &[("GITHUB_ACTIONS", Path::new("true"))],
        60,
    );
    r.assert_error(60.0, &["lipfp.toml", "line 8", "control character U+000A"]);
    r.assert_no_injected_commands();
}

#[test]
fn gate_names_with_control_characters_are_refused_in_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("c.pb");
    let a = certify(args([
        OsString::from("--certificates"),
        certs.clone().into(),
    ]));
    assert_eq!(run(&a, &[], 60).code, Some(0));
    let mut file =
        lipfp::proto_gen::CertificateFile::decode(std::fs::read(&certs).unwrap().as_slice())
            .unwrap();
    file.gates[0].gate = "x\n::error ::pwned".into();
    std::fs::write(&certs, file.encode_to_vec()).unwrap();
    let r = run(
        &args([OsString::from("report"), certs.into()]),
        &[("GITHUB_ACTIONS", Path::new("true"))],
        60,
    );
    r.assert_error(60.0, &["c.pb", "gate #1", "control character U+000A"]);
    r.assert_no_injected_commands();
}

#[test]
fn paths_with_newlines_cannot_start_workflow_commands() {
    let dir = tempfile::tempdir().unwrap();
    // per-instance radii from a file whose name holds a newline: the console prints it
    let radii = dir.path().join("r\n::error ::pwned.npy");
    let eps: Vec<u8> = (0..450).flat_map(|_| 0.3f64.to_le_bytes()).collect();
    npy(
        &radii,
        1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (450,), }",
        0,
        &eps,
    );
    let p = policy(dir.path(), "g", "");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace(
            "epsilon = \"0.3\"",
            "epsilons = \"r\\n::error ::pwned.npy\"",
        )
        .replace("min_vra_pct = 50.0", "min_vra_pct = 99.0");
    std::fs::write(&p, text).unwrap();
    let (summary, outputs) = (dir.path().join("summary.md"), dir.path().join("outputs"));
    let r = run(
        &check(&p, Vec::new()),
        &[
            ("GITHUB_ACTIONS", Path::new("true")),
            ("GITHUB_STEP_SUMMARY", &summary),
            ("GITHUB_OUTPUT", &outputs),
        ],
        60,
    );
    assert_eq!(r.code, Some(1), "{r:#?}");
    r.assert_no_injected_commands();
    assert!(r.stdout.contains("r\\n::error ::pwned.npy"), "{r:#?}");
    let annotation = r
        .stdout
        .lines()
        .find(|l| l.starts_with("::error file="))
        .expect("one annotation");
    assert!(
        annotation.contains("r%0A::error ::pwned.npy"),
        "{annotation}"
    );
    let outputs = std::fs::read_to_string(outputs).unwrap();
    for line in outputs.lines() {
        let (key, _) = line.split_once('=').expect("key=value");
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{outputs}"
        );
    }
}

#[test]
fn shards_of_a_huge_count_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let max = usize::MAX.to_string();
    let a = certify(args([
        OsString::from("--shard"),
        format!("{max}/{max}").into(),
        "--json".into(),
        json.clone().into(),
    ]));
    let r = run(&a, &[], 60);
    assert_eq!(r.code, Some(0), "{r:#?}");
    // floor(450 (N-1) / N) = 449: the last shard holds the last point
    let v: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["gates"][0]["n"], 1, "{v:#}");
    let notes = v["gates"][0]["notes"].to_string();
    assert!(notes.contains("points 449..450 of 450"), "{notes}");
}

/// The notes of the single gate of a JSON report.
fn notes(path: &Path) -> Vec<String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["gates"][0]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn merged_shards_sum_the_changed_input_values() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // the breast-cancer example's standardised features all change in float16
    let b = root().join("examples/breast-cancer");
    let float16 = || {
        args([
            OsString::from("--format"),
            "float16".into(),
            "--model".into(),
            b.join("model.onnx").into(),
            "--inputs".into(),
            b.join("x_test.npy").into(),
        ])
    };
    let mut whole = certify(float16());
    whole.extend(args([
        OsString::from("--json"),
        d.join("whole.json").into(),
    ]));
    assert_eq!(run(&whole, &[], 60).code, Some(0));
    let mut report = args(["report"]);
    for k in 1..=3 {
        let c = d.join(format!("c{k}.pb"));
        let mut a = certify(float16());
        a.extend(args([
            OsString::from("--shard"),
            format!("{k}/3").into(),
            "--certificates".into(),
            c.clone().into(),
        ]));
        assert_eq!(run(&a, &[], 60).code, Some(0));
        report.push(c.into());
    }
    report.extend(args([
        OsString::from("--json"),
        d.join("merged.json").into(),
    ]));
    let r = run(&report, &[], 60);
    assert_eq!(r.code, Some(0), "{r:#?}");
    let changed = |notes: Vec<String>| -> Vec<String> {
        notes
            .into_iter()
            .filter(|n| n.contains("input values changed"))
            .collect()
    };
    let whole = changed(notes(&d.join("whole.json")));
    assert_eq!(whole.len(), 1, "{whole:?}");
    assert_eq!(changed(notes(&d.join("merged.json"))), whole);
}

#[test]
fn a_model_that_is_a_device_or_a_fifo_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.onnx");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // nobody writes the FIFO: opening it to read would block forever
    for model in [fifo.as_path(), Path::new("/dev/zero")] {
        let a = certify(args([OsString::from("--model"), model.into()]));
        run(&a, &[], 30).assert_error(5.0, &["not a regular file"]);
    }
}
