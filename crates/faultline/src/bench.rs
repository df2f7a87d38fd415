//! `faultline bench`: measurements of the harness's own cost against a baseline measured in the
//! same run (this machine is noisy, so ratios mean more than absolute times).

use crate::Env;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use faultline_corpus::manifest::Depth;
use faultline_corpus::{Case, PrepareOptions, TemplateKind, prepare};
use faultline_grade::verdict::{VerdictPlan, fresh_seed, run_oracle};
use faultline_grade::workbench::{BuildTarget, Workbench};
use faultline_grade::{GradeContext, grade_repair};
use faultline_sandbox::{ExecRequest, Sandbox, Toolchain};
use faultline_schema::{GradingSettings, OracleKind, RegressionTarget};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Preparing a prepared case again, against a plain warm `cargo build --offline`.
    Prepare {
        /// The case id.
        case: String,
        /// Repetitions.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// One oracle run through the harness (every wrapper and canary in its own process), against
    /// the test binary's own run of the oracle's tests in one process.
    Oracle {
        /// The case id.
        case: String,
        /// Repetitions.
        #[arg(long, default_value_t = 10)]
        runs: usize,
    },
    /// Grading the gold repair with a warm cache, against a plain incremental `cargo test` of the
    /// same crate and oracle.
    Grade {
        /// The case id.
        case: String,
        /// Repetitions.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Validating a prepared case with its decoys, against validating it without them (same k):
    /// what measuring the oracle's strength adds.
    Validate {
        /// The case id.
        case: String,
        /// Repetitions.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Oracle runs per version.
        #[arg(short, default_value_t = 5)]
        k: u32,
    },
    /// The manifest checks every grade makes of the grading template (before the copy and after
    /// the verdict), against a warm grade of the gold repair; and once, the content check that
    /// `prepare` makes.
    Template {
        /// The case id.
        case: String,
        /// Repetitions.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Preparing the given cases from an empty data directory (cargo's package cache warm), with
    /// the object store they share, against bare builds of what preparation compiles
    /// (`cargo build` and `cargo test --no-run` of the buggy crate, and the oracle) in scratch
    /// copies; and the disk the prepared cases take (as `du` counts it), per case, in all, for
    /// the 60 that take the most and projected to 60 cases. Needs room for the prepared cases
    /// and one case's bare builds.
    Store {
        /// Case ids.
        #[arg(required = true)]
        cases: Vec<String>,
        /// Keep the bench's data directory and its measurements (`bench-store.json`) here
        /// instead of in the scratch space: run the same command again to resume a killed
        /// bench, measuring only the cases it has not [default: a scratch directory removed
        /// at the end]
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Shards of one run (the gold and null baselines) at once on a data directory
    /// prepared once and shared read-only (`prepare`, then `--scratch`), against the same
    /// shards each preparing a data directory of its own: the share of the shards' time spent
    /// getting cases ready. Runs this executable; needs room for one prepared copy of the
    /// cases per shard.
    Shards {
        /// Case ids.
        #[arg(required = true)]
        cases: Vec<String>,
        /// Shards run at once.
        #[arg(long, default_value_t = 4)]
        shards: usize,
        /// The run's tracks.
        #[arg(long, default_value = "repair,reproduce")]
        tracks: String,
    },
}

/// One shard process's wall time and the part of it spent getting its cases ready.
struct ShardTime {
    wall: f64,
    preparing: f64,
}

/// Starts every shard of `cases` at once, `--data` and `--scratch` as `dirs` says for shard i,
/// and waits for them all.
async fn run_shards(
    env: &Env,
    cases: &[String],
    tracks: &str,
    shards: usize,
    out: &Path,
    dirs: impl Fn(usize) -> (PathBuf, Option<PathBuf>),
) -> Result<Vec<ShardTime>> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut runs = Vec::new();
    for i in 0..shards {
        let (data, scratch) = dirs(i);
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("--corpus")
            .arg(&env.corpus_dir)
            .arg("--data")
            .arg(data);
        if let Some(s) = scratch {
            cmd.arg("--scratch").arg(s);
        }
        cmd.arg("run")
            .args(cases)
            .args(["--agent", "baseline:gold", "--agent", "baseline:null"])
            .args(["--tracks", tracks, "--shard", &format!("{i}/{shards}")])
            .arg("--out")
            .arg(out.join(format!("shard-{i}")))
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        runs.push(tokio::spawn(async move {
            let started = Instant::now();
            let output = cmd.output().await?;
            let wall = started.elapsed().as_secs_f64();
            let stderr = String::from_utf8_lossy(&output.stderr);
            if !output.status.success() {
                bail!("shard {i} failed ({}):\n{stderr}", output.status);
            }
            let preparing = cases_ready_secs(&stderr)
                .with_context(|| format!("shard {i} did not say how long it prepared"))?;
            Ok(ShardTime { wall, preparing })
        }));
    }
    let mut times = Vec::new();
    for run in runs {
        times.push(run.await??);
    }
    Ok(times)
}

fn shard_report(what: &str, times: &[ShardTime]) -> f64 {
    let wall: f64 = times.iter().map(|t| t.wall).sum();
    let preparing: f64 = times.iter().map(|t| t.preparing).sum();
    let slowest = times.iter().map(|t| t.wall).fold(0.0, f64::max);
    println!(
        "{what}: slowest shard {slowest:.1}s; preparing {preparing:.1}s of {wall:.1}s shard time \
         ({:.1}%)",
        100.0 * preparing / wall
    );
    slowest
}

/// A case prepared for a grading bench, and its gold patch.
async fn prepared_with_gold(
    case: &Case,
    env: &Env,
    toolchain: &Toolchain,
) -> Result<(
    faultline_corpus::PreparedCase,
    faultline_corpus::gold::TreeDiff,
)> {
    let prepared = prepare(case, &env.data, toolchain, &PrepareOptions::default()).await?;
    let gold = faultline_corpus::curated::gold_patch(case, &prepared.sources)?.diff;
    Ok((prepared, gold))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(what: &str, harness: Vec<f64>, baseline_name: &str, baseline: Vec<f64>) {
    let (h, b) = (median(harness), median(baseline));
    println!(
        "{what}: harness median {h:.3}s, {baseline_name} median {b:.3}s, ratio {:.2}x",
        h / b
    );
}

pub async fn run(env: &Env, cmd: BenchCommand) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let toolchain = Toolchain::detect()?;
    let get = |id: &str| -> Result<Case> {
        corpus
            .get(id)
            .cloned()
            .with_context(|| format!("no case `{id}`"))
    };
    match cmd {
        BenchCommand::Prepare { case, runs } => {
            let case = get(&case)?;
            let opts = PrepareOptions::default();
            let prepared = prepare(&case, &env.data, &toolchain, &opts).await?;
            let agent = &prepared.stamp.agent;
            // The baseline builds in a copy: a build in the template itself would be a writer
            // its manifest check could not tell from damage.
            let copy = env.data.scratch_dir("bench")?;
            let workspace = copy.path().join("workspace");
            faultline_corpus::workspace::copy::copy_preserving(&agent.workspace, &workspace)?;
            let sandbox = Sandbox::new(agent.sandbox_spec(&toolchain, &workspace, None))?;
            let (mut again, mut plain) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let t = Instant::now();
                let p = prepare(&case, &env.data, &toolchain, &opts).await?;
                if !p.reused {
                    bail!("the workspace was rebuilt; run the bench again once it is prepared");
                }
                again.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let out = sandbox
                    .exec(&ExecRequest::argv(
                        ["cargo", "build", "--offline", "--locked"],
                        Duration::from_secs(600),
                    ))
                    .await?;
                if !out.success() {
                    bail!("cargo build failed: {}", out.stderr.text);
                }
                plain.push(t.elapsed().as_secs_f64());
            }
            report("prepare again", again, "warm cargo build --offline", plain);
        }
        BenchCommand::Validate { case, runs, k } => {
            let case = get(&case)?;
            prepare(&case, &env.data, &toolchain, &PrepareOptions::default()).await?;
            let (mut with, mut without) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                for (decoys, times) in [(false, &mut without), (true, &mut with)] {
                    let opts = faultline_grade::ValidateOptions {
                        k,
                        force_prepare: false,
                        decoys,
                    };
                    let t = Instant::now();
                    faultline_grade::validate_case(&case, &env.data, &toolchain, &opts).await?;
                    times.push(t.elapsed().as_secs_f64());
                }
            }
            println!("{} decoys, k = {k}", case.manifest.decoys.len());
            report(
                "validate with decoys",
                with,
                "validate without them",
                without,
            );
        }
        BenchCommand::Oracle { case, runs } => {
            let case = get(&case)?;
            let prepared =
                prepare(&case, &env.data, &toolchain, &PrepareOptions::default()).await?;
            let bench = Workbench::new(&prepared, &env.data, &toolchain)?;
            let plan = VerdictPlan::new(fresh_seed()?, &case, &bench)?;
            plan.inject(&bench)?;
            let target = match case.manifest.oracle.kind {
                OracleKind::External => BuildTarget::Oracle,
                OracleKind::InCrate => BuildTarget::Lib,
            };
            let bins = bench
                .build(std::slice::from_ref(&target))
                .await?
                .map_err(|f| anyhow::anyhow!("build failed: {}", f.stderr))?;
            bench.hide(&plan.hidden_sources(&bench))?;
            // The oracle's own tests, without the wrappers, in one process per executable.
            let mut own_args: Vec<String> = plan
                .oracle_module
                .iter()
                .map(|m| format!("{m}::"))
                .collect();
            own_args.extend(["--skip".to_string(), format!("{}::", plan.wrapper_module)]);
            let targets: Vec<&str> = plan.wrappers.iter().map(|w| w.target.as_str()).collect();
            let own_bins: Vec<String> = bins
                .iter()
                .filter(|b| targets.contains(&b.target.as_str()))
                .map(|b| b.path.clone())
                .collect();
            if own_bins.is_empty() {
                bail!("no oracle test binary");
            }
            let timeout = Duration::from_secs(case.manifest.oracle.timeout_secs);
            let (mut harness, mut own) = (Vec::new(), Vec::new());
            for i in 0..runs {
                let seed = i as u64 + 1;
                let t = Instant::now();
                run_oracle(&bench, &bins, &plan, seed, timeout).await?;
                harness.push(t.elapsed().as_secs_f64());
                // The test binaries' own run time, measured inside the sandbox around them.
                let commands: Vec<String> = own_bins
                    .iter()
                    .map(|b| {
                        format!(
                            "FAULTLINE_SEED={seed} {b} {} >/dev/null 2>&1",
                            own_args.join(" ")
                        )
                    })
                    .collect();
                let script = format!(
                    "s=$(date +%s%N); {}; e=$(date +%s%N); echo $((e - s))",
                    commands.join("; ")
                );
                let out = bench
                    .sandbox()
                    .exec(&ExecRequest::bash(script, timeout).workdir("/workspace"))
                    .await?;
                let nanos: f64 = out
                    .stdout
                    .text
                    .trim()
                    .parse()
                    .context("timing the test binary")?;
                own.push(nanos / 1e9);
            }
            report("oracle run", harness, "test binary's own run", own);
        }
        BenchCommand::Grade { case, runs } => {
            let case = get(&case)?;
            let (prepared, gold) = prepared_with_gold(&case, env, &toolchain).await?;
            let ctx = GradeContext {
                case: &case,
                prepared: &prepared,
                data: &env.data,
                toolchain: &toolchain,
            };
            let opts = GradingSettings::default();
            let (mut graded, mut plain) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let t = Instant::now();
                let g = grade_repair(&ctx, "bench", &gold.unified(), &opts).await?;
                graded.push(t.elapsed().as_secs_f64());
                if !g.outcome.is_success() {
                    bail!("the gold patch did not pass: {}", g.reason);
                }
                // The same work by hand in a warm copy: patch, then an incremental `cargo test` of
                // the crate and of the oracle.
                let bench = Workbench::new(&prepared, &env.data, &toolchain)?;
                bench
                    .apply_patch(&gold.unified())
                    .map_err(anyhow::Error::msg)?;
                VerdictPlan::new(fresh_seed()?, &case, &bench)?.inject(&bench)?;
                let t = Instant::now();
                let regression = &case.manifest.regression;
                let mut targets: Vec<RegressionTarget> = regression.declared().collect();
                if case.manifest.oracle.kind == OracleKind::InCrate
                    && !targets.contains(&RegressionTarget::Lib)
                {
                    targets.push(RegressionTarget::Lib);
                }
                for target in &targets {
                    let argv = [
                        &["cargo", "test", "--offline", "--locked"][..],
                        &target.cargo_args(),
                    ]
                    .concat();
                    bench
                        .sandbox()
                        .exec(&ExecRequest::argv(argv, Duration::from_secs(1800)))
                        .await?;
                }
                if case.manifest.oracle.kind == OracleKind::External {
                    bench
                        .sandbox()
                        .exec(
                            &ExecRequest::argv(
                                ["cargo", "test", "--offline", "--locked"],
                                Duration::from_secs(1800),
                            )
                            .workdir("/oracle")
                            .env("CARGO_TARGET_DIR", "/workspace/target"),
                        )
                        .await?;
                }
                plain.push(t.elapsed().as_secs_f64());
            }
            report("grade a repair", graded, "incremental cargo test", plain);
        }
        BenchCommand::Store { cases, dir } => {
            let cases = cases.iter().map(|c| get(c)).collect::<Result<Vec<_>>>()?;
            return crate::bench_store::run(env, &cases, &toolchain, dir.as_deref()).await;
        }
        BenchCommand::Shards {
            cases,
            shards,
            tracks,
        } => {
            for id in &cases {
                get(id)?;
            }
            if shards == 0 {
                bail!("--shards must be at least 1");
            }
            let work = env.data.scratch_dir("bench")?;
            let dir = work.path();
            eprintln!("{shards} shards, each preparing its own data directory ...");
            let own = run_shards(env, &cases, &tracks, shards, &dir.join("own"), |i| {
                (dir.join(format!("own-data-{i}")), None)
            })
            .await?;
            for i in 0..shards {
                std::fs::remove_dir_all(dir.join(format!("own-data-{i}")))?;
            }
            eprintln!("preparing once, then {shards} shards sharing it read-only ...");
            let shared_data = dir.join("shared-data");
            let started = Instant::now();
            let status = tokio::process::Command::new(std::env::current_exe()?)
                .arg("--corpus")
                .arg(&env.corpus_dir)
                .arg("--data")
                .arg(&shared_data)
                .arg("prepare")
                .args(&cases)
                .stdout(std::process::Stdio::null())
                .status()
                .await?;
            if !status.success() {
                bail!("preparing the shared data directory failed ({status})");
            }
            let prepare_once = started.elapsed().as_secs_f64();
            let shared = run_shards(env, &cases, &tracks, shards, &dir.join("shared"), |i| {
                (shared_data.clone(), Some(dir.join(format!("scratch-{i}"))))
            })
            .await?;
            let own_wall = shard_report("each shard preparing its own", &own);
            let shared_wall = shard_report("shards sharing one prepared directory", &shared);
            println!(
                "preparing once took {prepare_once:.1}s; preparing once and then the shards: \
                 {:.1}s of wall time against {own_wall:.1}s, ratio {:.2}x",
                prepare_once + shared_wall,
                (prepare_once + shared_wall) / own_wall
            );
        }
        BenchCommand::Template { case, runs } => {
            let case = get(&case)?;
            let (prepared, gold) = prepared_with_gold(&case, env, &toolchain).await?;
            let gold = gold.unified();
            let ctx = GradeContext {
                case: &case,
                prepared: &prepared,
                data: &env.data,
                toolchain: &toolchain,
            };
            let (mut checks, mut grades) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let t = Instant::now();
                prepared.check(TemplateKind::Grading)?;
                prepared.check(TemplateKind::Grading)?;
                checks.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let g = grade_repair(&ctx, "bench", &gold, &GradingSettings::default()).await?;
                grades.push(t.elapsed().as_secs_f64());
                if !g.outcome.is_success() {
                    bail!("the gold patch did not pass: {}", g.reason);
                }
            }
            let (c, g) = (median(checks), median(grades));
            let entries: usize = prepared.manifest.dirs.values().map(|d| d.len()).sum();
            println!(
                "template checks of a grade: median {:.1} ms over {entries} recorded entries; \
                 warm gold grade: median {g:.3}s (checks included); the checks are {:.2}% of it",
                c * 1000.0,
                100.0 * c / g
            );
            let mut dirs = prepared.template(TemplateKind::Agent).dirs();
            dirs.extend(prepared.template(TemplateKind::Grading).dirs());
            dirs.sort();
            dirs.dedup();
            let t = Instant::now();
            let damage = prepared
                .manifest
                .check(&prepared.root, &dirs, Depth::Content)?;
            println!(
                "content check as `prepare` makes it: {:.0} ms ({} differences)",
                t.elapsed().as_secs_f64() * 1000.0,
                damage.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The summary line saying how long a run spent getting its cases ready, which `bench shards`
/// reads back from each shard.
pub fn cases_ready_line(cases: usize, secs: f64) -> String {
    format!("{CASES_READY} {cases} cases in {secs:.2}s")
}

const CASES_READY: &str = "prepared or checked";

/// The seconds of [`cases_ready_line`] in a run's standard error.
pub fn cases_ready_secs(stderr: &str) -> Option<f64> {
    stderr.lines().find_map(|l| {
        l.strip_prefix(CASES_READY)?
            .trim()
            .split_once(" cases in ")?
            .1
            .strip_suffix('s')?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cases_ready_line_reads_back() {
        let stderr = format!("preparing x\n{}\n4 trials\n", cases_ready_line(3, 1.234));
        assert_eq!(cases_ready_secs(&stderr), Some(1.23));
        assert_eq!(cases_ready_secs("4 trials: 0 already recorded"), None);
    }
}
