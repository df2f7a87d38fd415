//! Temporary directories that live as long as the test process, for what a test binary prepares
//! once and shares between its tests from a `static`.
//!
//! A `static` is never dropped, so a plain temporary directory held by one outlives its process
//! (every run of the suite used to leave its prepared fixtures in the temporary directory). Each
//! of these instead holds a lock for as long as its process lives, and making one first removes
//! those whose process has ended, however it ended.

use std::fs;
use std::path::{Path, PathBuf};

/// Names of process directories in the system's temporary directory start with this.
const PREFIX: &str = "faultline-test-process-";

/// The lock a process directory holds while its process lives.
const LOCK: &str = ".held";

/// Taken shared while a directory is made and locked, exclusive while the sweep runs, so the
/// sweep never sees a directory between the two.
const SPACE_LOCK: &str = "faultline-test-process.lock";

/// A directory removed by the next test process to make one once this process has ended.
#[derive(Debug)]
pub struct ProcessDir {
    path: PathBuf,
    _held: fs::File,
}

impl ProcessDir {
    /// Reclaims the directories of ended processes, then makes and locks a new one.
    pub fn new() -> std::io::Result<ProcessDir> {
        let tmp = std::env::temp_dir();
        let space = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(tmp.join(SPACE_LOCK))?;
        space.lock()?;
        sweep(&tmp);
        space.unlock()?;
        space.lock_shared()?;
        let path = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir_in(&tmp)?
            .keep();
        let held = fs::File::create(path.join(LOCK))?;
        held.lock()?;
        Ok(ProcessDir { path, _held: held })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ProcessDir {
    /// Removes the directory at once when the handle is dropped (one held by a `static` never
    /// is, and waits for the sweep).
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Removes the process directories whose lock nobody holds.
fn sweep(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let unheld = fs::File::open(entry.path().join(LOCK))
            .map(|f| f.try_lock().is_ok())
            // No lock file: its process died between making the directory and locking it.
            .unwrap_or(true);
        if unheld {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_outlives_its_handle_only_until_the_next_sweep() {
        let held = ProcessDir::new().unwrap();
        // One whose process ended: made and left unlocked.
        let ended = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir_in(std::env::temp_dir())
            .unwrap()
            .keep();
        fs::File::create(ended.join(LOCK)).unwrap();
        let other = ProcessDir::new().unwrap();
        assert!(!ended.exists());
        assert!(held.path().exists() && other.path().exists());
    }
}
