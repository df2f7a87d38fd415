//! `faultline bench store`: preparing cases from an empty data directory, which shares one
//! object store among them, against bare cargo builds of the same crates in scratch copies; and
//! the disk the prepared cases take, per case, in all, and projected to a 60-case corpus.

use crate::Env;
use anyhow::{Context, Result, bail};
use faultline_corpus::workspace::copy::copy_preserving;
use faultline_corpus::{Case, DataDir, PrepareOptions, PreparedCase, Template, prepare};
use faultline_sandbox::{ExecRequest, Identity, Sandbox, Toolchain};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The corpus size the projection is made for (the target).
const PROJECTED_CASES: f64 = 60.0;

/// How long one bare build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// Prepares `cases` into a new data directory in the scratch space, then builds each case's
/// buggy and fixed crates (and its oracle) bare, and prints both with their ratio.
pub async fn run(env: &Env, cases: &[Case], toolchain: &Toolchain) -> Result<ExitCode> {
    let scratch = env.data.scratch_dir("bench")?;
    let data = DataDir::new(scratch.path().join("data"));
    let mut prepared = Vec::new();
    let mut prepare_secs = 0.0;
    for case in cases {
        let started = Instant::now();
        let p = prepare(case, &data, toolchain, &PrepareOptions::default()).await?;
        let secs = started.elapsed().as_secs_f64();
        prepare_secs += secs;
        println!("{}: prepared in {secs:.1}s", case.id());
        prepared.push(p);
    }
    let mut seen = BTreeSet::new();
    let objects = bytes_below(data.objects().dir(), &mut seen)?;
    let mut own_total = 0;
    for (case, p) in cases.iter().zip(&prepared) {
        let own = bytes_below(&p.root, &mut seen)?;
        own_total += own;
        println!("{}: {} of its own", case.id(), gb(own));
    }
    let total = objects + own_total + bytes_below(&data.root, &mut seen)?;
    let n = cases.len() as f64;
    println!(
        "disk: {} in all for {} cases ({} per case), of which {} in the shared object store",
        gb(total),
        cases.len(),
        gb((total as f64 / n) as u64),
        gb(objects)
    );
    println!(
        "projected for {PROJECTED_CASES} cases: {} (at this sample's bytes per case; the \
         object store grows less than that as cases share more dependencies)",
        gb((total as f64 / n * PROJECTED_CASES) as u64)
    );

    let mut bare_secs = 0.0;
    for (case, p) in cases.iter().zip(&prepared) {
        let secs = bare_builds(&data, p, toolchain).await?;
        println!("{}: bare builds in {secs:.1}s", case.id());
        bare_secs += secs;
    }
    println!(
        "prepare: {prepare_secs:.1}s, bare cargo build + test --no-run of buggy, fixed and \
         oracle: {bare_secs:.1}s, ratio {:.2}x",
        prepare_secs / bare_secs
    );
    Ok(ExitCode::SUCCESS)
}

/// Seconds of bare `cargo build` and `cargo test --no-run` of the buggy and the fixed crate in
/// scratch copies with a cold `target/`, offline over the case's vendored dependencies, and of
/// the oracle's tests where the case has an external oracle.
async fn bare_builds(data: &DataDir, p: &PreparedCase, toolchain: &Toolchain) -> Result<f64> {
    let grade = &p.stamp.grade;
    let mut secs = 0.0;
    for (side, tree) in [("buggy", &p.sources.buggy), ("fixed", &p.sources.fixed)] {
        let dir = data.scratch_dir("bench")?;
        let workspace = dir.path().join("workspace");
        copy_preserving(tree, &workspace)?;
        std::fs::copy(
            p.stamp.agent.workspace.join("Cargo.lock"),
            workspace.join("Cargo.lock"),
        )?;
        let oracle = match &grade.oracle {
            Some(o) if side == "buggy" => {
                let copy = dir.path().join("oracle");
                faultline_corpus::store::copy_tree(o, &copy, &|rel| !rel.starts_with("target"))?;
                Some(copy)
            }
            _ => None,
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
        // As preparation does: a published crate's tests that cannot compile are not an error.
        let _ = cargo(&sandbox, &["test", "--no-run"], None).await;
        if oracle.is_some() {
            cargo(&sandbox, &["test", "--no-run", "--tests"], Some("/oracle")).await?;
        }
        secs += started.elapsed().as_secs_f64();
    }
    Ok(secs)
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

/// Bytes of the regular files below `dir` whose inode is not in `seen` yet (each stored object
/// counts once, wherever it is linked), adding them to it.
fn bytes_below(dir: &Path, seen: &mut BTreeSet<(u64, u64)>) -> Result<u64> {
    let mut bytes = 0;
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if entry.file_type().is_file() {
            let meta = entry.metadata()?;
            if seen.insert((meta.dev(), meta.ino())) {
                bytes += meta.blocks() * 512;
            }
        }
    }
    Ok(bytes)
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}
