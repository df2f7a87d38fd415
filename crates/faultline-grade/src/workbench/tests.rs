use super::*;
use std::fs;

/// A workbench-like tree whose `src/inner` is a link to a directory outside it.
fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let bench = d.path().join("bench/workspace");
    let outside = d.path().join("outside");
    fs::create_dir_all(bench.join("src")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(bench.join("src/lib.rs"), "a\n").unwrap();
    fs::write(outside.join("x.rs"), "host\n").unwrap();
    std::os::unix::fs::symlink(&outside, bench.join("src/inner")).unwrap();
    (d, bench, outside)
}

#[test]
fn git_apply_writes_nothing_beyond_a_link() {
    let (_d, bench, outside) = tree();
    let through = "diff --git a/src/inner/x.rs b/src/inner/x.rs\n--- a/src/inner/x.rs\n+++ b/src/inner/x.rs\n@@ -1 +1 @@\n-host\n+pwned\n";
    let err = apply_patch(&bench, through).unwrap_err();
    assert!(err.contains("beyond a symbolic link"), "{err}");
    let made_then_used = "diff --git a/src/out b/src/out\nnew file mode 120000\n--- /dev/null\n+++ b/src/out\n@@ -0,0 +1 @@\n+../../../outside\n\\ No newline at end of file\n\
diff --git a/src/out/y.rs b/src/out/y.rs\nnew file mode 100644\n--- /dev/null\n+++ b/src/out/y.rs\n@@ -0,0 +1 @@\n+pwned\n";
    assert!(apply_patch(&bench, made_then_used).is_err());
    let escape = "diff --git a/../outside/x.rs b/../outside/x.rs\n--- a/../outside/x.rs\n+++ b/../outside/x.rs\n@@ -1 +1 @@\n-host\n+pwned\n";
    assert!(apply_patch(&bench, escape).is_err());
    assert_eq!(fs::read_to_string(outside.join("x.rs")).unwrap(), "host\n");
    assert!(!outside.join("y.rs").exists());
    let fine = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-a\n+b\n";
    apply_patch(&bench, fine).unwrap();
    assert_eq!(fs::read_to_string(bench.join("src/lib.rs")).unwrap(), "b\n");
}

#[test]
fn the_library_root_is_found_without_following_links() {
    let (_d, bench, _) = tree();
    fs::write(bench.join("Cargo.toml"), "[package]\nname = \"k\"\n").unwrap();
    let files = Confined::open(&bench).unwrap();
    assert_eq!(lib_root(&files).unwrap(), Path::new("src/lib.rs"));
    fs::write(
        bench.join("Cargo.toml"),
        "[package]\nname = \"k\"\n[lib]\npath = \"src/inner/x.rs\"\n",
    )
    .unwrap();
    assert!(lib_root(&files).is_err());
}
