//! Warm builds: every template is built once, inside the sandbox, offline, as the harness, so
//! that agents and graders start from a full build cache that no sandbox's identity owns. The
//! toolchain's exact version is asked here too, since everything keyed on a build (the
//! preparation's inputs, the grade cache) must change with it.

use super::layout::{GUEST_ORACLE, GUEST_WORKSPACE, Template};
use anyhow::{Context, Result, bail};
use faultline_sandbox::{ExecRequest, Identity, Sandbox, Toolchain};
use faultline_schema::RegressionSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long a warm-up build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// The toolchain's `rustc -vV` (its exact version, commit and host), asked once per process.
pub fn toolchain_version(toolchain: &Toolchain) -> Result<String> {
    static SEEN: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());
    let mut seen = SEEN.lock().expect("never poisoned");
    if let Some(v) = seen.get(&toolchain.sysroot) {
        return Ok(v.clone());
    }
    let out = std::process::Command::new(toolchain.sysroot.join("bin/rustc"))
        .arg("-vV")
        .output()
        .context("running the toolchain's rustc -vV")?;
    if !out.status.success() {
        bail!(
            "rustc -vV failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    seen.insert(toolchain.sysroot.clone(), version.clone());
    Ok(version)
}

/// Builds the crate and its tests inside the sandbox, offline, as the harness (see
/// [`build_oracle`]). Published crates sometimes ship tests that cannot compile (their path-only
/// dev-dependencies are stripped on publishing); then only the test targets the case's
/// regression set declares are warmed, and the others stay as broken for the agent as they are
/// for any user.
pub(super) async fn warm_build(
    t: &Template,
    toolchain: &Toolchain,
    regression: &RegressionSpec,
) -> Result<()> {
    let sandbox = Sandbox::new(
        t.sandbox_spec(toolchain, &t.workspace, None)
            .identity(Identity::Harness),
    )?;
    cargo(&sandbox, &["build"])
        .await?
        .map_err(anyhow::Error::msg)?;
    if cargo(&sandbox, &["test", "--no-run"]).await?.is_ok() {
        return Ok(());
    }
    for target in regression.declared() {
        let args = [&["test", "--no-run"][..], &target.cargo_args()].concat();
        cargo(&sandbox, &args)
            .await?
            .map_err(|e| anyhow::anyhow!("{e}\n(a declared regression target must build)"))?;
    }
    Ok(())
}

/// `cargo ARGS --offline --locked` in the sandbox; `Err` is the failure in words.
async fn cargo(sandbox: &Sandbox, args: &[&str]) -> Result<std::result::Result<(), String>> {
    let argv = [&["cargo"][..], args, &["--offline", "--locked"]].concat();
    let out = sandbox
        .exec(&ExecRequest::argv(argv.iter().copied(), BUILD_TIMEOUT))
        .await?;
    Ok(if out.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed in the new workspace:\n{}",
            argv.join(" "),
            out.stderr.text
        ))
    })
}

/// Builds the tests of the grading template's oracle package (at `oracle`) against its
/// workspace crate, sharing the workspace's `target/`.
pub(super) async fn build_oracle(
    grade: &Template,
    oracle: &Path,
    toolchain: &Toolchain,
    case_id: &str,
) -> Result<()> {
    // Templates are built as the harness, so that what they hold is the harness's (and a
    // sandbox's dedicated identity can never change it).
    let sandbox = Sandbox::new(
        grade
            .sandbox_spec(toolchain, &grade.workspace, Some(oracle))
            .identity(Identity::Harness),
    )?;
    let out = sandbox
        .exec(
            &ExecRequest::argv(
                [
                    "cargo",
                    "test",
                    "--no-run",
                    "--offline",
                    "--locked",
                    "--tests",
                ],
                BUILD_TIMEOUT,
            )
            .workdir(GUEST_ORACLE)
            .env("CARGO_TARGET_DIR", format!("{GUEST_WORKSPACE}/target")),
        )
        .await?;
    if !out.success() {
        bail!(
            "{case_id}: building the oracle failed:\n{}",
            out.stderr.text
        );
    }
    Ok(())
}
