//! `lipfp report` checks what it merges: shards must agree on every run field, a gate must be
//! complete and non-empty, malformed files are errors (never a panic or an abort), and with
//! `--config`/`--verify` the files are checked against the policy's model and data, so a forged
//! flag, a self-declared complete shard or loosened thresholds cannot make a gate pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lipfp::proto_gen::{CertificateFile, Thresholds};
use prost::Message;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn lipfp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lipfp"))
        .current_dir(root())
        .arg("-q")
        .args(args)
        .output()
        .unwrap()
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .expect("lipfp exited (no signal, no abort)")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A policy with one digits gate (threshold the real figures pass) and its two shards'
/// certificate files.
struct Shards {
    dir: tempfile::TempDir,
}

impl Shards {
    fn new() -> Shards {
        Shards::with_modes("best,standard")
    }

    /// Shards 1/2 and 2/2 of the digits gate in `modes`, with its policy as `lipfp.toml`.
    fn with_modes(modes: &str) -> Shards {
        Shards::with_policy(&digits_policy(modes))
    }

    /// Shards 1/2 and 2/2 of the one gate of `policy`.
    fn with_policy(policy: &str) -> Shards {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lipfp.toml"), policy).unwrap();
        let s = Shards { dir };
        for k in 1..=2 {
            let out = lipfp(&[
                "check",
                "--config",
                s.s("lipfp.toml").as_str(),
                "--shard",
                &format!("{k}/2"),
                "--certificates",
                s.s(&format!("shard{k}.pb")).as_str(),
            ]);
            assert_eq!(code(&out), 0, "{}", stderr(&out));
        }
        s
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn s(&self, name: &str) -> String {
        self.p(name).display().to_string()
    }

    fn read(&self, name: &str) -> CertificateFile {
        CertificateFile::decode(std::fs::read(self.p(name)).unwrap().as_slice()).unwrap()
    }

    /// Write a modified copy of shard `k` as `name`.
    fn forge(&self, k: usize, name: &str, edit: impl FnOnce(&mut CertificateFile)) -> String {
        let mut f = self.read(&format!("shard{k}.pb"));
        edit(&mut f);
        std::fs::write(self.p(name), f.encode_to_vec()).unwrap();
        self.s(name)
    }

    fn report(&self, files: &[&str], extra: &[&str]) -> Output {
        let mut args = vec!["report"];
        args.extend_from_slice(files);
        args.extend_from_slice(extra);
        lipfp(&args)
    }
}

/// A policy with one gate on the digits example in `modes`.
fn digits_policy(modes: &str) -> String {
    format!(
        "[model]\npath = \"{m}\"\n[data]\ninputs = \"{x}\"\nlabels = \"{y}\"\n\
         [[gate]]\nname = \"digits\"\nepsilon = \"0.3\"\nmode = \"{modes}\"\nmin_vra_pct = 75.0\n",
        m = root().join("examples/digits/model.onnx").display(),
        x = root().join("examples/digits/x_test.npy").display(),
        y = root().join("examples/digits/y_test.npy").display(),
    )
}

#[test]
fn honest_shards_merge_and_pass_with_and_without_the_policy() {
    let s = Shards::new();
    let (a, b) = (s.s("shard1.pb"), s.s("shard2.pb"));
    assert_eq!(code(&s.report(&[&a, &b], &[])), 0);
    let cfg = s.s("lipfp.toml");
    let out = s.report(&[&a, &b], &["--config", &cfg, "--verify", "30"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // --verify needs the policy
    assert_eq!(code(&s.report(&[&a, &b], &["--verify", "3"])), 2);
}

#[test]
fn shards_with_different_thresholds_are_not_merged() {
    let s = Shards::new();
    let strict = s.forge(2, "strict.pb", |f| {
        f.gates[0].thresholds = Some(Thresholds {
            min_vra_pct: Some(99.0),
            ..Default::default()
        });
    });
    for files in [
        [s.s("shard1.pb"), strict.clone()],
        [strict, s.s("shard1.pb")],
    ] {
        let out = s.report(&[&files[0], &files[1]], &[]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("certified differently"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn a_shard_claiming_to_be_the_whole_set_is_caught_by_the_policy() {
    let s = Shards::new();
    let alone = s.forge(1, "alone.pb", |f| {
        let g = &mut f.gates[0];
        g.total = g.count;
    });
    // without the data this is indistinguishable from a complete run, and says so
    let json = s.s("alone.json");
    assert_eq!(code(&s.report(&[&alone], &["--json", &json])), 0);
    assert!(std::fs::read_to_string(&json)
        .unwrap()
        .contains("unverified merge"));
    let out = s.report(&[&alone], &["--config", &s.s("lipfp.toml")]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("number of points"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn forged_certified_flags_are_caught_by_verification() {
    let s = Shards::new();
    let forged = s.forge(2, "forged.pb", |f| {
        let g = &mut f.gates[0];
        for i in &mut g.instances {
            for (c, r) in i.certified.iter_mut().zip(&mut i.refusal) {
                *c = true;
                r.clear();
            }
        }
    });
    let a = s.s("shard1.pb");
    // the forged flags pass an unverified merge
    assert_eq!(code(&s.report(&[&a, &forged], &[])), 0);
    // about a fifth of the digits points are not certified: 60 samples find one
    let out = s.report(
        &[&a, &forged],
        &["--config", &s.s("lipfp.toml"), "--verify", "60"],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("forged"), "{}", stderr(&out));
}

/// Mode `complete`'s shards are re-checked by branch and bound under the policy's subdomain
/// budget (its decisions do not depend on the machine): every point of honest shards is
/// confirmed, and points forged from `undecided` or `falsified` to certified are caught.
#[test]
fn complete_shards_are_rechecked_by_branch_and_bound() {
    let policy = digits_policy("complete").replace(
        "epsilon = \"0.3\"",
        "epsilon = \"0.1\"\nnorm = \"linf\"\ninput_range = [0, 1]\ncomplete_subdomains = 300",
    );
    let s = Shards::with_policy(&policy.replace("min_vra_pct = 75.0", "min_vra_pct = 50.0"));
    let (a, b) = (s.s("shard1.pb"), s.s("shard2.pb"));
    let cfg = s.s("lipfp.toml");
    let every = ["--config", cfg.as_str(), "--verify", "1000"];
    let json = s.s("merged.json");
    let mut args = every.to_vec();
    args.extend(["--json", json.as_str()]);
    let out = s.report(&[&a, &b], &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(
        text.contains("\"falsified (a confirmed counterexample)\""),
        "{text}"
    );
    // the merged report's `complete` block is the whole run's (less the seconds): the shards'
    // branch-and-bound figures add up, the decisions are the points' own
    let whole = s.s("whole.json");
    let out = lipfp(&["check", "--config", &cfg, "--json", &whole]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let block = |path: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut c = v["gates"][0]["complete"].clone();
        c["branch_and_bound"]["seconds"] = serde_json::Value::Null;
        c
    };
    let (merged, run) = (block(&json), block(&whole));
    assert!(
        merged["branch_and_bound"]["searched"].as_u64() > Some(0),
        "{merged}"
    );
    assert_eq!(merged, run);
    assert_eq!(merged["budget"]["subdomains"], 300);
    // shards run under different budgets are not one run; files under another budget than the
    // policy's are refused by name
    let other = s.forge(2, "budget.pb", |f| {
        f.gates[0].complete.as_mut().unwrap().budget_subdomains = 301;
    });
    let out = s.report(&[&a, &other], &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("complete budget"), "{}", stderr(&out));
    std::fs::write(
        s.p("301.toml"),
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("complete_subdomains = 300", "complete_subdomains = 301"),
    )
    .unwrap();
    let out = s.report(&[&a, &b], &["--config", &s.s("301.toml")]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("mode complete's budget"),
        "{}",
        stderr(&out)
    );
    let mut refused = 0;
    let forged = s.forge(2, "forged.pb", |f| {
        let g = &mut f.gates[0];
        let at = g.modes.iter().position(|m| m == "complete").unwrap();
        for i in &mut g.instances {
            if i.refusal[at] == "undecided" || i.refusal[at] == "falsified" {
                i.certified[at] = true;
                i.refusal[at].clear();
                refused += 1;
            }
        }
    });
    assert!(refused > 0, "nothing to forge");
    let out = s.report(&[&a, &forged], &every);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("forged"), "{}", stderr(&out));
}

#[test]
fn malformed_files_are_errors_not_panics() {
    let s = Shards::new();
    let a = s.s("shard1.pb");
    type Edit = Box<dyn Fn(&mut CertificateFile)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "empty",
            Box::new(|f| {
                let g = &mut f.gates[0];
                g.total = 0;
                g.first = 0;
                g.count = 0;
                g.instances.clear();
            }),
        ),
        (
            "threshold mode not computed",
            Box::new(|f| f.gates[0].threshold_mode = "measured".into()),
        ),
        ("no modes", Box::new(|f| f.gates[0].modes.clear())),
        (
            "no real",
            Box::new(|f| f.gates[0].modes.retain(|m| m != "real")),
        ),
        ("total 2^62", Box::new(|f| f.gates[0].total = 1 << 62)),
        ("total 2^40", Box::new(|f| f.gates[0].total = 1 << 40)),
        (
            "first + count overflows",
            Box::new(|f| f.gates[0].first = u64::MAX),
        ),
    ];
    for (what, edit) in cases {
        let name = format!("{}.pb", what.replace(' ', "_"));
        let bad = s.forge(1, &name, |f| edit(f));
        for files in [vec![bad.clone()], vec![bad.clone(), s.s("shard2.pb")]] {
            let refs: Vec<&str> = files.iter().map(String::as_str).collect();
            let out = s.report(&refs, &[]);
            assert_eq!(code(&out), 2, "{what}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("lipfp: error:"),
                "{what}: {}",
                stderr(&out)
            );
        }
    }
    let _ = a;
}

#[test]
fn the_policy_decides_the_thresholds_and_the_gate_set() {
    let s = Shards::new();
    let loose = |k| {
        s.forge(k, &format!("loose{k}.pb"), |f| {
            f.gates[0].thresholds = Some(Thresholds::default());
        })
    };
    let (a, b) = (loose(1), loose(2));
    // the files say "no thresholds"; the policy's min_vra_pct 99 makes the gate fail
    let strict = std::fs::read_to_string(s.p("lipfp.toml"))
        .unwrap()
        .replace("min_vra_pct = 75.0", "min_vra_pct = 99.0");
    std::fs::write(s.p("strict.toml"), strict).unwrap();
    let out = s.report(&[&a, &b], &["--config", &s.s("strict.toml")]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    // a policy gate without certificates is an error
    let more = std::fs::read_to_string(s.p("lipfp.toml")).unwrap()
        + "[[gate]]\nname = \"other\"\nepsilon = \"0.1\"\n";
    std::fs::write(s.p("more.toml"), more).unwrap();
    let out = s.report(&[&a, &b], &["--config", &s.s("more.toml")]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("`other`"), "{}", stderr(&out));
}

/// Files holding more modes than the policy asks for are re-certified in all of them: a policy
/// asking for `best` alone (whose float64 reference would run only where standard does not
/// decide) still verifies every point of files that also hold `hybrid` and `measured`.
#[test]
fn every_mode_of_the_files_is_verified_whatever_the_policy_asks() {
    let s = Shards::with_modes("best,hybrid,measured");
    let best_only = s.p("best-only.toml");
    std::fs::write(&best_only, digits_policy("best")).unwrap();
    let (a, b) = (s.s("shard1.pb"), s.s("shard2.pb"));
    let out = s.report(
        &[&a, &b],
        &[
            "--config",
            &best_only.display().to_string(),
            "--verify",
            "450",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
