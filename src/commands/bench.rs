//! `lipfp bench`: the figures the performance work is judged by — wall seconds, microseconds per
//! instance and peak RSS for (a) the paper's MNIST benchmark (norms, then every
//! mode over the whole test set, forward passes included) and (b) a generated HIGGS-scale model
//! (28 inputs, five hidden layers of 1024, 2 classes) on generated inputs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Array2;
use serde::Serialize;

use crate::arith::format::Format;
use crate::bounds::certify::Mode;
use crate::bounds::norms::{self, DEFAULT_GRAM_ITERATIONS};
use crate::engine::data::{self, Inputs};
use crate::engine::run::{self, ReferencePlan, SubjectSpec};
use crate::error::LipfpError;
use crate::onnx::model::{self, Activation, Dense, DenseNet};
use crate::policy::{CurveGrid, Radius};
use crate::progress::Progress;

/// Per-instance times of the paper's Python certifier measured on this machine (MNIST,
/// float32, ms per instance): the baseline of the speed-up column.
pub const PAPER_PYTHON_MS: [(Mode, f64); 2] = [(Mode::Standard, 8.1), (Mode::Hybrid, 12.9)];

/// One measured phase.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Benchmark (`mnist` or `higgs-scale`).
    pub suite: String,
    /// What was measured (`norms (cold)`, a mode name, ...).
    pub phase: String,
    /// Wall-clock seconds (the median of `runs` runs).
    pub wall_s: f64,
    /// Runs the wall time is the median of.
    pub runs: usize,
    /// Points processed (none for the norms).
    pub points: Option<usize>,
    /// Microseconds per point.
    pub per_instance_us: Option<f64>,
    /// Points certified in the mode.
    pub certified: Option<usize>,
    /// Peak resident set size of the process so far, in MiB.
    pub peak_rss_mib: Option<f64>,
    /// Speed-up over the paper's Python certifier on this machine, when known.
    pub speedup_vs_paper_python: Option<f64>,
}

/// The ratio of two phases' wall times.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The suite both phases belong to.
    pub suite: String,
    /// `<phase> / <phase>`.
    pub what: String,
    /// The ratio of their wall times.
    pub ratio: f64,
}

/// Everything `bench` measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Tool version.
    pub lipfp_version: String,
    /// Worker threads.
    pub threads: usize,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// Wall-time ratios of phases (e.g. `best / standard`).
    pub comparisons: Vec<Comparison>,
    /// Suites that were skipped, and why.
    pub skipped: Vec<String>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Directory holding `benchmarks/mnist` (the project's `../shared`).
    pub shared: PathBuf,
    /// Points of the generated HIGGS-scale test set (0 skips it).
    pub higgs_points: usize,
}

/// Peak resident set size of this process (`VmHWM`), in MiB, where the OS reports it.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// A deterministic generator (splitmix64) with Gaussian samples (Box-Muller).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gaussian(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A HIGGS-scale network: 28 inputs, five hidden ReLU layers of 1024, 2 classes, Gaussian
/// weights scaled so every layer's spectral norm is about 1.2 (a trained globally-robust
/// network's range), small biases; float32 values.
pub fn higgs_scale_net(seed: u64) -> DenseNet {
    let widths = [28usize, 1024, 1024, 1024, 1024, 1024, 2];
    let mut rng = Rng(seed);
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(k, w)| {
            let (n, m) = (w[0], w[1]);
            // ||W|| ~ sigma (sqrt(m) + sqrt(n)) for Gaussian entries
            let sigma = 1.2 / ((m as f64).sqrt() + (n as f64).sqrt());
            Dense {
                affine: None,
                w: Array2::from_shape_fn((m, n), |_| (rng.gaussian() * sigma) as f32 as f64),
                b: (0..m)
                    .map(|_| (rng.gaussian() * 0.01) as f32 as f64)
                    .collect(),
                act: if k + 2 < widths.len() {
                    Activation::Relu
                } else {
                    Activation::Identity
                },
                nodes: vec![format!("dense{k}")],
                ops: vec![],
                casts: Vec::new(),
            }
        })
        .collect();
    DenseNet {
        head: Vec::new(),
        layers,
        input_name: "features".into(),
        input_shape: vec![28],
        format: Format::Float32,
        converted_changed: 0,
        path: PathBuf::from("<generated higgs-scale model>"),
    }
}

/// `n` standardised 28-feature inputs (Gaussian, float32 values) and random binary labels.
pub fn higgs_scale_inputs(n: usize, seed: u64) -> (Inputs, Vec<usize>) {
    let mut rng = Rng(seed);
    let values = (0..n * 28).map(|_| rng.gaussian() as f32 as f64).collect();
    let labels = (0..n).map(|_| (rng.next_u64() & 1) as usize).collect();
    (
        Inputs {
            path: PathBuf::from("<generated>"),
            n,
            dim: 28,
            values,
            converted_changed: 0,
            dtype: "<f4".into(),
        },
        labels,
    )
}

fn spec(model: &Path, reference: ReferencePlan) -> SubjectSpec {
    SubjectSpec {
        model: model.to_path_buf(),
        format: Some(Format::Float32),
        accumulate: None,
        ftz: false,
        runtime: None,
        inputs: PathBuf::new(),
        labels: None,
        gram_iterations: DEFAULT_GRAM_ITERATIONS,
        reference,
        shard: None,
        decision: crate::policy::Decision::Argmax,
        label_column: None,
        ball: crate::bounds::ball::BallSpec::default(),
    }
}

/// A test set to time, on a network, with how many times each phase runs.
struct Suite<'a> {
    /// Suite name (`mnist`, `higgs-scale`).
    name: &'a str,
    net: &'a DenseNet,
    inputs: &'a Inputs,
    labels: &'a [usize],
    /// Runs per phase (the phase's wall time is their median).
    runs: usize,
}

/// Points of the `mnist-local` suite (mode `local` on the first MNIST points).
const LOCAL_POINTS: usize = 500;

/// MNIST phases take a tenth of a second, where scheduling noise is large: the median of this
/// many runs is reported.
const MNIST_RUNS: usize = 5;

impl Suite<'_> {
    /// The median wall time of [`Suite::runs`] end-to-end runs in `modes` at `radius` (with the
    /// curve over `grid` when given; forward passes included, norms excluded: every run
    /// computes them once, timed in their own phase), and the first mode's certified count.
    fn median_run(
        &self,
        modes: &[Mode],
        radius: &Radius,
        grid: Option<&CurveGrid>,
    ) -> Result<(f64, Option<usize>), LipfpError> {
        let mut walls = Vec::with_capacity(self.runs);
        let mut certified = None;
        for _ in 0..self.runs.max(1) {
            let t = Instant::now();
            let plan = ReferencePlan::for_run(modes, radius, grid);
            let subject = run::prepare_loaded(
                &spec(&self.net.path, plan),
                self.net.clone(),
                self.inputs,
                Some(self.labels.to_vec()),
                Vec::new(),
                (0, self.inputs.n),
                &Progress::silent(),
            )?;
            let outcome = run::certify(&subject, radius, modes)?;
            if let Some(grid) = grid {
                run::certify_curve(&subject, grid, modes, &run::CertifyOptions::default())?;
            }
            walls.push(t.elapsed().as_secs_f64() - subject.norms_s);
            certified = outcome.mode(modes[0]).map(|m| m.certified);
        }
        walls.sort_by(f64::total_cmp);
        Ok((walls[walls.len() / 2], certified))
    }

    /// A phase of `wall` seconds over every point.
    fn phase(&self, phase: String, wall: f64, certified: Option<usize>) -> Phase {
        Phase {
            suite: self.name.into(),
            phase,
            wall_s: wall,
            runs: self.runs.max(1),
            points: Some(self.inputs.n),
            per_instance_us: Some(wall / self.inputs.n as f64 * 1e6),
            certified,
            peak_rss_mib: peak_rss_mib(),
            speedup_vs_paper_python: None,
        }
    }
}

/// Time the norms, then each mode end to end.
fn bench_suite(
    suite: &Suite<'_>,
    eps: &str,
    modes: &[Mode],
    progress: &Progress,
) -> Result<Vec<Phase>, LipfpError> {
    let mut phases = Vec::new();
    progress.stage(&format!("{}: norms", suite.name));
    let t = Instant::now();
    norms::network_norms(suite.net, DEFAULT_GRAM_ITERATIONS)
        .map_err(|e| LipfpError::model(&suite.net.path, format!("norms: {e}")))?;
    phases.push(Phase {
        points: None,
        per_instance_us: None,
        runs: 1,
        ..suite.phase("norms".into(), t.elapsed().as_secs_f64(), None)
    });
    let radius = Radius::parse_decimal(eps).map_err(LipfpError::Usage)?;
    for &mode in modes {
        progress.stage(&format!(
            "{}: {} points in {mode} mode",
            suite.name, suite.inputs.n
        ));
        let (wall, certified) = suite.median_run(&[mode], &radius, None)?;
        let mut phase = suite.phase(mode.name().into(), wall, certified);
        phase.speedup_vs_paper_python = (suite.name == "mnist")
            .then(|| {
                let us = phase.per_instance_us?;
                PAPER_PYTHON_MS
                    .iter()
                    .find(|(m, _)| *m == mode)
                    .map(|(_, ms)| ms * 1e3 / us)
            })
            .flatten();
        phases.push(phase);
    }
    Ok(phases)
}

/// Time a run in `modes` at `eps` with and without the robustness curve at `radii`, the curve's
/// phase named `<modes> +curve(<number of radii>)`.
fn bench_curve(
    suite: &Suite<'_>,
    (eps, radii): (&str, &[&str]),
    modes: &[Mode],
) -> Result<Vec<Phase>, LipfpError> {
    let radius = Radius::parse_decimal(eps).map_err(LipfpError::Usage)?;
    let grid = CurveGrid::given(radii).map_err(LipfpError::Usage)?;
    let names = modes.iter().map(|m| m.name()).collect::<Vec<_>>().join("+");
    let (wall, certified) = suite.median_run(modes, &radius, None)?;
    let plain = suite.phase(names.clone(), wall, certified);
    let (wall, certified) = suite.median_run(modes, &radius, Some(&grid))?;
    let curve = suite.phase(format!("{names} +curve({})", radii.len()), wall, certified);
    Ok(vec![plain, curve])
}

/// `numerator / denominator` of the wall times of two phases of `suite`, when both ran.
/// VNN-COMP 2021's mnistfc instances decided by `lipfp verify` at a tenth of their timeouts:
/// per network, the wall time, the instances, and how many were verified (`certified`) and
/// falsified (in the phase name).
fn bench_vnncomp(list: &Path, progress: &Progress) -> Result<Vec<Phase>, LipfpError> {
    use crate::engine::verify::instance::{instance, read_instances};
    use crate::engine::verify::Verdict;
    progress.stage("vnncomp2021 mnistfc: lipfp verify --incomplete at 0.1 x the timeouts");
    let req = verify_request(crate::engine::verify::VerifyOptions {
        complete: false,
        ..Default::default()
    });
    let mut results = Vec::new();
    for (model, prop, timeout) in read_instances(list)? {
        results.push(instance(&req, (&model, &prop), 0.1 * timeout, progress)?);
    }
    let mut nets: Vec<String> = Vec::new();
    for r in &results {
        let name = r
            .model
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !nets.contains(&name) {
            nets.push(name);
        }
    }
    Ok(nets
        .iter()
        .map(|net| {
            let mine: Vec<_> = (results.iter())
                .filter(|r| {
                    r.model
                        .file_name()
                        .is_some_and(|f| f.to_string_lossy() == net.as_str())
                })
                .collect();
            let wall: f64 = mine.iter().map(|r| r.seconds).sum();
            let count =
                |f: fn(&Verdict) -> bool| mine.iter().filter(|r| f(&r.outcome.verdict)).count();
            let verified = count(|v| *v == Verdict::Holds);
            let falsified = count(|v| matches!(v, Verdict::Violated(_)));
            Phase {
                suite: "vnncomp2021-mnistfc".into(),
                phase: format!("verify {net} ({falsified} falsified)"),
                wall_s: wall,
                runs: 1,
                points: Some(mine.len()),
                per_instance_us: Some(wall * 1e6 / mine.len().max(1) as f64),
                certified: Some(verified),
                peak_rss_mib: peak_rss_mib(),
                speedup_vs_paper_python: None,
            }
        })
        .collect())
}

/// Subdomains branch and bound bounds per second on the 784-256x6-10 network of mnistfc, for a
/// fixed budget of subdomains (the same work on every machine and thread count), with the
/// hardest open subdomain's bound the budget left (the search's progress). The property,
/// [`BENCH_PROPERTY`], stays open past the budget (a-b-CROWN took 270 s to verify it in 2021),
/// so the rate is that of a long search, not of one that closes early.
fn bench_subdomains(list: &Path, progress: &Progress) -> Result<Phase, LipfpError> {
    use crate::engine::verify::instance::instance;
    const SUBDOMAINS: usize = 3000;
    progress.stage("vnncomp2021 mnistfc: branch and bound on 784-256x6-10");
    let dir = list.parent().unwrap_or(Path::new("."));
    // from the plain root: a root that branches on its units decides the property at once
    // (docs/performance.md "Session 27"), and the line measures a long search's rate
    let req = verify_request(crate::engine::verify::VerifyOptions {
        subdomains: SUBDOMAINS,
        root_branching: crate::engine::complete::RootBranching::Never,
        ..Default::default()
    });
    let (model, prop) = (
        dir.join("mnist-net_256x6.onnx"),
        dir.join(format!("{BENCH_PROPERTY}.vnnlib")),
    );
    let r = instance(&req, (&model, &prop), 600.0, progress)?;
    let bounded: usize = r.outcome.searches.iter().map(|s| s.bounded).sum();
    let seconds: f64 = r.outcome.searches.iter().map(|s| s.seconds).sum();
    // how far the budget's search got: a better split choice shows here, not in the rate
    let hardest = (r.outcome.hardest_open())
        .map_or(String::new(), |g| format!(", hardest open bound {g:.3e}"));
    Ok(Phase {
        suite: "vnncomp2021-mnistfc".into(),
        phase: format!(
            "branch and bound 256x6 {BENCH_PROPERTY}: {:.0} subdomains/s ({}{hardest})",
            bounded as f64 / seconds.max(1e-9),
            r.outcome.verdict.word()
        ),
        wall_s: seconds,
        runs: 1,
        points: Some(bounded),
        per_instance_us: Some(seconds * 1e6 / bounded.max(1) as f64),
        certified: None,
        peak_rss_mib: peak_rss_mib(),
        speedup_vs_paper_python: None,
    })
}

/// The mnistfc property of the branch-and-bound line ([`bench_subdomains`]).
const BENCH_PROPERTY: &str = "prop_13_0.03";

/// `lipfp verify`'s request for a benchmark instance: the model's own format, the default
/// execution, each instance's timeout from its list (else 600 s).
fn verify_request(
    options: crate::engine::verify::VerifyOptions,
) -> crate::engine::verify::instance::VerifyRequest {
    crate::engine::verify::instance::VerifyRequest {
        format: None,
        accumulate: None,
        ftz: false,
        runtime: None,
        gram_iterations: DEFAULT_GRAM_ITERATIONS,
        timeout_s: 600.0,
        options,
    }
}

fn wall_ratio(phases: &[Phase], suite: &str, (num, den): (&str, &str)) -> Option<Comparison> {
    let wall = |name: &str| {
        phases
            .iter()
            .find(|p| p.suite == suite && p.phase == name)
            .map(|p| p.wall_s)
    };
    let ratio = wall(num)? / wall(den)?;
    ratio.is_finite().then(|| Comparison {
        suite: suite.into(),
        what: format!("{num} / {den}"),
        ratio,
    })
}

/// Run the benchmark.
pub fn run_bench(opts: &BenchOptions, progress: &Progress) -> Result<BenchReport, LipfpError> {
    let mut phases = Vec::new();
    let mut skipped = Vec::new();
    let mnist = opts.shared.join("benchmarks/mnist");
    if mnist.join("model.onnx").exists() {
        let net = model::load(&mnist.join("model.onnx"), Format::Float32, false)?;
        let inputs = data::load_inputs(&mnist.join("x_test.npy"), &net, Format::Float32)?;
        let labels = data::load_labels(
            &mnist.join("y_test.npy"),
            None,
            inputs.n,
            net.label_classes(),
        )?;
        let suite = Suite {
            name: "mnist",
            net: &net,
            inputs: &inputs,
            labels: &labels,
            runs: MNIST_RUNS,
        };
        phases.extend(bench_suite(&suite, "0.3", &Mode::SOUND, progress)?);
        progress.stage("mnist: robustness curve");
        let radii = ["0.1", "0.2", "0.3", "0.4"];
        phases.extend(bench_curve(
            &suite,
            ("0.3", &radii),
            &[Mode::Standard, Mode::Best],
        )?);
        // local bounds cost milliseconds per point: timed on the first points only
        let few = LOCAL_POINTS.min(inputs.n);
        let head = data::Inputs {
            n: few,
            values: inputs.values[..few * inputs.dim].to_vec(),
            ..inputs.clone()
        };
        let local = Suite {
            name: "mnist-local",
            inputs: &head,
            labels: &labels[..few],
            runs: 1,
            ..suite
        };
        phases.extend(bench_suite(&local, "0.3", &[Mode::Local], progress)?);
    } else {
        skipped.push(format!("mnist: {} not found", mnist.display()));
    }
    let mnistfc = opts
        .shared
        .join("benchmarks/vnncomp2021/mnistfc/mnistfc_instances.csv");
    if mnistfc.exists() {
        phases.extend(bench_vnncomp(&mnistfc, progress)?);
        phases.push(bench_subdomains(&mnistfc, progress)?);
    } else {
        skipped.push(format!(
            "vnncomp2021 mnistfc: {} not found",
            mnistfc.display()
        ));
    }
    if opts.higgs_points > 0 {
        let net = higgs_scale_net(1);
        let (inputs, labels) = higgs_scale_inputs(opts.higgs_points, 2);
        let suite = Suite {
            name: "higgs-scale",
            net: &net,
            inputs: &inputs,
            labels: &labels,
            runs: 1,
        };
        let modes = [Mode::Standard, Mode::Measured];
        phases.extend(bench_suite(&suite, "0.1", &modes, progress)?);
    } else {
        skipped.push("higgs-scale: --higgs-points 0".into());
    }
    if phases.is_empty() {
        return Err(LipfpError::Usage(format!(
            "nothing to measure ({}); point --shared at the benchmark data or set --higgs-points",
            skipped.join("; ")
        )));
    }
    let comparisons = [
        ("mnist", ("best", "standard")),
        ("mnist", ("measured", "standard")),
        ("higgs-scale", ("measured", "standard")),
    ]
    .into_iter()
    .filter_map(|(suite, pair)| wall_ratio(&phases, suite, pair))
    .collect();
    Ok(BenchReport {
        lipfp_version: env!("CARGO_PKG_VERSION").into(),
        threads: rayon::current_num_threads(),
        phases,
        comparisons,
        skipped,
    })
}

/// The benchmark as a table.
pub fn render(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "lipfp {} bench, {} threads",
        r.lipfp_version, r.threads
    );
    let _ = writeln!(
        out,
        "{:<12} {:<20} {:>10} {:>5} {:>10} {:>12} {:>10} {:>11} {:>10}",
        "suite",
        "phase",
        "wall s",
        "runs",
        "points",
        "us/point",
        "certified",
        "peak MiB",
        "vs paper"
    );
    for p in &r.phases {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<12} {:<20} {:>10.3} {:>5} {:>10} {:>12} {:>10} {:>11} {:>10}",
            p.suite,
            p.phase,
            p.wall_s,
            p.runs,
            opt(p.points.map(|n| n.to_string())),
            opt(p.per_instance_us.map(|u| format!("{u:.2}"))),
            opt(p.certified.map(|c| c.to_string())),
            opt(p.peak_rss_mib.map(|m| format!("{m:.0}"))),
            opt(p.speedup_vs_paper_python.map(|s| format!("{s:.0}x"))),
        );
    }
    for c in &r.comparisons {
        let _ = writeln!(out, "{}: wall time {} = {:.2}x", c.suite, c.what, c.ratio);
    }
    for s in &r.skipped {
        let _ = writeln!(out, "skipped: {s}");
    }
    out
}
