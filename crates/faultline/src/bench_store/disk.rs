//! The disk a prepared corpus takes: every inode below the data directory once, with the cases
//! that link it, so shared store objects count once and a case's share can be told apart.

use anyhow::{Context, Result};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Each inode seen so far: its disk blocks in bytes and the cases (by index) that link it.
#[derive(Default)]
pub struct DiskMap {
    inodes: HashMap<(u64, u64), (u64, Vec<usize>)>,
}

impl DiskMap {
    /// Records everything below `dir` (directories too, as `du` counts them), as linked by
    /// `case` when given, and returns the bytes of the inodes not seen before.
    pub fn walk(&mut self, dir: &Path, case: Option<usize>) -> Result<u64> {
        let mut new_bytes = 0;
        for entry in walkdir::WalkDir::new(dir) {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let meta = entry.metadata()?;
            let (_, linkers) = self
                .inodes
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| {
                    let bytes = meta.blocks() * 512;
                    new_bytes += bytes;
                    (bytes, Vec::new())
                });
            if let Some(case) = case
                && linkers.last() != Some(&case)
            {
                linkers.push(case);
            }
        }
        Ok(new_bytes)
    }

    /// The disk of the `keep` of `cases` cases that take the most, found by dropping, one at a
    /// time, the case whose removal would free the least; inodes no case links always count.
    pub fn heaviest(&self, cases: usize, keep: usize) -> u64 {
        let mut kept = vec![true; cases];
        for _ in keep..cases {
            let mut frees = vec![0u64; cases];
            for (bytes, linkers) in self.inodes.values() {
                let mut kept_linkers = linkers.iter().filter(|c| kept[**c]);
                if let (Some(only), None) = (kept_linkers.next(), kept_linkers.next()) {
                    frees[*only] += bytes;
                }
            }
            let lightest = (0..cases).filter(|c| kept[*c]).min_by_key(|c| frees[*c]);
            if let Some(lightest) = lightest {
                kept[lightest] = false;
            }
        }
        self.inodes
            .values()
            .filter(|(_, linkers)| linkers.is_empty() || linkers.iter().any(|c| kept[*c]))
            .map(|(bytes, _)| bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_use_counts_directories_and_each_linked_file_once_as_du_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        for i in 0..50 {
            let sub = root.join(format!("d{i}/inner"));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join("f"), vec![b'x'; 5000]).unwrap();
        }
        std::fs::write(root.join("shared"), vec![b'y'; 20_000]).unwrap();
        std::fs::hard_link(root.join("shared"), root.join("d0/shared-again")).unwrap();
        std::os::unix::fs::symlink("shared", root.join("d1/link")).unwrap();

        let du = std::process::Command::new("du")
            .arg("-sB1")
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            du.status.success(),
            "{}",
            String::from_utf8_lossy(&du.stderr)
        );
        let du_bytes: u64 = String::from_utf8(du.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();

        let mut map = DiskMap::default();
        assert_eq!(map.walk(&root, None).unwrap(), du_bytes);
        assert_eq!(
            map.walk(&root, Some(0)).unwrap(),
            0,
            "a second walk finds nothing new"
        );
    }

    #[test]
    fn the_heaviest_cases_are_those_whose_removal_frees_the_most() {
        let dir = tempfile::tempdir().unwrap();
        let case_dir = |name: &str, own: usize| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("own"), vec![b'o'; own]).unwrap();
            d
        };
        let big = case_dir("big", 400_000);
        let small = case_dir("small", 40_000);
        let twin = case_dir("twin", 40_000);
        // `small` and `twin` share one large file: dropping either alone frees only its own.
        std::fs::write(small.join("shared"), vec![b's'; 800_000]).unwrap();
        std::fs::hard_link(small.join("shared"), twin.join("shared")).unwrap();

        let mut map = DiskMap::default();
        let mut alone = Vec::new();
        for (i, d) in [&big, &small, &twin].into_iter().enumerate() {
            map.walk(d, Some(i)).unwrap();
            alone.push(DiskMap::default().walk(d, None).unwrap());
        }
        let shared = std::fs::metadata(small.join("shared")).unwrap().blocks() * 512;
        let all = alone[0] + alone[1] + alone[2] - shared;
        assert_eq!(map.heaviest(3, 3), all);
        // `big` has the most bytes of its own, but dropping `small` (or `twin`) frees less: the
        // file they share stays with the other.
        assert_eq!(map.heaviest(3, 2), all - (alone[1] - shared));
        // Of one case, the one holding the shared file takes the most.
        assert_eq!(map.heaviest(3, 1), alone[2]);
    }
}
