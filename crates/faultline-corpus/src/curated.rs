//! The patches a curator keeps with a case and never shows an agent: the minimal fix
//! (`fix.diff`: the release diff reduced to the hunks that fix this bug), which the gold baseline
//! submits and reproducers are judged against, so that a change shipped in the same release
//! cannot stand in for the fix; and the decoys (`decoys/<name>.diff`), which hide the symptom
//! without fixing its cause and which validation requires the oracle to catch.

pub use crate::case::{DECOY_DIR, MINIMAL_FIX_FILE};

use crate::case::Case;
use crate::gold::{TreeDiff, diff_trees, is_source_path};
use crate::store::CaseSources;
use anyhow::{Context, Result, bail};
use faultline_schema::DecoySpec;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The gold patch of a case and where it came from.
#[derive(Debug, Clone)]
pub struct Gold {
    /// The change, source files only.
    pub diff: TreeDiff,
    /// True when it is the case's minimal fix; false when the case has none and the whole
    /// release diff stands in (validation then reports a problem).
    pub minimal: bool,
}

/// The gold patch: the case's minimal fix when it has one, the release diff otherwise.
pub fn gold_patch(case: &Case, sources: &CaseSources) -> Result<Gold> {
    let path = case.minimal_fix_path();
    if path.is_file() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let diff = patch_as_diff(&sources.buggy, &text)
            .with_context(|| format!("the minimal fix {MINIMAL_FIX_FILE}"))?;
        return Ok(Gold {
            diff,
            minimal: true,
        });
    }
    Ok(Gold {
        diff: diff_trees(&sources.buggy, &sources.fixed)?,
        minimal: false,
    })
}

/// A decoy's change to the buggy version.
pub fn decoy_patch(case: &Case, sources: &CaseSources, decoy: &DecoySpec) -> Result<TreeDiff> {
    let path = case.decoy_path(decoy);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    patch_as_diff(&sources.buggy, &text).with_context(|| format!("the decoy {}", decoy.name))
}

/// Applies a curator's patch to a copy of the buggy crate's `src/` and returns what it changed.
/// A patch that does not apply, changes nothing, or touches anything outside `src/` is refused:
/// agents may only change sources, and so may the patches they are measured against.
pub fn patch_as_diff(buggy: &Path, patch: &str) -> Result<TreeDiff> {
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let before = scratch.path().join("before");
    let after = scratch.path().join("after");
    for tree in [&before, &after] {
        copy_sources(buggy, tree)?;
    }
    if let Err(why) = apply_patch(&after, patch) {
        bail!("does not apply to the buggy version: {why}");
    }
    let diff = diff_trees(&before, &after)?;
    if let Some(outside) = diff.excluded.first() {
        bail!("changes {outside}; only files under src/ may change");
    }
    if diff.files.is_empty() {
        bail!("changes nothing");
    }
    Ok(diff)
}

/// Copies the regular files under `crate_root/src` to `dest/src`.
fn copy_sources(crate_root: &Path, dest: &Path) -> Result<()> {
    let src = crate_root.join("src");
    for entry in walkdir::WalkDir::new(&src).follow_links(false) {
        let entry = entry.with_context(|| format!("reading {}", src.display()))?;
        let rel = entry
            .path()
            .strip_prefix(crate_root)
            .expect("walkdir yields paths under its root");
        let target = dest.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if entry.file_type().is_file()
            && is_source_path(&rel.to_string_lossy().replace('\\', "/"))
        {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Applies a unified diff to the tree at `dir` with `git apply`; the error is git's explanation.
/// git refuses paths that leave the tree or pass through a symbolic link. It looks for no
/// repository above `dir` (one would change what the paths are relative to) and reads no
/// system or user configuration.
pub fn apply_patch(dir: &Path, patch: &str) -> Result<(), String> {
    if patch.trim().is_empty() {
        return Ok(());
    }
    let ceiling = dir.parent().unwrap_or(dir);
    let mut child = Command::new("git")
        .args(["apply", "--whitespace=nowarn", "-p1", "-"])
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_with(lib: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), lib).unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
        dir
    }

    const LIB: &str = "pub fn f() -> u32 {\n    1\n}\n";

    #[test]
    fn a_patch_of_sources_becomes_their_diff() {
        let dir = crate_with(LIB);
        let patch = "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n pub fn f() -> u32 {\n-    1\n+    2\n }\n";
        let diff = patch_as_diff(dir.path(), patch).unwrap();
        assert_eq!(diff.files.len(), 1);
        assert_eq!(diff.files[0].path, "src/lib.rs");
        assert_eq!(
            diff.files[0].new.as_deref(),
            Some("pub fn f() -> u32 {\n    2\n}\n")
        );
    }

    #[test]
    fn a_patch_outside_src_or_one_that_does_not_apply_is_refused() {
        let dir = crate_with(LIB);
        let manifest = "--- a/Cargo.toml\n+++ b/Cargo.toml\n@@ -1,2 +1,2 @@\n [package]\n-name = \"x\"\n+name = \"y\"\n";
        let err = format!("{:#}", patch_as_diff(dir.path(), manifest).unwrap_err());
        assert!(err.contains("does not apply"), "{err}");
        let new_file = "--- /dev/null\n+++ b/build.rs\n@@ -0,0 +1 @@\n+fn main() {}\n";
        let err = format!("{:#}", patch_as_diff(dir.path(), new_file).unwrap_err());
        assert!(err.contains("build.rs"), "{err}");
        let stale = "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n pub fn f() -> u32 {\n-    7\n+    2\n }\n";
        let err = format!("{:#}", patch_as_diff(dir.path(), stale).unwrap_err());
        assert!(err.contains("does not apply"), "{err}");
        let err = format!("{:#}", patch_as_diff(dir.path(), "\n").unwrap_err());
        assert!(err.contains("changes nothing"), "{err}");
    }
}
