//! A workbench is a fresh copy of a case's grading template, never an agent's workspace: a
//! patch is applied to it, the hidden oracle is put in (see [`crate::verdict`]), and tests are
//! built and run in the sandbox, offline. The template is checked against its manifest before it is copied, and every
//! host-side edit of the copy goes through [`Confined`], which follows no link.

use crate::libtest::{self, RunVerdict, TestReport};
use crate::patch::{check_tests_kept, restore_tests};
use anyhow::{Context, Result, bail};
use faultline_corpus::confined::Confined;
use faultline_corpus::curated::apply_patch;
use faultline_corpus::workspace::copy::copy_preserving;
use faultline_corpus::workspace::layout::{GUEST_ORACLE, GUEST_WORKSPACE};
use faultline_corpus::{Case, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::{
    ExecOutput, ExecRequest, LimitHit, Mount, Sandbox, SandboxError, SandboxSpec, Session,
    Toolchain,
};
use faultline_schema::RegressionTarget;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Where [`Workbench::run_alone`] mounts the test executable, and its working directory.
const ALONE_EXECUTABLE: &str = "/test";
const ALONE_WORKDIR: &str = "/work";

/// How long a test build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Output kept from a build or a test run: enough for every event of a large suite.
const MACHINE_OUTPUT_CAP: usize = 8_000_000;

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildTarget {
    /// The crate's library unit tests (this includes an in-crate oracle).
    Lib,
    /// One integration test file of the crate.
    Test(String),
    /// The external oracle package's tests.
    Oracle,
}

impl BuildTarget {
    /// Only the declared regression targets: a published crate's others may not compile.
    pub fn regression(case: &Case) -> Vec<BuildTarget> {
        let declared = case.manifest.regression.declared();
        declared
            .map(|t| match t {
                RegressionTarget::Test(name) => BuildTarget::Test(name.to_string()),
                RegressionTarget::Lib => BuildTarget::Lib,
            })
            .collect()
    }
}

/// A test executable inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestBinary {
    /// The cargo target it was built from.
    pub target: String,
    /// Path inside the sandbox.
    pub path: String,
    /// The package root it runs in (as `cargo test` would).
    pub cwd: String,
}

/// One run of a test binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestRun {
    /// How the run ended.
    pub verdict: RunVerdict,
    /// The parsed events.
    pub report: TestReport,
    /// Exit code of the test process.
    pub exit_code: Option<i32>,
    /// Whether the wall-clock limit ended it.
    pub timed_out: bool,
    /// The sandbox's resource limit the run ran into, if one did.
    #[serde(skip)]
    pub limit: Option<LimitHit>,
    /// Wall-clock seconds of the sandboxed run.
    pub wall_secs: f64,
    /// The tail of standard error, for humans.
    pub stderr_tail: String,
}

/// A build that failed: the compiler's messages.
#[derive(Debug, Clone)]
pub struct BuildFailure {
    /// What cargo printed on standard error (capped).
    pub stderr: String,
    /// Whether the build ran out of time.
    pub timed_out: bool,
    /// The sandbox's resource limit the build ran into, if one did.
    pub limit: Option<LimitHit>,
}

/// A fresh copy of a case's grading template.
#[derive(Debug)]
pub struct Workbench {
    dir: faultline_corpus::workspace::scratch::ScratchDir,
    /// The crate copy on the host.
    pub workspace: PathBuf,
    /// The oracle package copy on the host (external oracles).
    pub oracle: Option<PathBuf>,
    files: Confined,
    sandbox: Sandbox,
    /// Files moved out of the sandbox's view while tests run: (their place, where they wait).
    hidden: Mutex<Vec<(PathBuf, String)>>,
    /// Idle sessions of [`Self::sandbox`] for test processes: the oracle runs every wrapper in
    /// a process of its own, and a session spares each the start of a new sandbox.
    idle_sessions: tokio::sync::Mutex<Vec<Session>>,
}

impl Workbench {
    /// Copies the grading template of a prepared case (with the oracle, for external oracles).
    pub fn new(
        prepared: &PreparedCase,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Workbench> {
        Workbench::from_template(prepared, TemplateKind::Grading, data, toolchain)
    }

    /// Copies the agent template of a prepared case: no oracle, and a build cache that never saw
    /// one (for grading reproducers, which must not reach the oracle in any form).
    pub fn without_oracle(
        prepared: &PreparedCase,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Workbench> {
        Workbench::from_template(prepared, TemplateKind::Agent, data, toolchain)
    }

    /// Checks the template against its manifest (a damaged one is an error naming what
    /// differs), then copies it. The template's shared build outputs become links to their
    /// read-only mount (see [`PreparedCase::copy_workspace`]).
    fn from_template(
        prepared: &PreparedCase,
        kind: TemplateKind,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Workbench> {
        prepared.check(kind)?;
        let template = prepared.template(kind);
        let dir = data.scratch_dir("bench")?;
        let workspace = dir.path().join("workspace");
        prepared.copy_workspace(kind, &workspace)?;
        let oracle = match &template.oracle {
            Some(o) => {
                let copy = dir.path().join("oracle");
                copy_preserving(o, &copy)?;
                Some(copy)
            }
            None => None,
        };
        let sandbox =
            Sandbox::new(template.sandbox_spec(toolchain, &workspace, oracle.as_deref()))?;
        Ok(Workbench {
            files: Confined::open(&workspace)?,
            dir,
            workspace,
            oracle,
            sandbox,
            hidden: Mutex::new(Vec::new()),
            idle_sessions: tokio::sync::Mutex::new(Vec::new()),
        })
    }

    /// The crate copy's files, for host-side edits that follow no link.
    pub fn files(&self) -> &Confined {
        &self.files
    }

    /// The sandbox over this workbench.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Applies a unified diff with `git apply`; the error is git's explanation.
    pub fn apply_patch(&self, patch: &str) -> Result<(), String> {
        apply_patch(&self.workspace, patch)
    }

    /// The files of the tree a host path of this workbench lies in (the crate's or the oracle
    /// package's), and the path relative to it.
    pub fn tree_of(&self, host: &Path) -> Result<(Confined, PathBuf)> {
        if let Ok(rel) = host.strip_prefix(&self.workspace) {
            return Ok((Confined::open(&self.workspace)?, rel.to_path_buf()));
        }
        if let Some(oracle) = &self.oracle
            && let Ok(rel) = host.strip_prefix(oracle)
        {
            return Ok((Confined::open(oracle)?, rel.to_path_buf()));
        }
        bail!("{} is outside the workbench", host.display())
    }

    /// Moves files out of the sandbox's view until the next build (which puts them back), so
    /// that the tests run meanwhile cannot read them. A rename keeps their modification times,
    /// so cargo sees nothing to rebuild when they return; it moves a link itself, never what it
    /// points to.
    pub fn hide(&self, files: &[PathBuf]) -> Result<()> {
        let store = self.dir.path().join("hidden");
        std::fs::create_dir_all(&store)?;
        let store = Confined::open(&store)?;
        let mut hidden = self
            .hidden
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned lock"))?;
        for file in files {
            let (tree, rel) = self.tree_of(file)?;
            if !tree.is_file(&rel) {
                continue;
            }
            let away = hidden.len().to_string();
            tree.rename_to(&rel, &store, &away)
                .with_context(|| format!("hiding {}", file.display()))?;
            hidden.push((file.clone(), away));
        }
        Ok(())
    }

    /// Puts hidden files back.
    fn restore_hidden(&self) -> Result<()> {
        let mut hidden = self
            .hidden
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned lock"))?;
        if hidden.is_empty() {
            return Ok(());
        }
        let store = Confined::open(&self.dir.path().join("hidden"))?;
        for (place, away) in hidden.drain(..) {
            let (tree, rel) = self.tree_of(&place)?;
            store
                .rename_to(&away, &tree, &rel)
                .with_context(|| format!("restoring {}", place.display()))?;
        }
        Ok(())
    }

    /// Gives the workbench's copy of `path` the test items of `reference` (another version of
    /// that file), keeping the rest of it; whether the file changed.
    pub fn take_tests_from(&self, path: &str, reference: &str) -> Result<bool> {
        let current = self.files.read_to_string(path)?;
        if check_tests_kept(reference, &current).is_empty() {
            return Ok(false);
        }
        let Some(text) = restore_tests(reference, &current) else {
            return Ok(false);
        };
        self.files.write(path, text.as_bytes())?;
        Ok(true)
    }

    /// Makes the external test package hold one test file, `tests/<name>.rs`, instead of the
    /// oracle's: the oracle's sources are deleted, and so are its compiled test executables,
    /// incremental state and fingerprints in the shared target directory.
    pub fn replace_oracle_tests(&self, name: &str, contents: &str) -> Result<()> {
        let oracle = self
            .oracle
            .as_ref()
            .context("this case has no external oracle package")?;
        let oracle_files = Confined::open(oracle)?;
        let stems: Vec<String> = oracle_files
            .read_dir("tests")?
            .iter()
            .map(|e| {
                let stem = Path::new(&e.name).file_stem().unwrap_or_default();
                stem.to_string_lossy().replace('-', "_")
            })
            .collect();
        oracle_files.remove_dir_all("tests")?;
        let package = oracle_package_name(&oracle_files)?;
        let debug = Path::new("target/debug");
        for (dir, prefixes) in [
            (debug.join("deps"), stems.clone()),
            (debug.join("incremental"), stems),
            (debug.join(".fingerprint"), vec![package]),
        ] {
            for entry in self.files.read_dir(&dir)? {
                if prefixes
                    .iter()
                    .any(|p| entry.name.starts_with(&format!("{p}-")))
                {
                    let path = dir.join(&entry.name);
                    if entry.is_dir {
                        self.files.remove_dir_all(&path)?;
                    } else {
                        self.files.remove_file(&path)?;
                    }
                }
            }
        }
        oracle_files.write(format!("tests/{name}.rs"), contents.as_bytes())?;
        Ok(())
    }

    /// Builds test executables offline; `Err` is a build failure, not an infrastructure error.
    pub async fn build(
        &self,
        targets: &[BuildTarget],
    ) -> Result<Result<Vec<TestBinary>, BuildFailure>> {
        self.restore_hidden()?;
        let mut found = Vec::new();
        for target in targets {
            let (mut argv, cwd, env_target) = match target {
                BuildTarget::Lib => (vec!["--lib".to_string()], GUEST_WORKSPACE, None),
                BuildTarget::Test(name) => (
                    vec!["--test".to_string(), name.clone()],
                    GUEST_WORKSPACE,
                    None,
                ),
                BuildTarget::Oracle => {
                    if self.oracle.is_none() {
                        bail!("this case has no external oracle package");
                    }
                    (
                        vec!["--tests".to_string()],
                        GUEST_ORACLE,
                        Some(format!("{GUEST_WORKSPACE}/target")),
                    )
                }
            };
            let mut cmd = vec![
                "cargo".to_string(),
                "test".into(),
                "--no-run".into(),
                "--offline".into(),
                "--locked".into(),
                "--message-format=json-render-diagnostics".into(),
            ];
            cmd.append(&mut argv);
            let mut req = ExecRequest::argv(cmd, BUILD_TIMEOUT)
                .cap(MACHINE_OUTPUT_CAP)
                .workdir(cwd);
            if let Some(t) = env_target {
                req = req.env("CARGO_TARGET_DIR", t);
            }
            let out = self.sandbox.exec(&req).await?;
            if !out.success() {
                return Ok(Err(BuildFailure {
                    limit: out.limit_hit(),
                    stderr: out.stderr.text,
                    timed_out: out.timed_out,
                }));
            }
            found.extend(executables(&out.stdout.text, cwd));
        }
        Ok(Ok(found))
    }

    /// Runs a test binary with libtest's JSON output, in its package's root as `cargo test`
    /// would. `filter` selects tests (substring, as libtest), `skip` excludes them, `seed` is
    /// passed as `FAULTLINE_SEED`.
    pub async fn run(
        &self,
        bin: &TestBinary,
        filter: Option<&str>,
        skip: &[String],
        seed: u64,
        timeout: Duration,
    ) -> Result<TestRun> {
        let mut args: Vec<String> = filter.iter().map(|f| f.to_string()).collect();
        for s in skip {
            args.push("--skip".into());
            args.push(s.clone());
        }
        self.run_args(bin, args, &bin.cwd, seed, timeout).await
    }

    /// Runs the one test named `name` (`--exact`), in the crate's directory whatever package the
    /// executable belongs to, as the agent's own tests run: where the test was built says nothing
    /// to the code under test.
    pub async fn run_exact(
        &self,
        bin: &TestBinary,
        name: &str,
        seed: u64,
        timeout: Duration,
    ) -> Result<TestRun> {
        let args = vec!["--exact".to_string(), name.to_string()];
        self.run_args(bin, args, GUEST_WORKSPACE, seed, timeout)
            .await
    }

    async fn run_args(
        &self,
        bin: &TestBinary,
        args: Vec<String>,
        cwd: &str,
        seed: u64,
        timeout: Duration,
    ) -> Result<TestRun> {
        let req = libtest_request(&bin.path, args, timeout)
            .workdir(cwd)
            .env("FAULTLINE_SEED", seed.to_string())
            .env("CARGO_MANIFEST_DIR", cwd);
        Ok(test_run(self.exec_in_session(&req).await?))
    }

    /// Runs a test process in an idle session, or a new one, and keeps the session for the
    /// next process if it is still sound. A session runs each command as a fresh sandbox would
    /// (nothing it started outlives it), sharing only `/tmp`, and test processes already
    /// share the workbench. Without a supervisor binary it falls back to a sandbox per process.
    async fn exec_in_session(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let idle = self.idle_sessions.lock().await.pop();
        let session = match idle {
            Some(session) => session,
            None => match self.sandbox.start_session().await {
                Ok(session) => session,
                Err(SandboxError::NoSupervisor(_)) => return self.sandbox.exec(req).await,
                Err(e) => return Err(e),
            },
        };
        let out = session.exec(req).await?;
        if !out.disk_limit_hit {
            self.idle_sessions.lock().await.push(session);
        }
        Ok(out)
    }

    /// Runs a test binary with libtest's JSON output in a sandbox of its own that holds nothing
    /// of the case: the executable alone (read-only), an empty working directory, no toolchain,
    /// and no environment but what libtest and the panic handler read. For reproducers, which
    /// must not read the crate's sources or anything else that could tell the buggy version
    /// from the fixed one: whatever a reproducer slipped past the static check of
    /// [`crate::legality`] finds nothing to read.
    pub async fn run_alone(&self, bin: &TestBinary, timeout: Duration) -> Result<TestRun> {
        let host = self.host_path(&bin.path)?;
        let mut spec =
            SandboxSpec::new(None, ALONE_WORKDIR).mount(Mount::ro(host, ALONE_EXECUTABLE));
        spec.tmpfs.push(ALONE_WORKDIR.into());
        spec.env.clear();
        let sandbox = Sandbox::new(spec)?;
        let req = libtest_request(ALONE_EXECUTABLE, Vec::new(), timeout);
        Ok(test_run(sandbox.exec(&req).await?))
    }

    /// The host path of a regular file inside this workbench's sandbox; a link there (which
    /// bubblewrap would follow on the host when mounting it) is refused.
    fn host_path(&self, guest: &str) -> Result<PathBuf> {
        let guest = Path::new(guest);
        let (root, rest) = if let Ok(rest) = guest.strip_prefix(GUEST_WORKSPACE) {
            (&self.workspace, rest)
        } else if let (Ok(rest), Some(oracle)) = (guest.strip_prefix(GUEST_ORACLE), &self.oracle) {
            (oracle, rest)
        } else {
            bail!("{} is outside the workbench", guest.display())
        };
        if !Confined::open(root)?.is_file(rest) {
            bail!("{} is not a regular file of the workbench", guest.display());
        }
        Ok(root.join(rest))
    }
}

/// A test executable's command line for libtest's JSON output, with the environment libtest
/// and the panic handler read.
fn libtest_request(executable: &str, args: Vec<String>, timeout: Duration) -> ExecRequest {
    let mut argv = vec![
        executable.to_string(),
        "-Z".into(),
        "unstable-options".into(),
        "--format".into(),
        "json".into(),
    ];
    argv.extend(args);
    ExecRequest::argv(argv, timeout)
        .cap(MACHINE_OUTPUT_CAP)
        // libtest's JSON output is gated on this variable at run time; the build is not.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUST_BACKTRACE", "0")
}

/// A test run's verdict from its exit and libtest's events.
fn test_run(out: ExecOutput) -> TestRun {
    let report = libtest::parse(&out.stdout.text);
    let verdict = libtest::judge(&report, out.exit_code, out.timed_out);
    let stderr_tail: String = {
        let chars: Vec<char> = out.stderr.text.chars().collect();
        chars[chars.len().saturating_sub(2000)..].iter().collect()
    };
    TestRun {
        verdict,
        report,
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        limit: out.limit_hit(),
        wall_secs: out.duration.as_secs_f64(),
        stderr_tail,
    }
}

/// The library root file of the crate in `dir` (`[lib] path`, or `src/lib.rs`), relative to it.
pub fn lib_root(dir: &Confined) -> Result<PathBuf> {
    let manifest: toml::Table = dir
        .read_to_string("Cargo.toml")?
        .parse()
        .context("parsing Cargo.toml")?;
    let rel = manifest
        .get("lib")
        .and_then(|l| l.get("path"))
        .and_then(|p| p.as_str())
        .unwrap_or("src/lib.rs");
    if !dir.is_file(rel) {
        bail!("the crate has no library root at {rel}");
    }
    Ok(PathBuf::from(rel))
}

/// Test executables from cargo's JSON messages.
fn executables(messages: &str, cwd: &str) -> Vec<TestBinary> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["profile"]["test"] == true)
        .filter_map(|m| {
            Some(TestBinary {
                target: m["target"]["name"].as_str()?.to_string(),
                path: m["executable"].as_str()?.to_string(),
                cwd: cwd.to_string(),
            })
        })
        .collect()
}

/// The package name in an external oracle's `Cargo.toml`.
fn oracle_package_name(oracle: &Confined) -> Result<String> {
    let manifest: toml::Table = oracle
        .read_to_string("Cargo.toml")?
        .parse()
        .context("parsing the oracle's Cargo.toml")?;
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .context("the oracle's Cargo.toml names no package")
}

#[cfg(test)]
mod tests;
