//! `faultline bench store`: preparing cases from an empty data directory, which shares one
//! object store among them, against bare cargo builds of the same crates in scratch copies; and
//! the disk the prepared cases take (as `du` counts it), per case, in all, for the 60 that take the
//! most, and projected to a 60-case corpus.

use crate::Env;
use anyhow::{Result, bail};
use faultline_corpus::workspace::copy::copy_preserving;
use faultline_corpus::{Case, DataDir, PrepareOptions, PreparedCase, Template, prepare};
use faultline_sandbox::{ExecRequest, Identity, Sandbox, Toolchain};
use faultline_schema::bench::{STORE_BENCH_FILE, STORE_BENCH_SCHEMA_VERSION, StoreBench};
use faultline_schema::io::{read_json, write_json_atomic};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod disk;
use disk::DiskMap;

/// The corpus size the projection is made for (the target).
const PROJECTED_CASES: usize = 60;

/// How long one bare build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// Prepares `cases` into a new data directory (in the scratch space, or `dir` to resume a
/// killed bench there), builds what each case's preparation compiled (buggy crate, oracle) bare
/// right after, and prints both with their ratio and the disk the prepared cases take.
pub async fn run(
    env: &Env,
    cases: &[Case],
    toolchain: &Toolchain,
    dir: Option<&Path>,
) -> Result<ExitCode> {
    let scratch;
    let root = match dir {
        Some(dir) => dir.to_owned(),
        None => {
            scratch = env.data.scratch_dir("bench")?;
            scratch.path().to_owned()
        }
    };
    let data = DataDir::new(root.join("data"));
    let file = root.join(STORE_BENCH_FILE);
    let mut bench = read_progress(&file)?;
    let before = cases
        .iter()
        .filter(|c| {
            let left = to_do(&bench, c.id());
            !left.prepare && !left.bare
        })
        .count();
    if before > 0 {
        println!(
            "{}: {before} of the {} cases measured before, not measured again",
            file.display(),
            cases.len()
        );
    }
    let mut roots = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let step = format!("[{}/{}] {}", i + 1, cases.len(), case.id());
        let left = to_do(&bench, case.id());
        if !left.prepare && !left.bare {
            // Measured by an earlier run of the bench: only its disk is counted, at the end, so
            // it is not checked again (a content check of a prepared case reads all of it).
            roots.push(data.workspace_dir(case.id())?);
            continue;
        }
        let p = if left.prepare {
            println!("{step}: preparing ...");
            let row = bench.entry(case.id());
            row.resumed = left.resumed;
            row.load_before = load_average();
            write_json_atomic(&file, &bench)?;
            let started = Instant::now();
            let p = prepare(case, &data, toolchain, &PrepareOptions::default()).await?;
            let secs = started.elapsed().as_secs_f64();
            bench.entry(case.id()).prepare_secs = Some(secs);
            write_json_atomic(&file, &bench)?;
            let again = if left.resumed { " (resumed)" } else { "" };
            println!("{step}: prepared in {secs:.1}s{again}");
            p
        } else {
            prepare(case, &data, toolchain, &PrepareOptions::default()).await?
        };
        if left.bare {
            println!("{step}: bare builds ...");
            let secs = bare_builds(&data, case, &p, toolchain).await?;
            bench.entry(case.id()).bare_secs = Some(secs);
            write_json_atomic(&file, &bench)?;
            println!("{step}: bare builds in {secs:.1}s");
        }
        roots.push(p.root);
    }

    let mut disk = DiskMap::default();
    let objects = disk.walk(data.objects().dir(), None)?;
    let mut own_total = 0;
    for (i, (case, root)) in cases.iter().zip(&roots).enumerate() {
        let own = disk.walk(root, Some(i))?;
        own_total += own;
        println!("{}: {} of its own", case.id(), gb(own));
    }
    let total = objects + own_total + disk.walk(&data.root, None)?;
    let n = cases.len() as f64;
    println!(
        "disk: {} in all for {} cases ({} per case), of which {} in the shared object store",
        gb(total),
        cases.len(),
        gb((total as f64 / n) as u64),
        gb(objects)
    );
    if cases.len() > PROJECTED_CASES {
        println!(
            "the {PROJECTED_CASES} of these cases that take the most: {}",
            gb(disk.heaviest(cases.len(), PROJECTED_CASES))
        );
    }
    println!(
        "projected for {PROJECTED_CASES} cases: {} (at this sample's bytes per case; the \
         object store grows less than that as cases share more dependencies)",
        gb((total as f64 / n * PROJECTED_CASES as f64) as u64)
    );

    let rows: Vec<_> = bench
        .cases
        .iter()
        .filter(|row| cases.iter().any(|c| c.id() == row.case_id))
        .collect();
    let prepare_secs: f64 = rows.iter().filter_map(|r| r.prepare_secs).sum();
    let bare_secs: f64 = rows.iter().filter_map(|r| r.bare_secs).sum();
    let resumed = rows.iter().filter(|r| r.resumed).count();
    println!(
        "prepare: {prepare_secs:.1}s, bare cargo build + test --no-run of the buggy crate and \
         the oracle: {bare_secs:.1}s, ratio {:.2}x{}",
        prepare_secs / bare_secs,
        if resumed > 0 {
            format!(
                "; preparations resumed after a kill: {resumed} (timed from where they \
                 stood, which understates them)"
            )
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// What is left to measure of a case.
#[derive(Debug)]
struct ToDo {
    prepare: bool,
    /// A bench was killed while preparing it.
    resumed: bool,
    bare: bool,
}

fn to_do(bench: &StoreBench, case_id: &str) -> ToDo {
    match bench.cases.iter().find(|row| row.case_id == case_id) {
        None => ToDo {
            prepare: true,
            resumed: false,
            bare: true,
        },
        Some(row) => ToDo {
            prepare: row.prepare_secs.is_none(),
            resumed: row.prepare_secs.is_none() || row.resumed,
            bare: row.bare_secs.is_none(),
        },
    }
}

/// The measurements a killed bench left in `file`, or none; a file this version cannot read is
/// an error, not a fresh start, so that no measurement is lost.
fn read_progress(file: &Path) -> Result<StoreBench> {
    if !file.exists() {
        return Ok(StoreBench::new());
    }
    let bench: StoreBench = read_json(file, "record of bench store measurements")?;
    if bench.schema_version != STORE_BENCH_SCHEMA_VERSION {
        bail!(
            "{}: format version {} (this faultline reads {STORE_BENCH_SCHEMA_VERSION}); move it \
             away to measure from the start",
            file.display(),
            bench.schema_version
        );
    }
    Ok(bench)
}

/// The one-minute load average, where the host says it.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Seconds of bare builds of what preparation compiles, in a scratch copy with a cold `target/`,
/// offline over the case's vendored dependencies: `cargo build` and `cargo test --no-run` of the
/// buggy crate (its declared regression targets when its whole test suite cannot compile, as
/// preparation does), and the oracle's tests where the case has an external oracle. The fixed
/// crate is not built: preparation never compiles it, and its dependencies may not even be
/// vendored (a fix shipped in a release that moved to a new major version of one).
async fn bare_builds(
    data: &DataDir,
    case: &Case,
    p: &PreparedCase,
    toolchain: &Toolchain,
) -> Result<f64> {
    let grade = &p.stamp.grade;
    let dir = data.scratch_dir("bench")?;
    let workspace = dir.path().join("workspace");
    copy_preserving(&p.sources.buggy, &workspace)?;
    std::fs::copy(
        p.stamp.agent.workspace.join("Cargo.lock"),
        workspace.join("Cargo.lock"),
    )?;
    let oracle = match &grade.oracle {
        Some(o) => {
            let copy = dir.path().join("oracle");
            faultline_corpus::store::copy_tree(o, &copy, &|rel| !rel.starts_with("target"))?;
            Some(copy)
        }
        None => None,
    };
    let bare = Template {
        shared: None,
        ..grade.clone()
    };
    let sandbox = Sandbox::new(
        bare.sandbox_spec(toolchain, &workspace, oracle.as_deref())
            .identity(Identity::Harness),
    )?;
    let started = Instant::now();
    cargo(&sandbox, &["build"], None).await?;
    if cargo(&sandbox, &["test", "--no-run"], None).await.is_err() {
        for target in case.manifest.regression.declared() {
            let args = [&["test", "--no-run"][..], &target.cargo_args()].concat();
            cargo(&sandbox, &args, None).await?;
        }
    }
    if oracle.is_some() {
        cargo(&sandbox, &["test", "--no-run", "--tests"], Some("/oracle")).await?;
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn cargo(sandbox: &Sandbox, args: &[&str], workdir: Option<&str>) -> Result<()> {
    let argv = [&["cargo"][..], args, &["--offline"]].concat();
    let mut req = ExecRequest::argv(argv.iter().copied(), BUILD_TIMEOUT);
    if let Some(w) = workdir {
        req = req.workdir(w).env("CARGO_TARGET_DIR", "/workspace/target");
    }
    let out = sandbox.exec(&req).await?;
    if !out.success() {
        bail!("`{}` failed:\n{}", argv.join(" "), out.stderr.text);
    }
    Ok(())
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_bench_measures_only_what_it_has_not() {
        let mut bench = StoreBench::new();
        let fresh = to_do(&bench, "a");
        assert!(fresh.prepare && fresh.bare && !fresh.resumed);
        // Killed while preparing `a`: its entry was written before the preparation began.
        bench.entry("a").load_before = Some(1.0);
        let killed = to_do(&bench, "a");
        assert!(killed.prepare && killed.resumed && killed.bare);
        // Killed during its bare builds: only they are left, and the resumed mark stays.
        bench.entry("a").resumed = true;
        bench.entry("a").prepare_secs = Some(12.0);
        let half = to_do(&bench, "a");
        assert!(!half.prepare && half.bare && half.resumed);
        bench.entry("a").bare_secs = Some(30.0);
        assert!(!to_do(&bench, "a").prepare && !to_do(&bench, "a").bare);
        assert_eq!(bench.cases.len(), 1);
    }

    #[test]
    fn measurements_survive_a_restart_and_an_unreadable_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(STORE_BENCH_FILE);
        assert_eq!(read_progress(&file).unwrap(), StoreBench::new());
        let mut bench = StoreBench::new();
        bench.entry("a").prepare_secs = Some(12.5);
        write_json_atomic(&file, &bench).unwrap();
        assert_eq!(read_progress(&file).unwrap(), bench);

        std::fs::write(&file, "{ not json").unwrap();
        let err = read_progress(&file).unwrap_err().to_string();
        assert!(err.contains(STORE_BENCH_FILE), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{ not json");

        bench.schema_version = 99;
        write_json_atomic(&file, &bench).unwrap();
        let err = read_progress(&file).unwrap_err().to_string();
        assert!(err.contains("format version 99"), "{err}");
    }
}
