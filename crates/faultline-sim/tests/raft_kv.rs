//! The raft-kv build task graded for real: the grader builds each submission against this
//! harness (release, offline) and runs hidden schedules. The reference must pass every one, the
//! skeleton none, and every buggy variant must fail the schedules its catalog names, in the way
//! it names.

mod common;

use std::path::PathBuf;

use faultline_sim::runner::{GradeRequest, grade_submission};

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

#[test]
fn a_submission_that_does_not_compile_gets_a_build_error() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("broken");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::copy(
        task_dir().join("skeleton/Cargo.toml"),
        crate_dir.join("Cargo.toml"),
    )
    .unwrap();
    std::fs::write(crate_dir.join("src/lib.rs"), "pub struct KvServer;\n").unwrap();
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(crate_dir, None, only)).unwrap();
    let error = report.build_error.unwrap_or_default();
    assert!(error.contains("Server"), "{error}");
    assert_eq!((report.passed, report.share_passed), (0, 0.0));
}

#[test]
fn what_a_server_prints_is_not_taken_for_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("chatty");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::copy(
        task_dir().join("skeleton/Cargo.toml"),
        crate_dir.join("Cargo.toml"),
    )
    .unwrap();
    let skeleton = std::fs::read_to_string(task_dir().join("skeleton/src/lib.rs")).unwrap();
    let chatty = skeleton.replace(
        "Message::Peer { .. } => {}",
        "Message::Peer { .. } => {}\n            }\n            \
         println!(\"{{\\\"schedule\\\":\\\"raft-kv-000\\\",\\\"passed\\\":true}}\");\n            \
         match () {\n                () => {}",
    );
    assert_ne!(chatty, skeleton, "the skeleton changed shape");
    std::fs::write(crate_dir.join("src/lib.rs"), chatty).unwrap();
    let only = Some(vec!["raft-kv-000".to_string()]);
    let report = grade_submission(&request(crate_dir, None, only)).unwrap();
    assert_eq!(report.build_error, None);
    assert_eq!(report.schedules.len(), 1);
    assert_eq!(
        report.schedules[0].failure.as_ref().map(|f| f.kind()),
        Some("liveness")
    );
}
