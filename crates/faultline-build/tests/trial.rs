//! Attack tests of what an agent on the build track works in: each aid's view of the harness
//! holds only what the aid gives (a withheld part cannot be switched on from the workspace's
//! manifest), no view holds the corpus (the hidden seeds, the reference), the view cannot be
//! written, and what it does give works: the reference builds against the API alone, and the
//! unit tests pass on the reference and fail on the skeleton. Real sandbox, real builds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use faultline_build::trial::{TrialTemplate, aid_files};
use faultline_sandbox::{ExecOutput, ExecRequest, Mount, Sandbox, Toolchain};
use faultline_schema::Aid;

fn task_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/build/raft-kv")
}

fn aids_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/build/aids")
}

/// A trial's copy of the workspace under `aid` and the sandbox over it; builds share `target`.
struct Trial {
    workspace: tempfile::TempDir,
    sandbox: Sandbox,
}

fn trial(root: &Path, target: &Path, shared_build: &Path, aid: Aid) -> Trial {
    let template = TrialTemplate::prepare(&task_dir(), aid, &aids_dir(), root, target).unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", template.workspace.display()))
        .arg(workspace.path())
        .status()
        .unwrap();
    assert!(status.success());
    let toolchain = Toolchain::detect().unwrap();
    let spec = template
        .sandbox_spec(Some(toolchain), workspace.path())
        .mount(Mount::rw(shared_build, "/build"))
        .env("CARGO_TARGET_DIR", "/build");
    Trial {
        workspace,
        sandbox: Sandbox::new(spec).unwrap(),
    }
}

fn run(t: &Trial, script: &str) -> ExecOutput {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(
            t.sandbox
                .exec(&ExecRequest::bash(script, Duration::from_secs(1200))),
        )
        .unwrap()
}

fn listing(t: &Trial, dir: &str) -> Vec<String> {
    let out = run(t, &format!("cd {dir} && find . -type f | sort"));
    assert!(out.success(), "{}", out.stderr.text);
    out.stdout
        .text
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect()
}

/// Copies the reference's sources over the trial's `src/`, as new files (the trials share a
/// build directory, where cargo would take sources older than its last build as built).
fn submit_reference(t: &Trial) {
    let src = t.workspace.path().join("src");
    std::fs::remove_dir_all(&src).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(task_dir().join("reference/src"))
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn each_aid_gives_only_its_part_of_the_harness_and_never_the_answers() {
    let (root, target, build) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let api_only = trial(root.path(), target.path(), build.path(), Aid::Task);
    assert_eq!(
        listing(&api_only, "/harness/crates/faultline-sim/src"),
        ["api.rs", "lib.rs"]
    );
    assert_eq!(
        listing(&api_only, "/harness/crates/faultline-linearize/src"),
        ["lib.rs"]
    );
    let simulator = trial(root.path(), target.path(), build.path(), Aid::Simulator);
    let sim_files = listing(&simulator, "/harness/crates/faultline-sim/src");
    assert!(sim_files.contains(&"sim.rs".to_string()), "{sim_files:?}");
    let checker_files = listing(&simulator, "/harness/crates/faultline-linearize/src");
    assert!(checker_files.contains(&"history.rs".to_string()));
    assert!(
        !checker_files.contains(&"check.rs".to_string()),
        "the simulator aid gives the checker: {checker_files:?}"
    );
    let checker = trial(
        root.path(),
        target.path(),
        build.path(),
        Aid::SimulatorChecker,
    );
    let checker_files = listing(&checker, "/harness/crates/faultline-linearize/src");
    assert!(checker_files.contains(&"check.rs".to_string()));

    for t in [&api_only, &simulator, &checker] {
        // Nothing of the corpus: no task file, no reference, no variant anywhere in reach.
        let out = run(
            t,
            "find / -xdev \\( -name task.toml -o -name catalog.json -o -name reference \\) \
             2>/dev/null | head",
        );
        assert_eq!(out.stdout.text.trim(), "", "the answers are in reach");
        let out = run(t, "echo forged >> /harness/crates/faultline-sim/src/lib.rs");
        assert!(!out.success(), "the harness's view is writable");
    }
    assert!(aid_files(&aids_dir(), Aid::Task).unwrap().is_empty());
    let shown = aid_files(&aids_dir(), Aid::SimulatorChecker).unwrap();
    assert_eq!(shown.len(), 2);
    assert!(shown[0].1.contains("grade_one"));
}

#[test]
fn the_api_alone_builds_the_reference_and_a_withheld_simulator_cannot_be_enabled() {
    let (root, target, build) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let t = trial(root.path(), target.path(), build.path(), Aid::Task);
    submit_reference(&t);
    let out = run(&t, "cargo build --offline 2>&1");
    assert!(out.success(), "{}", out.stdout.text);
    // Attack: the agent switches the simulator on in its own manifest.
    let out = run(
        &t,
        "sed -i '/^\\[dependencies.faultline-sim\\]/a features = [\"checker\"]' Cargo.toml && \
         grep -A2 'dependencies.faultline-sim' Cargo.toml && cargo build --offline 2>&1",
    );
    assert!(
        out.stdout.text.contains("features = [\"checker\"]"),
        "the attack did not edit the manifest: {}",
        out.stdout.text
    );
    assert!(
        !out.success(),
        "a withheld simulator was built: {}",
        out.stdout.text
    );
}

#[test]
fn the_unit_tests_pass_on_the_reference_and_fail_on_the_skeleton() {
    let (root, target, build) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let skeleton = trial(root.path(), target.path(), build.path(), Aid::UnitTests);
    let out = run(&skeleton, "cargo test --offline 2>&1");
    assert!(
        !out.success(),
        "the skeleton passes the unit tests: {}",
        out.stdout.text
    );
    assert!(
        out.stdout.text.contains("test result: FAILED"),
        "{}",
        out.stdout.text
    );
    let reference = trial(root.path(), target.path(), build.path(), Aid::UnitTests);
    submit_reference(&reference);
    let out = run(&reference, "cargo test --offline 2>&1");
    assert!(out.success(), "{}", out.stdout.text);
    assert!(
        out.stdout.text.contains("test a_put_is_read_back ... ok"),
        "{}",
        out.stdout.text
    );
}
