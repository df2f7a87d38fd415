//! The disk limit: how much a sandbox adds to its writable mounts.
//!
//! The writable mounts are host directories, so what a command writes there lands on the host's
//! disk. No kernel mechanism that every host has bounds one directory tree (quotas need file
//! system support and mount options), so the harness measures: before the sandbox's first
//! command, and then while a command runs, as often as costs at most a twentieth of a core
//! (every 100 ms for a small tree, at least once a second for a large one), and once when it
//! ends. A command that took the mounts past the limit is killed. No single file can outgrow
//! the limit meanwhile (`RLIMIT_FSIZE`, set by the launcher), so what a command can write
//! between two measurements is bounded by the disk's speed (or the page cache's) over one
//! interval.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The shortest interval between two measurements of a running command's mounts.
const MIN_TICK: Duration = Duration::from_millis(100);

/// The longest: a tree so large that measuring it takes 50 ms is still measured every second.
const MAX_TICK: Duration = Duration::from_secs(1);

/// The interval is this many times what the last measurement took (a twentieth of a core).
const TICK_PER_COST: u32 = 20;

/// Commands shorter than this are not measured at their end: at disk speed they cannot have
/// written much, and the next command's first measurement sees it.
pub(crate) const SHORT_COMMAND: Duration = Duration::from_millis(100);

/// The writable mounts of one sandbox and their size before its first command.
#[derive(Debug)]
pub(crate) struct DiskWatch {
    roots: Vec<PathBuf>,
    limit: u64,
    baseline: OnceLock<u64>,
}

impl DiskWatch {
    pub(crate) fn new(roots: Vec<PathBuf>, limit: u64) -> Self {
        DiskWatch {
            roots,
            limit,
            baseline: OnceLock::new(),
        }
    }

    /// Records the starting size, if not done yet; call before the sandbox's first command.
    pub(crate) fn start(&self) {
        self.baseline.get_or_init(|| usage(&self.roots));
    }

    /// Whether the mounts have grown past the limit since the start.
    pub(crate) fn exceeded(&self) -> bool {
        let base = *self.baseline.get_or_init(|| usage(&self.roots));
        usage(&self.roots).saturating_sub(base) > self.limit
    }

    /// Resolves once the mounts have grown past the limit, measuring them as often as costs
    /// a twentieth of a core, between [`MIN_TICK`] and [`MAX_TICK`].
    pub(crate) async fn over_limit(self: std::sync::Arc<Self>) {
        let mut tick = MIN_TICK;
        loop {
            tokio::time::sleep(tick).await;
            let me = self.clone();
            let started = std::time::Instant::now();
            if tokio::task::spawn_blocking(move || me.exceeded())
                .await
                .unwrap_or(false)
            {
                return;
            }
            tick = (started.elapsed() * TICK_PER_COST).clamp(MIN_TICK, MAX_TICK);
        }
    }
}

/// Bytes allocated on disk under the roots (files, directories and links, each counted once per
/// directory entry; nothing outside the roots is followed).
pub(crate) fn usage(roots: &[PathBuf]) -> u64 {
    roots.iter().map(|r| tree_usage(r)).sum()
}

fn tree_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut bytes = meta.blocks() * 512;
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        bytes += entries
            .flatten()
            .map(|e| tree_usage(&e.path()))
            .sum::<u64>();
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_limit_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("before"), vec![1u8; 1 << 20]).unwrap();
        let watch = DiskWatch::new(vec![dir.path().to_path_buf()], 2 << 20);
        watch.start();
        assert!(!watch.exceeded());
        std::fs::write(dir.path().join("small"), vec![1u8; 1 << 20]).unwrap();
        assert!(!watch.exceeded());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/big"), vec![1u8; 2 << 20]).unwrap();
        assert!(watch.exceeded());
    }
}
