//! The sandboxes a grade runs in, so a submission's code touches nothing of the host's: the
//! build sees the harness's sources, the toolchain and the vendored dependencies read-only and
//! writes only its work directory and cargo's build directory; each schedule runs in a sandbox
//! holding nothing but the driver executable and that schedule's input, offline, as the
//! sandbox's own unprivileged user, with the memory, process and disk limits of every other
//! sandbox.
//!
//! A grade's target directory holds two things: `vendor/`, written by the host only, and
//! `cargo/`, the one part a sandbox may write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use faultline_sandbox::{ExecOutput, ExecRequest, Mount, Sandbox, SandboxSpec, Toolchain};

use crate::error::RunnerError;

/// Where the repository's workspace (its manifest, lockfile and crates, never the corpus)
/// appears in the build's sandbox.
pub(crate) const GUEST_HARNESS: &str = "/harness";
/// Where grades' work directories (the driver and the submission) are in the build's sandbox.
const GUEST_WORK: &str = "/work";
/// The build's target directory.
const GUEST_TARGET: &str = "/target";
/// cargo's home: a scratch directory with its configuration mounted inside it, read-only.
const GUEST_CARGO_HOME: &str = "/cargo";
/// The harness's dependencies, vendored.
const GUEST_VENDOR: &str = "/vendor";
/// The part of a target directory that builds write.
const CARGO_DIR: &str = "cargo";
/// The file that marks a vendored copy complete.
const VENDORED_STAMP: &str = ".faultline-vendored";
/// The driver executable in a schedule's sandbox.
const GUEST_DRIVER: &str = "/driver/faultline-sim-driver";
/// The directory holding a schedule's input (the marker line and the schedule).
const GUEST_INPUT: &str = "/input";
/// Where failed schedules' histories are written, when asked for.
pub(crate) const GUEST_HISTORIES: &str = "/histories";
/// Characters kept of a schedule's output: the result line comes last, in the kept tail.
const OUTPUT_CAP: usize = 1_000_000;

/// This crate's directory on the host: `crates/faultline-build` in the repository.
const THIS_CRATE: &str = env!("CARGO_MANIFEST_DIR");

fn failed(what: &str, e: impl std::fmt::Display) -> RunnerError {
    RunnerError::Io(format!("{what}: {e}"))
}

/// The repository's root on the host.
pub(crate) fn repository() -> PathBuf {
    Path::new(THIS_CRATE).join("../..")
}

/// The harness's dependencies, vendored once per lockfile into the target directory by the
/// host's cargo (which holds the package cache's lock while it reads), so that sandboxed builds
/// read a copy nothing else writes to. Grades that find no copy race to make one; each writes
/// its own and renames it into place, and the loser's is removed.
pub(crate) fn vendored(target: &Path) -> Result<PathBuf, RunnerError> {
    let lock = std::fs::read(repository().join("Cargo.lock"))
        .map_err(|e| failed("reading the workspace's Cargo.lock", e))?;
    let digest = hex::encode(Sha256::digest(&lock));
    let vendor_root = target.join("vendor");
    let dir = vendor_root.join(&digest[..16]);
    if dir.join(VENDORED_STAMP).is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&vendor_root)
        .map_err(|e| failed("creating the vendor directory", e))?;
    let scratch = tempfile::Builder::new()
        .prefix("vendoring-")
        .tempdir_in(&vendor_root)
        .map_err(|e| failed("creating the vendor directory", e))?;
    let package = scratch.path().join("package");
    std::fs::create_dir_all(package.join("src")).map_err(|e| failed("vendoring", e))?;
    let manifest = format!(
        "[package]\nname = \"harness-dependencies\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[dependencies]\nfaultline-sim = {{ path = {:?} }}\n\n[workspace]\n",
        repository()
            .join("crates/faultline-sim")
            .display()
            .to_string()
    );
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(package.join(name), bytes).map_err(|e| failed("vendoring", e))
    };
    write("Cargo.toml", manifest.as_bytes())?;
    write("src/lib.rs", b"")?;
    write("Cargo.lock", &lock)?;
    let vendor = scratch.path().join("vendor");
    let out =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["vendor", "--quiet", "--manifest-path"])
            .arg(package.join("Cargo.toml"))
            .arg(&vendor)
            .output()
            .map_err(|e| failed("running cargo vendor", e))?;
    if !out.status.success() {
        return Err(failed(
            "vendoring the harness's dependencies",
            String::from_utf8_lossy(&out.stderr),
        ));
    }
    std::fs::write(vendor.join(VENDORED_STAMP), &digest).map_err(|e| failed("vendoring", e))?;
    if std::fs::rename(&vendor, &dir).is_err() && !dir.join(VENDORED_STAMP).is_file() {
        return Err(failed(
            "vendoring",
            format!("cannot move the vendored crates to {}", dir.display()),
        ));
    }
    Ok(dir)
}

/// The part of the target directory a build's sandbox writes, made if missing.
pub(crate) fn cargo_dir(target: &Path) -> Result<PathBuf, RunnerError> {
    let dir = target.join(CARGO_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| failed("creating the build directory", e))?;
    Ok(dir)
}

/// cargo's configuration in the build's sandbox: every registry crate from the vendored copy.
fn cargo_config(work: &Path) -> Result<PathBuf, RunnerError> {
    let path = work.join("cargo-config.toml");
    let text = format!(
        "[source.crates-io]\nreplace-with = \"vendored\"\n\n\
         [source.vendored]\ndirectory = \"{GUEST_VENDOR}\"\n\n[net]\noffline = true\n"
    );
    std::fs::write(&path, text).map_err(|e| failed("writing cargo's configuration", e))?;
    Ok(path)
}

/// A grade's own name: its work directory's, which the host drew at random (`grade-XXXXXX`).
/// Builds share a target directory, where cargo tells packages apart by path and puts every
/// executable under its name: were every submission at one path, or every driver one
/// executable, one grade could build on, or run, another's code.
pub(crate) fn grade_name(work: &Path) -> String {
    work.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Where a grade's work directory is in its build's sandbox.
pub(crate) fn guest_work(work: &Path) -> String {
    format!("{GUEST_WORK}/{}", grade_name(work))
}

fn toolchain() -> Result<Toolchain, RunnerError> {
    Toolchain::detect().map_err(|e| failed("finding the Rust toolchain", e))
}

fn sandbox(spec: SandboxSpec) -> Result<Sandbox, RunnerError> {
    Sandbox::new(spec).map_err(|e| failed("setting up the grading sandbox", e))
}

/// The sandbox the driver is built in: `work` (the driver and the submission) and the target
/// directory's `cargo/` writable, the harness's workspace, the toolchain and the package cache read-only, no network.
pub(crate) fn build_sandbox(work: &Path, target: &Path) -> Result<Sandbox, RunnerError> {
    let root = repository();
    let guest = guest_work(work);
    let mut spec = SandboxSpec::new(Some(toolchain()?), guest.as_str())
        .mount(Mount::ro(
            root.join("Cargo.toml"),
            format!("{GUEST_HARNESS}/Cargo.toml"),
        ))
        .mount(Mount::ro(
            root.join("Cargo.lock"),
            format!("{GUEST_HARNESS}/Cargo.lock"),
        ))
        .mount(Mount::ro(
            root.join("crates"),
            format!("{GUEST_HARNESS}/crates"),
        ))
        .mount(Mount::rw(work, guest.as_str()))
        .mount(Mount::rw(cargo_dir(target)?, GUEST_TARGET))
        .mount(Mount::ro(vendored(target)?, GUEST_VENDOR))
        .mount(Mount::ro(
            cargo_config(work)?,
            format!("{GUEST_CARGO_HOME}/config.toml"),
        ))
        .env("CARGO_HOME", GUEST_CARGO_HOME)
        .env("CARGO_TARGET_DIR", GUEST_TARGET)
        // Seeds tokio's own random choices (an unbiased `select!`) from the schedule.
        .env("RUSTFLAGS", "--cfg tokio_unstable");
    spec.tmpfs.push(GUEST_CARGO_HOME.to_string());
    sandbox(spec)
}

/// The command that builds the driver in [`build_sandbox`], and where its executable lands on
/// the host.
pub(crate) fn build_request(
    work: &Path,
    target: &Path,
    timeout: Duration,
) -> (ExecRequest, PathBuf) {
    let manifest = format!("{}/driver/Cargo.toml", guest_work(work));
    let request = ExecRequest::argv(
        [
            "cargo",
            "build",
            "--release",
            "--offline",
            "--quiet",
            "--manifest-path",
            manifest.as_str(),
        ],
        timeout,
    );
    let exe = target
        .join(CARGO_DIR)
        .join("release")
        .join(grade_name(work));
    (request, exe)
}

/// A sandbox for running schedules: the driver executable and the input directory read-only,
/// and the histories directory writable when asked for. Nothing else of the host is in it.
pub(crate) fn run_sandbox(
    driver: &Path,
    input: &Path,
    histories: Option<&Path>,
) -> Result<Sandbox, RunnerError> {
    let mut spec = SandboxSpec::new(None, GUEST_INPUT)
        .mount(Mount::ro(driver, GUEST_DRIVER))
        .mount(Mount::ro(input, GUEST_INPUT));
    if let Some(dir) = histories {
        spec = spec.mount(Mount::rw(dir, GUEST_HISTORIES));
    }
    sandbox(spec)
}

/// The command that runs the schedules in `GUEST_INPUT/stdin` from the first.
pub(crate) fn run_request(histories: bool, timeout: Duration) -> ExecRequest {
    let histories = if histories {
        format!(" --histories {GUEST_HISTORIES}")
    } else {
        String::new()
    };
    ExecRequest::bash(
        format!("exec {GUEST_DRIVER} 0{histories} < {GUEST_INPUT}/stdin"),
        timeout,
    )
    .cap(OUTPUT_CAP)
}

/// Runs a command in a sandbox and waits for it, from synchronous code: on a thread of its own
/// with a runtime of its own, so a caller that is itself inside a runtime is not blocked in it.
pub(crate) fn exec(sandbox: &Sandbox, request: ExecRequest) -> Result<ExecOutput, RunnerError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| failed("starting a runtime for the sandbox", e))?;
                runtime
                    .block_on(sandbox.exec(&request))
                    .map_err(|e| failed("running the grading sandbox", e))
            })
            .join()
            .unwrap_or_else(|_| Err(failed("running the grading sandbox", "its thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(script: &str) -> ExecRequest {
        ExecRequest::bash(script, Duration::from_secs(60))
    }

    /// Attack: code in the build's sandbox looks for the corpus (the hidden seeds, the
    /// reference) beside the harness's crates and writes into the harness; code in a schedule's
    /// sandbox looks for anything of the host's.
    #[test]
    fn the_sandboxes_hold_no_answer_and_keep_the_harness_read_only() {
        let work = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        let build = build_sandbox(work.path(), target.path()).unwrap();
        let out = exec(
            &build,
            bash("ls /harness; cat /harness/corpus/build/raft-kv/task.toml"),
        )
        .unwrap();
        let listing = &out.stdout.text;
        assert!(listing.contains("crates"), "{listing}\n{}", out.stderr.text);
        assert!(!listing.contains("corpus"), "{listing}");
        assert!(!listing.contains("seeds"), "{listing}");
        let out = exec(
            &build,
            bash("echo forged >> /harness/crates/faultline-sim/src/lib.rs"),
        )
        .unwrap();
        assert!(!out.success(), "the harness is writable");
        let out = exec(&build, bash("echo built > /target/x && cat /target/x")).unwrap();
        assert_eq!(out.stdout.text.trim(), "built", "{}", out.stderr.text);

        let input = tempfile::tempdir().unwrap();
        std::fs::write(input.path().join("stdin"), "marker\n[]").unwrap();
        let driver = input.path().join("driver");
        std::fs::write(&driver, "").unwrap();
        let run = run_sandbox(&driver, input.path(), None).unwrap();
        let out = exec(
            &run,
            bash("cat /input/stdin; ls /harness /work /target /cargo 2>&1"),
        )
        .unwrap();
        let seen = &out.stdout.text;
        assert!(seen.starts_with("marker\n[]"), "{seen}");
        assert_eq!(
            seen.matches("No such file").count(),
            4,
            "a schedule's sandbox sees more than its input: {seen}"
        );
    }
}
