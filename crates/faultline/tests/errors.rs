//! Errors as the command prints them: every cause once, however many layers report it.

use std::path::Path;
use std::process::Command;

fn merge_error(shard: &Path, out: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("merge")
        .arg(shard)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unreadable_lock_names_the_operating_system_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("shard");
    // A directory where the lock should be: it exists, but reading it fails.
    std::fs::create_dir_all(shard.join("lock.json")).unwrap();
    let err = merge_error(&shard, &tmp.path().join("merged"));
    assert!(
        err.contains("cannot read") && err.contains("lock.json"),
        "{err}"
    );
    assert_eq!(err.matches("(os error 21)").count(), 1, "{err}");
}

#[test]
fn a_missing_lock_says_the_directory_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("shard");
    std::fs::create_dir_all(&shard).unwrap();
    let err = merge_error(&shard, &tmp.path().join("merged"));
    assert!(err.contains("has no lock.json"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}
