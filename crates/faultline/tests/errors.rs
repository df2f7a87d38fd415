//! Errors as the command prints them: every cause once, however many layers report it.

use std::process::Command;

#[test]
fn a_missing_lock_names_the_operating_system_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("shard");
    std::fs::create_dir_all(&shard).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("merge")
        .arg(&shard)
        .arg("--out")
        .arg(tmp.path().join("merged"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read") && err.contains("lock.json"),
        "{err}"
    );
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
}
