//! A workbench is a fresh copy of a case's grading template, never an agent's workspace: a
//! patch is applied to it, the hidden oracle is put in (see [`crate::verdict`]), and tests are
//! built and run in the sandbox, offline.

use crate::libtest::{self, RunVerdict, TestReport};
use crate::patch::{check_tests_kept, restore_tests};
use anyhow::{Context, Result, bail};
use faultline_corpus::workspace::{
    GUEST_ORACLE, GUEST_WORKSPACE, copy_preserving, copy_sharing_libraries, crates_independent_of,
};
use faultline_corpus::{Case, DataDir, PreparedCase};
use faultline_sandbox::{ExecRequest, Sandbox, Toolchain};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

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
}

/// A fresh copy of a case's grading template.
#[derive(Debug)]
pub struct Workbench {
    dir: tempfile::TempDir,
    /// The crate copy on the host.
    pub workspace: PathBuf,
    /// The oracle package copy on the host (external oracles).
    pub oracle: Option<PathBuf>,
    sandbox: Sandbox,
    /// Files moved out of the sandbox's view while tests run: (their place, where they wait).
    hidden: Mutex<Vec<(PathBuf, PathBuf)>>,
}

impl Workbench {
    /// Copies the grading template of a prepared case (with the oracle, for external oracles).
    pub fn new(
        case: &Case,
        prepared: &PreparedCase,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Workbench> {
        Workbench::from_template(case, &prepared.stamp.grade, data, toolchain, true)
    }

    /// Copies the agent template of a prepared case: no oracle, and a build cache that never saw
    /// one (for grading reproducers, which must not reach the oracle in any form).
    pub fn without_oracle(
        case: &Case,
        prepared: &PreparedCase,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Workbench> {
        Workbench::from_template(case, &prepared.stamp.agent, data, toolchain, false)
    }

    /// `share_libraries` links the dependencies' compiled libraries instead of copying them (see
    /// [`copy_sharing_libraries`]); only for the grading template, which no agent workspace is
    /// copied from, so the read-only files never reach an agent.
    fn from_template(
        case: &Case,
        template: &faultline_corpus::Template,
        data: &DataDir,
        toolchain: &Toolchain,
        share_libraries: bool,
    ) -> Result<Workbench> {
        let dir = tempfile::Builder::new()
            .prefix("bench-")
            .tempdir_in(data.scratch()?)?;
        let workspace = dir.path().join("workspace");
        if share_libraries {
            let locks: Vec<PathBuf> = std::iter::once(template.workspace.join("Cargo.lock"))
                .chain(template.oracle.iter().map(|o| o.join("Cargo.lock")))
                .filter(|l| l.is_file())
                .collect();
            let shared = crates_independent_of(case.manifest.source.crate_name(), &locks)?;
            copy_sharing_libraries(&template.workspace, &workspace, &shared)
                .context("copying the grading template")?;
        } else {
            copy_preserving(&template.workspace, &workspace)?;
        }
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
            dir,
            workspace,
            oracle,
            sandbox,
            hidden: Mutex::new(Vec::new()),
        })
    }

    /// The sandbox over this workbench.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Applies a unified diff with `git apply`; the error is git's explanation.
    pub fn apply_patch(&self, patch: &str) -> Result<(), String> {
        if patch.trim().is_empty() {
            return Ok(());
        }
        let mut child = Command::new("git")
            .args(["apply", "--whitespace=nowarn", "-p1", "-"])
            .current_dir(&self.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run git: {e}"))?;
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(patch.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// Moves files out of the sandbox's view until the next build (which puts them back), so
    /// that the tests run meanwhile cannot read them. A rename keeps their modification times,
    /// so cargo sees nothing to rebuild when they return.
    pub fn hide(&self, files: &[PathBuf]) -> Result<()> {
        let store = self.dir.path().join("hidden");
        fs::create_dir_all(&store)?;
        let mut hidden = self
            .hidden
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned lock"))?;
        for file in files {
            if !file.exists() {
                continue;
            }
            let away = store.join(hidden.len().to_string());
            fs::rename(file, &away).with_context(|| format!("hiding {}", file.display()))?;
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
        for (place, away) in hidden.drain(..) {
            fs::rename(&away, &place).with_context(|| format!("restoring {}", place.display()))?;
        }
        Ok(())
    }

    /// Gives the workbench's copy of `path` the test items of `reference` (another version of
    /// that file), keeping the rest of it; whether the file changed.
    pub fn take_tests_from(&self, path: &str, reference: &str) -> Result<bool> {
        let file = self.workspace.join(path);
        let current = fs::read_to_string(&file)?;
        if check_tests_kept(reference, &current).is_empty() {
            return Ok(false);
        }
        let Some(text) = restore_tests(reference, &current) else {
            return Ok(false);
        };
        fs::write(&file, text)?;
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
        let tests = oracle.join("tests");
        let mut stems = Vec::new();
        if tests.exists() {
            for entry in fs::read_dir(&tests)? {
                let path = entry?.path();
                if let Some(stem) = path.file_stem() {
                    stems.push(stem.to_string_lossy().replace('-', "_"));
                }
            }
            fs::remove_dir_all(&tests)?;
        }
        let package = oracle_package_name(oracle)?;
        let debug = self.workspace.join("target").join("debug");
        for (dir, prefixes) in [
            (debug.join("deps"), stems.clone()),
            (debug.join("incremental"), stems),
            (debug.join(".fingerprint"), vec![package]),
        ] {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let entry = entry?;
                let file_name = entry.file_name().to_string_lossy().into_owned();
                if prefixes
                    .iter()
                    .any(|p| file_name.starts_with(&format!("{p}-")))
                {
                    let path = entry.path();
                    if entry.file_type()?.is_dir() {
                        fs::remove_dir_all(&path)?;
                    } else {
                        fs::remove_file(&path)?;
                    }
                }
            }
        }
        fs::create_dir_all(&tests)?;
        fs::write(tests.join(format!("{name}.rs")), contents)?;
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
        let mut argv = vec![
            bin.path.clone(),
            "-Z".into(),
            "unstable-options".into(),
            "--format".into(),
            "json".into(),
        ];
        argv.extend(args);
        let req = ExecRequest::argv(argv, timeout)
            .cap(MACHINE_OUTPUT_CAP)
            .workdir(cwd)
            // libtest's JSON output is gated on this variable at run time; the build is not.
            .env("RUSTC_BOOTSTRAP", "1")
            .env("FAULTLINE_SEED", seed.to_string())
            .env("CARGO_MANIFEST_DIR", cwd)
            .env("RUST_BACKTRACE", "0");
        let out = self.sandbox.exec(&req).await?;
        let report = libtest::parse(&out.stdout.text);
        let verdict = libtest::judge(&report, out.exit_code, out.timed_out);
        let stderr_tail: String = {
            let chars: Vec<char> = out.stderr.text.chars().collect();
            chars[chars.len().saturating_sub(2000)..].iter().collect()
        };
        Ok(TestRun {
            verdict,
            report,
            exit_code: out.exit_code,
            timed_out: out.timed_out,
            wall_secs: out.duration.as_secs_f64(),
            stderr_tail,
        })
    }
}

/// The library root file of the crate at `dir` (`[lib] path`, or `src/lib.rs`).
pub fn lib_root(dir: &Path) -> Result<PathBuf> {
    let manifest: toml::Table = fs::read_to_string(dir.join("Cargo.toml"))?
        .parse()
        .context("parsing Cargo.toml")?;
    let rel = manifest
        .get("lib")
        .and_then(|l| l.get("path"))
        .and_then(|p| p.as_str())
        .unwrap_or("src/lib.rs");
    let path = dir.join(rel);
    if !path.is_file() {
        bail!("the crate has no library root at {rel}");
    }
    Ok(path)
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
fn oracle_package_name(oracle: &Path) -> Result<String> {
    let manifest: toml::Table = fs::read_to_string(oracle.join("Cargo.toml"))?
        .parse()
        .context("parsing the oracle's Cargo.toml")?;
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .context("the oracle's Cargo.toml names no package")
}
