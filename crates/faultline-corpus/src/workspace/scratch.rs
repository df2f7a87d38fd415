//! Private directories in the data directory's scratch space (a trial's workspace, a grading
//! workbench, a bundle generator's build) that a killed process does not leave behind for good.
//!
//! Each directory is locked (`flock`) for as long as its owner holds it; the lock dies with the
//! owner's process, however it ends. [`DataDir::sweep_scratch`] removes the directories nobody
//! holds, so a resumed run reclaims what a killed one left, without touching the directories of
//! processes still running on the same data directory. A directory is made and locked under a
//! shared lock of the scratch space that the sweep takes exclusively, so the sweep never sees
//! one between the two.

use crate::DataDir;
use anyhow::{Context, Result};
use std::fs;
use std::path::Path;

/// The names scratch directories start with; nothing else in the scratch space is swept.
const PREFIXES: [&str; 5] = ["trial-", "bench-", "generator-", "provider-", "build-"];

/// The scratch space's own lock: shared while a directory is made and locked, exclusive while
/// the sweep runs.
const SPACE_LOCK: &str = ".lock";

/// A private scratch directory, removed when dropped, locked while it lives.
#[derive(Debug)]
pub struct ScratchDir {
    // Dropped in order: the directory is removed before its lock is released.
    dir: tempfile::TempDir,
    _lock: fs::File,
}

impl ScratchDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl DataDir {
    /// A new private directory in the scratch space; `kind` is `trial`, `bench`, `generator`,
    /// `provider` or `build` (a build-track submission being graded).
    pub fn scratch_dir(&self, kind: &str) -> Result<ScratchDir> {
        let prefix = format!("{kind}-");
        debug_assert!(PREFIXES.contains(&prefix.as_str()), "unknown kind {kind}");
        let scratch = self
            .scratch()
            .context("making the data directory's scratch space")?;
        let space = space_lock(&scratch)?;
        space.lock_shared()?;
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(&scratch)
            .with_context(|| format!("making a directory in {}", scratch.display()))?;
        let lock = fs::File::open(dir.path())?;
        lock.try_lock()
            .with_context(|| format!("locking {}", dir.path().display()))?;
        Ok(ScratchDir { dir, _lock: lock })
    }

    /// Removes the scratch directories that processes killed before they could remove them
    /// left behind; how many it removed.
    pub fn sweep_scratch(&self) -> Result<usize> {
        let scratch = self.scratch()?;
        let space = space_lock(&scratch)?;
        space.lock()?;
        let mut removed = 0;
        for entry in fs::read_dir(&scratch)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !entry.file_type()?.is_dir() || !PREFIXES.iter().any(|p| name.starts_with(p)) {
                continue;
            }
            let Ok(dir) = fs::File::open(entry.path()) else {
                continue;
            };
            if dir.try_lock().is_ok() {
                fs::remove_dir_all(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn space_lock(scratch: &Path) -> Result<fs::File> {
    let path = scratch.join(SPACE_LOCK);
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_nobody_holds_are_swept() {
        let root = tempfile::tempdir().unwrap();
        let data = DataDir::new(root.path().to_owned());
        let held = data.scratch_dir("trial").unwrap();
        // What a killed process leaves: a directory of ours that nobody locks any more.
        let left = data.scratch().unwrap().join("bench-left");
        fs::create_dir_all(left.join("workspace/src")).unwrap();
        fs::write(left.join("workspace/src/lib.rs"), "").unwrap();
        // Not ours.
        let other = data.scratch().unwrap().join("copy-in-progress");
        fs::create_dir(&other).unwrap();

        assert_eq!(data.sweep_scratch().unwrap(), 1);
        assert!(!left.exists());
        assert!(held.path().is_dir() && other.is_dir());
        let path = held.path().to_owned();
        drop(held);
        assert!(!path.exists());
    }
}
