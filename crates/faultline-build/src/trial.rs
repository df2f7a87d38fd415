//! What an agent works in on the build track: the task's skeleton, pointed at a view of the
//! harness that holds only what the trial's aid gives, with the harness's dependencies vendored,
//! offline, in a sandbox like every other track's.
//!
//! The view is what withholds an aid. It is a copy of the harness's two crates whose manifests
//! default to the aid's features and which lack the files the aid does not give: under `task`,
//! `unit-tests` and `tla` only the node API (`faultline-sim`'s `api`), under `simulator` the
//! simulator without the linearizability checker's files, under `simulator-checker` all of it.
//! Enabling a withheld feature in the workspace's manifest fails the build: the files are not
//! there. The hidden schedules' seeds, the reference and the variants live in the corpus, which
//! no view holds.

use std::path::{Path, PathBuf};

use faultline_sandbox::{Mount, SandboxSpec, Toolchain};
use faultline_schema::Aid;
use sha2::{Digest, Sha256};

use crate::confine;
use crate::error::RunnerError;

/// Where the trial's workspace is in its sandbox.
pub const GUEST_WORKSPACE: &str = "/workspace";
/// Where the harness's view is in the trial's sandbox (the grader's build sees the whole
/// harness at the same path, so the skeleton's manifest reads the same in both).
const GUEST_HARNESS: &str = confine::GUEST_HARNESS;
/// The harness's crate a submission links, in the view.
const GUEST_SIM: &str = "/harness/crates/faultline-sim";
/// Vendored dependencies in the trial's sandbox.
const GUEST_VENDOR: &str = "/vendor";
/// cargo's home in the trial's sandbox (a scratch directory with the configuration inside).
const GUEST_CARGO_HOME: &str = "/cargo";
/// What the aid's unit tests call the task's crate.
const CRATE_PLACEHOLDER: &str = "SUBMISSION_CRATE";
/// The file that marks a prepared template complete.
const COMPLETE: &str = ".complete";
/// The checker's files in `faultline-linearize`, which only `simulator-checker` gives.
const CHECKER_FILES: [&str; 5] = [
    "src/budget.rs",
    "src/cache.rs",
    "src/check.rs",
    "src/search.rs",
    "src/shrink.rs",
];

fn failed(what: &str, e: impl std::fmt::Display) -> RunnerError {
    RunnerError::Io(format!("{what}: {e}"))
}

/// A prepared trial workspace for one task and aid, and what its sandbox mounts.
#[derive(Debug, Clone)]
pub struct TrialTemplate {
    /// The workspace an agent starts from (copied for each trial): the skeleton, its lockfile
    /// and the aid's tests.
    pub workspace: PathBuf,
    harness: PathBuf,
    vendor: PathBuf,
    cargo_config: PathBuf,
}

impl TrialTemplate {
    /// Prepares (or finds prepared) the template of `task_dir` under `aid` in `root`, with the
    /// harness's dependencies vendored into `target` (the grader's target directory, so both
    /// share one copy). `aids` is the directory of the aids' files (`corpus/build/aids`).
    pub fn prepare(
        task_dir: &Path,
        aid: Aid,
        aids: &Path,
        root: &Path,
        target: &Path,
    ) -> Result<TrialTemplate, RunnerError> {
        let vendor = confine::vendored(target)?;
        let repository = confine::repository();
        let mut inputs = vec![
            (aid.as_str().to_string(), Vec::new()),
            ("skeleton".into(), tree_digest(&task_dir.join("skeleton"))?),
            (
                "harness".into(),
                tree_digest(&repository.join("crates/faultline-sim"))?,
            ),
            (
                "checker".into(),
                tree_digest(&repository.join("crates/faultline-linearize"))?,
            ),
            ("aids".into(), tree_digest(aids)?),
        ];
        for file in ["Cargo.toml", "Cargo.lock"] {
            let bytes = std::fs::read(repository.join(file))
                .map_err(|e| failed(&format!("reading the workspace's {file}"), e))?;
            inputs.push((file.into(), bytes));
        }
        let mut hasher = Sha256::new();
        for (name, bytes) in &inputs {
            hasher.update(name.as_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        let task = task_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let digest = hex::encode(hasher.finalize());
        let dir = root.join(format!("{task}-{}-{}", aid.as_str(), &digest[..16]));
        let template = TrialTemplate {
            workspace: dir.join("workspace"),
            harness: dir.join("harness"),
            vendor,
            cargo_config: dir.join("cargo-config.toml"),
        };
        if dir.join(COMPLETE).is_file() {
            return Ok(template);
        }
        std::fs::create_dir_all(root).map_err(|e| failed("creating the trials' directory", e))?;
        let staging = tempfile::Builder::new()
            .prefix("preparing-")
            .tempdir_in(root)
            .map_err(|e| failed("creating a staging directory", e))?;
        write_view(&repository, aid, &staging.path().join("harness"))?;
        write_workspace(
            task_dir,
            &repository,
            aid,
            aids,
            &staging.path().join("workspace"),
        )?;
        std::fs::write(
            staging.path().join("cargo-config.toml"),
            format!(
                "[source.crates-io]\nreplace-with = \"vendored\"\n\n\
                 [source.vendored]\ndirectory = \"{GUEST_VENDOR}\"\n\n[net]\noffline = true\n"
            ),
        )
        .map_err(|e| failed("writing cargo's configuration", e))?;
        std::fs::write(staging.path().join(COMPLETE), &digest)
            .map_err(|e| failed("marking the template complete", e))?;
        let staged = staging.keep();
        if std::fs::rename(&staged, &dir).is_err() {
            // Another process prepared the same template first; its copy is as good.
            let _ = std::fs::remove_dir_all(&staged);
            if !dir.join(COMPLETE).is_file() {
                return Err(failed(
                    "preparing the trial template",
                    format!("cannot move it to {}", dir.display()),
                ));
            }
        }
        Ok(template)
    }

    /// The sandbox of a trial whose copy of the workspace is `workspace`: it writable at
    /// `/workspace` (its build's target directory inside it), the harness's view, the vendored
    /// dependencies and cargo's configuration read-only, no network.
    pub fn sandbox_spec(&self, toolchain: Option<Toolchain>, workspace: &Path) -> SandboxSpec {
        let mut spec = SandboxSpec::new(toolchain, GUEST_WORKSPACE)
            .mount(Mount::rw(workspace, GUEST_WORKSPACE))
            .mount(Mount::ro(&self.harness, GUEST_HARNESS))
            .mount(Mount::ro(&self.vendor, GUEST_VENDOR))
            .mount(Mount::ro(
                &self.cargo_config,
                format!("{GUEST_CARGO_HOME}/config.toml"),
            ))
            .env("CARGO_HOME", GUEST_CARGO_HOME)
            // As the grader builds: tokio's own random choices follow the simulation's seed.
            .env("RUSTFLAGS", "--cfg tokio_unstable");
        spec.tmpfs.push(GUEST_CARGO_HOME.to_string());
        spec
    }
}

/// The files an agent is shown besides the task's text under `aid`, as (name, text): how to use
/// the simulator and the checker, what the unit tests are, the TLA+ model.
pub fn aid_files(aids: &Path, aid: Aid) -> Result<Vec<(String, String)>, RunnerError> {
    let names: &[&str] = match aid {
        Aid::Task => &[],
        Aid::UnitTests => &["unit-tests.md"],
        Aid::Simulator => &["simulator.md"],
        Aid::SimulatorChecker => &["simulator.md", "checker.md"],
        Aid::Tla => &["tla/KvRaft.tla"],
    };
    names
        .iter()
        .map(|name| {
            let path = aids.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| failed(&format!("reading the aid file {}", path.display()), e))?;
            let shown = Path::new(name)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok((shown, text))
        })
        .collect()
}

/// SHA-256 over the paths and bytes of the regular files under `dir` (a missing directory
/// hashes as empty), ignoring `target/`.
fn tree_digest(dir: &Path) -> Result<Vec<u8>, RunnerError> {
    let mut files = Vec::new();
    list_files(dir, dir, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for rel in files {
        let bytes = std::fs::read(dir.join(&rel))
            .map_err(|e| failed(&format!("reading {}", dir.join(&rel).display()), e))?;
        hasher.update(rel.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hasher.finalize().to_vec())
}

/// The regular files under `dir`, relative to `root`, skipping `target/`.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), RunnerError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.map_err(|e| failed(&format!("reading {}", dir.display()), e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| failed(&format!("reading {}", path.display()), e))?;
        if kind.is_dir() && entry.file_name() != "target" {
            list_files(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Copies the files under `from` that `keep` accepts (by path relative to `from`) to `to`.
fn copy_filtered(from: &Path, to: &Path, keep: &dyn Fn(&str) -> bool) -> Result<(), RunnerError> {
    let mut files = Vec::new();
    list_files(from, from, &mut files)?;
    for rel in files.into_iter().filter(|r| keep(r)) {
        let dst = to.join(&rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| failed(&format!("creating {}", parent.display()), e))?;
        }
        std::fs::copy(from.join(&rel), &dst).map_err(|e| failed(&format!("copying {rel}"), e))?;
    }
    Ok(())
}

fn read_toml(path: &Path) -> Result<toml::Table, RunnerError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| failed(&format!("reading {}", path.display()), e))?;
    toml::from_str(&text).map_err(|e| failed(&format!("parsing {}", path.display()), e))
}

fn write_toml(path: &Path, table: &toml::Table) -> Result<(), RunnerError> {
    let text =
        toml::to_string(table).map_err(|e| failed(&format!("writing {}", path.display()), e))?;
    std::fs::write(path, text).map_err(|e| failed(&format!("writing {}", path.display()), e))
}

/// A view crate's manifest: its default features set to `defaults`, without the parts that
/// need files the view does not hold (tests, benches, dev-dependencies).
fn view_manifest(from: &Path, to: &Path, defaults: &[&str]) -> Result<(), RunnerError> {
    let mut manifest = read_toml(from)?;
    for section in ["dev-dependencies", "bench", "test", "example"] {
        manifest.remove(section);
    }
    if let Some(toml::Value::Table(features)) = manifest.get_mut("features") {
        features.insert(
            "default".into(),
            toml::Value::Array(
                defaults
                    .iter()
                    .map(|f| toml::Value::String(f.to_string()))
                    .collect(),
            ),
        );
    }
    write_toml(to, &manifest)
}

/// The harness's view under `aid`: the workspace manifest (its members the two crates) and the
/// crates' files the aid gives.
fn write_view(repository: &Path, aid: Aid, to: &Path) -> Result<(), RunnerError> {
    let crates = to.join("crates");
    let sim = crates.join("faultline-sim");
    let checker = crates.join("faultline-linearize");
    for dir in [&sim, &checker] {
        std::fs::create_dir_all(dir).map_err(|e| failed("creating the harness's view", e))?;
    }
    let mut root = read_toml(&repository.join("Cargo.toml"))?;
    if let Some(toml::Value::Table(workspace)) = root.get_mut("workspace")
        && let Some(toml::Value::Table(deps)) = workspace.get_mut("dependencies")
    {
        // Path dependencies on crates the view does not hold would not load.
        deps.retain(|name, _| !name.starts_with("faultline-") || name == "faultline-linearize");
    }
    write_toml(&to.join("Cargo.toml"), &root)?;
    let (sim_defaults, checker_defaults): (&[&str], &[&str]) = match aid {
        Aid::Task | Aid::UnitTests | Aid::Tla => (&[], &[]),
        Aid::Simulator => (&["simulator"], &[]),
        Aid::SimulatorChecker => (&["checker"], &["check"]),
    };
    let sim_from = repository.join("crates/faultline-sim");
    view_manifest(
        &sim_from.join("Cargo.toml"),
        &sim.join("Cargo.toml"),
        sim_defaults,
    )?;
    let simulator = aid.has_simulator();
    copy_filtered(&sim_from.join("src"), &sim.join("src"), &|rel| {
        simulator || rel == "lib.rs" || rel == "api.rs"
    })?;
    let checker_from = repository.join("crates/faultline-linearize");
    view_manifest(
        &checker_from.join("Cargo.toml"),
        &checker.join("Cargo.toml"),
        checker_defaults,
    )?;
    let with_checker = aid == Aid::SimulatorChecker;
    copy_filtered(&checker_from.join("src"), &checker.join("src"), &|rel| {
        let path = format!("src/{rel}");
        rel == "lib.rs" || (simulator && (with_checker || !CHECKER_FILES.contains(&path.as_str())))
    })
}

/// The workspace an agent starts from: the skeleton with its harness dependency pointed at the
/// view, the harness's lockfile, and under `unit-tests` the aid's tests.
fn write_workspace(
    task_dir: &Path,
    repository: &Path,
    aid: Aid,
    aids: &Path,
    to: &Path,
) -> Result<(), RunnerError> {
    copy_filtered(&task_dir.join("skeleton"), to, &|_| true)?;
    let mut manifest = read_toml(&to.join("Cargo.toml"))?;
    let deps = manifest
        .entry("dependencies")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(deps) = deps {
        let mut harness = toml::Table::new();
        harness.insert("path".into(), toml::Value::String(GUEST_SIM.into()));
        deps.insert("faultline-sim".into(), toml::Value::Table(harness));
    }
    if aid == Aid::UnitTests {
        let tests = to.join("tests");
        copy_filtered(&aids.join("unit-tests"), &tests, &|rel| {
            rel.ends_with(".rs")
        })?;
        // The tests are written once for every task: they name the task's crate by a
        // placeholder.
        let package = manifest
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .ok_or_else(|| failed("the skeleton's Cargo.toml", "it names no package"))?
            .replace('-', "_");
        let mut files = Vec::new();
        list_files(&tests, &tests, &mut files)?;
        for rel in files {
            let path = tests.join(rel);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| failed(&format!("reading {}", path.display()), e))?;
            std::fs::write(&path, text.replace(CRATE_PLACEHOLDER, &package))
                .map_err(|e| failed(&format!("writing {}", path.display()), e))?;
        }
        let mut tokio = toml::Table::new();
        tokio.insert("version".into(), toml::Value::String("1".into()));
        tokio.insert(
            "features".into(),
            toml::Value::Array(
                ["rt", "macros", "time", "sync", "test-util"]
                    .iter()
                    .map(|f| toml::Value::String(f.to_string()))
                    .collect(),
            ),
        );
        let mut dev = toml::Table::new();
        dev.insert("tokio".into(), toml::Value::Table(tokio));
        manifest.insert("dev-dependencies".into(), toml::Value::Table(dev));
    }
    write_toml(&to.join("Cargo.toml"), &manifest)?;
    std::fs::copy(repository.join("Cargo.lock"), to.join("Cargo.lock"))
        .map_err(|e| failed("copying the harness's Cargo.lock", e))?;
    Ok(())
}
