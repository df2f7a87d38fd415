//! The flex-kv build task (Raft on flexible quorums) graded for real, like raft-kv: the reference
//! passes every hidden schedule, the skeleton none, and every buggy variant fails the first
//! schedule its catalog names, in the way it names (one each, to keep the run short).

mod common;

use std::path::PathBuf;

/// Schedules of each variant's catalog entry that the test runs.
const PER_VARIANT: usize = 1;

fn task_dir() -> PathBuf {
    common::task_dir("flex-kv")
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
