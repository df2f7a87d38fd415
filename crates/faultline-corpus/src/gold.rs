//! The gold patch: the difference between the buggy and the fixed source trees, computed when it
//! is needed and never written into the corpus or a workspace.
//!
//! Only the crate's source files count (everything under `src/`): the version bump in
//! `Cargo.toml`, new upstream tests and changelog entries are left out and listed in
//! [`TreeDiff::excluded`].

use similar::{DiffTag, TextDiff};
use std::collections::BTreeSet;
use std::path::Path;
use walkdir::WalkDir;

/// Whether a path (relative to the crate root, `/`-separated) is a source file the gold patch
/// and a submitted repair may change.
pub fn is_source_path(rel: &str) -> bool {
    rel.starts_with("src/") && !rel.split('/').any(|p| p == ".." || p.is_empty())
}

/// A changed region of one file, in line numbers of both sides (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// First line of the old side that the change covers; for a pure insertion, the line after
    /// which the new lines go (0 for the top of the file).
    pub old_start: u32,
    /// Number of old lines replaced or deleted (0 for a pure insertion).
    pub old_len: u32,
    /// First line of the new side.
    pub new_start: u32,
    /// Number of new lines.
    pub new_len: u32,
}

impl Hunk {
    /// Whether the inclusive old-side line range `start..=end` touches this change. A pure
    /// insertion touches the lines on either side of its insertion point.
    pub fn touches_old(&self, start: u32, end: u32) -> bool {
        let (lo, hi) = if self.old_len == 0 {
            (self.old_start, self.old_start + 1)
        } else {
            (self.old_start, self.old_start + self.old_len - 1)
        };
        start <= hi && end >= lo
    }
}

/// The change to one source file.
#[derive(Debug, Clone)]
pub struct FileDiff {
    /// Path relative to the crate root.
    pub path: String,
    /// Contents in the buggy tree (`None`: the fix added the file).
    pub old: Option<String>,
    /// Contents in the fixed tree (`None`: the fix deleted the file).
    pub new: Option<String>,
    /// Changed regions, without context.
    pub hunks: Vec<Hunk>,
}

/// The difference between two trees (the gold patch, or an agent's changes).
#[derive(Debug, Clone, Default)]
pub struct TreeDiff {
    /// Changed source files, sorted by path.
    pub files: Vec<FileDiff>,
    /// Other paths that differ between the trees and are not part of the patch.
    pub excluded: Vec<String>,
}

/// Why the gold patch could not be computed. A message names its cause, which is therefore not
/// also the error's `source` (a chain printed whole would show it twice).
#[derive(Debug, thiserror::Error)]
pub enum GoldError {
    /// A tree could not be read.
    #[error("reading {path}: {cause}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// A source file is not UTF-8 text.
    #[error("source file {0} is not UTF-8 text; the gold patch only covers text")]
    Binary(String),
}

/// Files that packaging adds and that never belong to a diff.
const PACKAGING_NOISE: &[&str] = &[".cargo_vcs_info.json", ".cargo-ok", "Cargo.toml.orig"];

/// The regular files under `root` (links are not followed); with `unreadable`, entries that
/// cannot be read are listed there instead of failing the walk (an agent's workspace, where a
/// command may have taken permissions away).
fn list_files(
    root: &Path,
    mut unreadable: Option<&mut Vec<String>>,
) -> Result<BTreeSet<String>, GoldError> {
    let mut out = BTreeSet::new();
    let walk = WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| e.depth() != 1 || (e.file_name() != "target" && e.file_name() != ".git"));
    for entry in walk {
        let entry = match (entry, unreadable.as_deref_mut()) {
            (Ok(entry), _) => entry,
            (Err(e), Some(list)) => {
                let path = e.path().unwrap_or(root);
                let rel = path.strip_prefix(root).unwrap_or(path);
                list.push(format!("{} (unreadable)", rel.display()));
                continue;
            }
            (Err(e), None) => {
                return Err(GoldError::Io {
                    path: root.display().to_string(),
                    cause: e.into(),
                });
            }
        };
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(root)
                .expect("walkdir yields paths under its root")
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(rel);
        }
    }
    Ok(out)
}

/// A listed file's bytes. An agent's workspace is one of the trees, so no link is followed: a
/// directory swapped for a link after the listing cannot pull a host file into the diff.
fn read_confined(root: &Path, rel: &str) -> std::io::Result<Vec<u8>> {
    crate::confined::Confined::open(root)?.read(rel)
}

fn read_text(root: &Path, rel: &str) -> Result<String, GoldError> {
    let path = root.join(rel);
    let bytes = read_confined(root, rel).map_err(|cause| GoldError::Io {
        path: path.display().to_string(),
        cause,
    })?;
    String::from_utf8(bytes).map_err(|_| GoldError::Binary(rel.to_string()))
}

/// Computes the gold patch from the buggy tree to the fixed tree: source files only.
pub fn diff_trees(buggy: &Path, fixed: &Path) -> Result<TreeDiff, GoldError> {
    diff_with(buggy, fixed, &is_source_path, false)
}

/// Computes everything an agent changed in a workspace (every file but `target/` and `.git/`);
/// binary files, and files or directories the harness cannot read, are listed in `excluded`
/// instead of failing the diff: what an agent did to its own workspace is never the harness's
/// failure.
pub fn diff_workspace(pristine: &Path, current: &Path) -> Result<TreeDiff, GoldError> {
    diff_with(pristine, current, &|_| true, true)
}

fn diff_with(
    old_root: &Path,
    new_root: &Path,
    include: &dyn Fn(&str) -> bool,
    skip_binary: bool,
) -> Result<TreeDiff, GoldError> {
    let mut diff = TreeDiff::default();
    let old_files = list_files(old_root, None)?;
    let new_files = list_files(new_root, skip_binary.then_some(&mut diff.excluded))?;
    for rel in old_files.union(&new_files) {
        if PACKAGING_NOISE.contains(&rel.as_str()) {
            continue;
        }
        let in_old = old_files.contains(rel);
        let in_new = new_files.contains(rel);
        if in_old
            && in_new
            && read_confined(old_root, rel).ok() == read_confined(new_root, rel).ok()
        {
            continue;
        }
        if !include(rel) {
            diff.excluded.push(rel.clone());
            continue;
        }
        let read = |root: &Path, present: bool| -> Result<Option<String>, GoldError> {
            if present {
                read_text(root, rel).map(Some)
            } else {
                Ok(None)
            }
        };
        let (old, new) = match (read(old_root, in_old), read(new_root, in_new)) {
            (Ok(o), Ok(n)) => (o, n),
            (Err(GoldError::Binary(_)), _) | (_, Err(GoldError::Binary(_))) if skip_binary => {
                diff.excluded.push(format!("{rel} (binary)"));
                continue;
            }
            (_, Err(GoldError::Io { .. })) if skip_binary => {
                diff.excluded.push(format!("{rel} (unreadable)"));
                continue;
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let hunks = hunks_of(old.as_deref().unwrap_or(""), new.as_deref().unwrap_or(""));
        diff.files.push(FileDiff {
            path: rel.clone(),
            old,
            new,
            hunks,
        });
    }
    Ok(diff)
}

fn hunks_of(old: &str, new: &str) -> Vec<Hunk> {
    let diff = TextDiff::from_lines(old, new);
    diff.ops()
        .iter()
        .filter(|op| op.tag() != DiffTag::Equal)
        .map(|op| {
            let o = op.old_range();
            let n = op.new_range();
            Hunk {
                old_start: if o.is_empty() {
                    o.start as u32
                } else {
                    o.start as u32 + 1
                },
                old_len: o.len() as u32,
                new_start: n.start as u32 + 1,
                new_len: n.len() as u32,
            }
        })
        .collect()
}

impl TreeDiff {
    /// Whether the fixed tree differs from the buggy one in any source file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The patch as a unified diff that `git apply` (and `patch -p1`) accept.
    pub fn unified(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            let old = f.old.as_deref().unwrap_or("");
            let new = f.new.as_deref().unwrap_or("");
            out.push_str(&format!("diff --git a/{0} b/{0}\n", f.path));
            match (&f.old, &f.new) {
                (None, Some(_)) => out.push_str("new file mode 100644\n"),
                (Some(_), None) => out.push_str("deleted file mode 100644\n"),
                _ => {}
            }
            let a = if f.old.is_some() {
                format!("a/{}", f.path)
            } else {
                "/dev/null".into()
            };
            let b = if f.new.is_some() {
                format!("b/{}", f.path)
            } else {
                "/dev/null".into()
            };
            let diff = TextDiff::from_lines(old, new);
            let body = diff
                .unified_diff()
                .context_radius(3)
                .header(&a, &b)
                .to_string();
            out.push_str(&body);
        }
        out
    }

    /// The changes to one file, if the patch touches it.
    pub fn file(&self, rel: &str) -> Option<&FileDiff> {
        self.files.iter().find(|f| f.path == rel)
    }

    /// Whether the old-side range `start..=end` of `file` touches a change.
    pub fn touches(&self, file: &str, start: u32, end: u32) -> bool {
        self.file(file)
            .is_some_and(|f| f.hunks.iter().any(|h| h.touches_old(start, end)))
    }

    /// Lines the fix adds (new-side lines of each change), with their file.
    pub fn added_lines(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        for f in &self.files {
            let Some(new) = f.new.as_deref() else {
                continue;
            };
            let lines: Vec<&str> = new.lines().collect();
            for h in &f.hunks {
                let from = h.new_start as usize - 1;
                for line in lines.iter().skip(from).take(h.new_len as usize) {
                    out.push((f.path.as_str(), *line));
                }
            }
        }
        out
    }

    /// Lines of the buggy tree that the fix removes or rewrites, with file and line number.
    pub fn changed_old_lines(&self) -> Vec<(&str, u32, &str)> {
        let mut out = Vec::new();
        for f in &self.files {
            let Some(old) = f.old.as_deref() else {
                continue;
            };
            let lines: Vec<&str> = old.lines().collect();
            for h in &f.hunks {
                for n in h.old_start..h.old_start + h.old_len {
                    if let Some(line) = lines.get(n as usize - 1) {
                        out.push((f.path.as_str(), n, *line));
                    }
                }
            }
        }
        out
    }

    /// Number of lines added plus removed over all files.
    pub fn changed_line_count(&self) -> u32 {
        self.files
            .iter()
            .flat_map(|f| &f.hunks)
            .map(|h| h.old_len + h.new_len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn only_source_files_are_in_the_patch() {
        let a = tree(&[
            ("Cargo.toml", "version = \"1.0.0\"\n"),
            ("src/lib.rs", "fn a() {}\nfn b() { 1 }\nfn c() {}\n"),
            ("CHANGELOG.md", "old\n"),
        ]);
        let b = tree(&[
            ("Cargo.toml", "version = \"1.0.1\"\n"),
            ("src/lib.rs", "fn a() {}\nfn b() { 2 }\nfn c() {}\n"),
            ("src/new.rs", "pub fn n() {}\n"),
            ("CHANGELOG.md", "new\n"),
            ("tests/regress.rs", "#[test] fn t() {}\n"),
        ]);
        let gold = diff_trees(a.path(), b.path()).unwrap();
        let paths: Vec<_> = gold.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["src/lib.rs", "src/new.rs"]);
        assert_eq!(
            gold.excluded,
            ["CHANGELOG.md", "Cargo.toml", "tests/regress.rs"]
        );
        assert_eq!(
            gold.file("src/lib.rs").unwrap().hunks,
            vec![Hunk {
                old_start: 2,
                old_len: 1,
                new_start: 2,
                new_len: 1
            }]
        );
        assert!(gold.touches("src/lib.rs", 1, 2));
        assert!(!gold.touches("src/lib.rs", 3, 3));
        assert_eq!(
            gold.added_lines(),
            vec![
                ("src/lib.rs", "fn b() { 2 }"),
                ("src/new.rs", "pub fn n() {}")
            ]
        );
        assert_eq!(
            gold.changed_old_lines(),
            vec![("src/lib.rs", 2, "fn b() { 1 }")]
        );
    }

    #[test]
    fn a_pure_insertion_touches_its_neighbours() {
        let h = Hunk {
            old_start: 5,
            old_len: 0,
            new_start: 6,
            new_len: 2,
        };
        assert!(h.touches_old(5, 5));
        assert!(h.touches_old(6, 9));
        assert!(!h.touches_old(7, 9));
        assert!(!h.touches_old(1, 4));
    }

    #[test]
    fn the_unified_diff_applies_with_git() {
        let a = tree(&[
            ("src/lib.rs", "one\ntwo\nthree\n"),
            ("src/gone.rs", "bye\n"),
        ]);
        let b = tree(&[
            ("src/lib.rs", "one\n2\nthree\nfour"),
            ("src/new.rs", "hello\n"),
        ]);
        let gold = diff_trees(a.path(), b.path()).unwrap();
        let patch = gold.unified();
        let patch_file = a.path().join("../gold.patch");
        fs::write(&patch_file, &patch).unwrap();
        let status = std::process::Command::new("git")
            .args(["apply", "--unsafe-paths", "-p1"])
            .arg(&patch_file)
            .current_dir(a.path())
            .status()
            .unwrap();
        assert!(status.success(), "git apply rejected:\n{patch}");
        let again = diff_trees(a.path(), b.path()).unwrap();
        assert!(
            again.is_empty(),
            "trees still differ after applying:\n{patch}"
        );
        fs::remove_file(patch_file).unwrap();
    }
}
