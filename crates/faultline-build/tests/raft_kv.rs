//! The raft-kv build task graded for real: the grader builds each submission against this
//! harness (release, offline) and runs hidden schedules. The reference must pass every one, the
//! skeleton none, and every buggy variant must fail the schedules its catalog names, in the way
//! it names.

mod common;

use std::path::{Path, PathBuf};

use faultline_build::runner::{GradeRequest, grade_submission};

/// Schedules of each variant's catalog entry that the test runs.
const PER_VARIANT: usize = 2;

fn task_dir() -> PathBuf {
    common::task_dir("raft-kv")
}

fn request(submission: PathBuf, patch: Option<PathBuf>, only: Option<Vec<String>>) -> GradeRequest {
    common::request(&task_dir(), submission, patch, only)
}

#[test]
fn the_reference_passes_every_hidden_schedule() {
    common::reference_passes_every_schedule(&task_dir());
}

#[test]
fn the_skeleton_builds_and_fails() {
    common::skeleton_builds_and_fails(&task_dir());
}

#[test]
fn every_variant_fails_the_schedules_its_catalog_names() {
    common::variants_fail_as_catalogued(&task_dir(), PER_VARIANT);
}

#[test]
fn a_patch_that_does_not_apply_is_an_error_not_a_grade() {
    let dir = tempfile::tempdir().unwrap();
    let patch = dir.path().join("bad.diff");
    std::fs::write(
        &patch,
        "diff --git a/src/nothing.rs b/src/nothing.rs\n--- a/src/nothing.rs\n+++ b/src/nothing.rs\n@@ -1 +1 @@\n-a\n+b\n",
    )
    .unwrap();
    let err = grade_submission(&request(task_dir().join("reference"), Some(patch), None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not apply"), "{err}");
}

/// A submission crate made of the skeleton with `edit` applied to its `src/lib.rs`.
fn edited_skeleton(dir: &Path, edit: impl Fn(&str) -> String) -> PathBuf {
    let crate_dir = dir.join("submission");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::copy(
        task_dir().join("skeleton/Cargo.toml"),
        crate_dir.join("Cargo.toml"),
    )
    .unwrap();
    let skeleton = std::fs::read_to_string(task_dir().join("skeleton/src/lib.rs")).unwrap();
    let edited = edit(&skeleton);
    assert_ne!(edited, skeleton, "the skeleton changed shape");
    std::fs::write(crate_dir.join("src/lib.rs"), edited).unwrap();
    crate_dir
}

/// Attack: a server that reads the hidden schedules from the driver's files or command line,
/// or loads a file at compile time, is refused before it is built, and scores nothing.
#[test]
fn a_server_reaching_for_the_schedules_is_refused_unbuilt() {
    let dir = tempfile::tempdir().unwrap();
    let forger = edited_skeleton(dir.path(), |s| {
        format!(
            "{s}\npub fn peek() -> usize {{\n    let args: Vec<String> = std::env::args().collect();\n    \
             std::fs::read(\"/proc/self/cmdline\").map(|b| b.len()).unwrap_or(args.len())\n}}\n\
             #[path = \"../../schedules.json\"]\nmod hidden;\n"
        )
    });
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(forger, None, only)).unwrap();
    let rules = report.rule_violations.join("\n");
    for rule in ["environment access", "file access"] {
        assert!(rules.contains(rule), "{rules}");
    }
    assert!(rules.contains("src/lib.rs:"), "{rules}");
    assert!(report.schedules.is_empty(), "it ran: {report:?}");
    assert_eq!((report.passed, report.share_passed), (0, 0.0));
    assert_eq!(report.build_seconds, 0.0, "it was built");
}

/// Attack: a link in the sources could point the build at any file; it is refused.
#[test]
fn a_link_among_the_sources_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = edited_skeleton(dir.path(), |s| format!("{s}\nmod peek;\n"));
    std::os::unix::fs::symlink(task_dir().join("task.toml"), crate_dir.join("src/peek.rs"))
        .unwrap();
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(crate_dir, None, only)).unwrap();
    let error = report.build_error.unwrap_or_default();
    assert!(error.contains("not a regular file"), "{error}");
    assert!(report.schedules.is_empty());
}

#[test]
fn a_submission_that_does_not_compile_gets_a_build_error() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = edited_skeleton(dir.path(), |_| "pub struct KvServer;\n".into());
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(crate_dir, None, only)).unwrap();
    let error = report.build_error.unwrap_or_default();
    assert!(error.contains("Server"), "{error}");
    assert_eq!((report.passed, report.share_passed), (0, 0.0));
}

/// Attacks, in one build: a server that prints a result line of its own does not pass (the
/// marker it would need reaches only the driver); and a submission's own manifest and build
/// script are not used, so neither a script that would run at build time (this one fails the
/// build) nor a dependency beyond the permitted ones gets in.
#[test]
fn forged_result_lines_build_scripts_and_foreign_dependencies_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = edited_skeleton(dir.path(), |s| {
        s.replace(
            "Message::Peer { .. } => {}",
            "Message::Peer { .. } => {}\n            }\n            \
             println!(\"{{\\\"schedule\\\":\\\"raft-kv-000\\\",\\\"passed\\\":true}}\");\n            \
             match () {\n                () => {}",
        )
    });
    std::fs::write(
        crate_dir.join("build.rs"),
        "fn main() { panic!(\"a submission's build script ran\"); }\n",
    )
    .unwrap();
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        manifest.replace(
            "[dependencies]",
            "build = \"build.rs\"\n\n[dependencies]\nno-such-crate-anywhere = \"9\"",
        ),
    )
    .unwrap();
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(crate_dir, None, only)).unwrap();
    assert_eq!(report.build_error, None);
    assert!(report.rule_violations.is_empty(), "{report:?}");
    assert_eq!(report.schedules.len(), 1);
    assert_eq!(
        report.schedules[0].failure.as_ref().map(|f| f.kind()),
        Some("liveness")
    );
}
