//! What a prepared case's templates hold, recorded when they are built and checked before they
//! are trusted.
//!
//! Every grade starts from a copy of a template, so a template that changed after preparation
//! (a bug of the harness, a file edited by hand, or code run during a grade that reached it)
//! would change every later verdict. Preparation records each file's path, type, size,
//! modification and status-change times (`mtime`, `ctime`), permission bits and link target, and
//! a SHA-256 of the files [`crate::workspace`] chooses. Two checks read it:
//!
//! - [`Depth::Metadata`], before and after every grade: metadata only, so it costs a directory
//!   walk. It is sound because nothing outside preparation writes a template: workbenches copy
//!   it, and reach the build outputs they share only through a read-only mount, so no hard link
//!   to a template file exists outside it. Any write then moves `ctime`, which no unprivileged
//!   process can set back (restoring `mtime` moves it too). Files that are links into the object
//!   store, which other cases link too (moving their `ctime`), are checked by inode, and hashed
//!   again whenever their `ctime` moved since this process last hashed them.
//! - [`Depth::Content`], when `prepare` re-checks a case: the metadata and every recorded hash,
//!   which also catches changes that keep the metadata (a corrupted disk).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Format version of `manifest.json`.
pub const MANIFEST_SCHEMA_VERSION: u32 = 1;

/// What kind of directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

/// One recorded directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Its type.
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes (files and links; 0 for directories).
    #[serde(default)]
    pub size: u64,
    /// Modification time in nanoseconds since the epoch (files and links; 0 for directories,
    /// whose times change whenever an entry is added, which the entry list already shows).
    #[serde(default)]
    pub mtime_ns: i64,
    /// Status-change time, likewise: moved by every write, `chmod`, `utimes` or new hard link.
    #[serde(default)]
    pub ctime_ns: i64,
    /// SHA-256 of the contents, for the files chosen at recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where a symbolic link points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The inode of a file that is a link into the object store (see
    /// [`crate::workspace::objects`]), recorded for those alone. Their `ctime` moves whenever
    /// another case links the same object, so they are checked by inode and content instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
}

/// How much [`Manifest::check`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Paths, types, sizes, times, permissions and link targets.
    Metadata,
    /// The metadata and every recorded content hash.
    Content,
}

/// One difference between a directory and its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The path, relative to the prepared case's root.
    pub path: String,
    /// What differs.
    pub what: &'static str,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}

/// The differences as one line, naming at most `max` paths.
pub fn describe(damage: &[Damage], max: usize) -> String {
    let mut parts: Vec<String> = damage.iter().take(max).map(Damage::to_string).collect();
    if damage.len() > max {
        parts.push(format!("and {} more", damage.len() - max));
    }
    parts.join("; ")
}

/// Every recorded directory of a prepared case with its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`MANIFEST_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Directory (relative to the prepared case's root, `/`-separated) -> path below it -> entry.
    pub dirs: BTreeMap<String, BTreeMap<String, Entry>>,
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn nanos(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The entry for a path as it is now, without a hash.
fn observe(path: &Path, meta: &std::fs::Metadata) -> io::Result<Entry> {
    let t = meta.file_type();
    let kind = if t.is_file() {
        Kind::File
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_symlink() {
        Kind::Symlink
    } else {
        Kind::Other
    };
    let timed = kind != Kind::Dir;
    Ok(Entry {
        kind,
        mode: meta.mode() & 0o7777,
        size: if timed { meta.size() } else { 0 },
        mtime_ns: if timed {
            nanos(meta.mtime(), meta.mtime_nsec())
        } else {
            0
        },
        ctime_ns: if timed {
            nanos(meta.ctime(), meta.ctime_nsec())
        } else {
            0
        },
        sha256: None,
        target: if kind == Kind::Symlink {
            Some(std::fs::read_link(path)?.to_string_lossy().into_owned())
        } else {
            None
        },
        inode: (kind == Kind::File).then(|| meta.ino()),
    })
}

/// Files whose content this process has hashed, by inode: the `ctime` it had then and the hash.
/// A stored object is hashed again only when its `ctime` moved (another case linked it, or
/// something wrote to it), so checking it before every grade costs one hash per change.
static VERIFIED: Mutex<BTreeMap<u64, (i64, String)>> = Mutex::new(BTreeMap::new());

/// Remembers that the file `entry` describes held content `sha256` at its current `ctime`.
pub(crate) fn note_verified(entry: &Entry, sha256: &str) {
    if let Some(ino) = entry.inode {
        VERIFIED
            .lock()
            .expect("never poisoned")
            .insert(ino, (entry.ctime_ns, sha256.to_string()));
    }
}

/// Whether the file at `full` (observed as `got`) holds content `sha256`, hashing it only when
/// this process has not seen it so since its last change.
pub(crate) fn holds_content(full: &Path, got: &Entry, sha256: &str) -> io::Result<bool> {
    let key = got.inode.unwrap_or_default();
    let known = VERIFIED.lock().expect("never poisoned").get(&key).cloned();
    if known.is_some_and(|(ctime, sha)| ctime == got.ctime_ns && sha == sha256) {
        return Ok(true);
    }
    let found = hash_file(full)?;
    note_verified(got, &found);
    Ok(found == sha256)
}

/// SHA-256 of a file's contents, never following a link.
pub(crate) fn hash_file(path: &Path) -> io::Result<String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut file = std::fs::File::from(fd);
    let mut h = Sha256::new();
    // Through a small stack buffer: most template files are small, and a zeroed 1 MiB buffer
    // per file cost more than hashing them.
    io::copy(&mut file, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

/// Calls `visit(path, entry, full path)` for every entry below `dir` as it is now (without a
/// hash), in no particular order. Each entry is looked up from its directory's handle
/// (`fstatat`), not from the root, which keeps this walk cheap enough to run twice per grade.
fn walk(
    dir: &Path,
    mut visit: impl FnMut(String, Entry, PathBuf) -> io::Result<()>,
) -> io::Result<()> {
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = pending.pop() {
        for item in std::fs::read_dir(&path)? {
            let item = item?;
            let meta = item.metadata()?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            let below = if rel.is_empty() {
                name.into_owned()
            } else {
                format!("{rel}/{name}")
            };
            let full = item.path();
            let entry = observe(&full, &meta)?;
            if entry.kind == Kind::Dir {
                pending.push((full.clone(), below.clone()));
            }
            visit(below, entry, full)?;
        }
    }
    Ok(())
}

impl Manifest {
    /// Records `dirs` (each below `root`); `hashed(dir, path, entry)` says which regular files get
    /// a content hash (`dir` relative to `root`, `path` relative to `dir`). `objects` maps the
    /// files that are links into the object store (as `dir/path`) to their content's hash: they
    /// are recorded by inode and hash, without `ctime`.
    pub fn record(
        root: &Path,
        dirs: &[&Path],
        hashed: impl Fn(&str, &str, &Entry) -> bool,
        objects: &BTreeMap<String, String>,
    ) -> io::Result<Manifest> {
        let mut out = BTreeMap::new();
        for dir in dirs {
            let name = relative(root, dir);
            let mut entries = BTreeMap::new();
            walk(dir, |path, mut entry, full| {
                if let Some(sha) = objects.get(&format!("{name}/{path}")) {
                    note_verified(&entry, sha);
                    entry.sha256 = Some(sha.clone());
                    entry.ctime_ns = 0;
                } else {
                    entry.inode = None;
                    if entry.kind == Kind::File && hashed(&name, &path, &entry) {
                        entry.sha256 = Some(hash_file(&full)?);
                    }
                }
                entries.insert(path, entry);
                Ok(())
            })?;
            out.insert(name, entries);
        }
        Ok(Manifest {
            schema_version: MANIFEST_SCHEMA_VERSION,
            dirs: out,
        })
    }

    /// SHA-256 of the manifest's canonical JSON: it changes whenever any recorded file would
    /// (its maps are sorted, so equal manifests hash alike).
    pub fn sha256(&self) -> String {
        let bytes = serde_json::to_vec(self).expect("a manifest always serializes");
        hex::encode(Sha256::digest(bytes))
    }

    /// The differences between `dirs` (each below `root`, each recorded) and the record. An
    /// unreadable directory is an error, not damage.
    pub fn check(&self, root: &Path, dirs: &[&Path], depth: Depth) -> io::Result<Vec<Damage>> {
        let mut damage = Vec::new();
        for dir in dirs {
            let name = relative(root, dir);
            let Some(expected) = self.dirs.get(&name) else {
                damage.push(Damage {
                    path: name,
                    what: "not in the manifest",
                });
                continue;
            };
            if !dir.is_dir() {
                damage.push(Damage {
                    path: name,
                    what: "missing",
                });
                continue;
            }
            let at = |p: &str| format!("{name}/{p}");
            let mut seen = 0;
            walk(dir, |path, got, full| {
                match expected.get(&path) {
                    None => damage.push(Damage {
                        path: at(&path),
                        what: "not in the manifest (added since preparation)",
                    }),
                    Some(want) => {
                        if let Some(what) = differs(want, &got, &full, depth)? {
                            damage.push(Damage {
                                path: at(&path),
                                what,
                            });
                        }
                        seen += 1;
                    }
                }
                Ok(())
            })?;
            if seen < expected.len() {
                let mut present = std::collections::BTreeSet::new();
                walk(dir, |path, _, _| {
                    present.insert(path);
                    Ok(())
                })?;
                for path in expected.keys().filter(|p| !present.contains(*p)) {
                    damage.push(Damage {
                        path: at(path),
                        what: "missing",
                    });
                }
            }
        }
        damage.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(damage)
    }
}

/// The first way `got` (found at `full`) differs from `want`, if any.
fn differs(
    want: &Entry,
    got: &Entry,
    full: &Path,
    depth: Depth,
) -> io::Result<Option<&'static str>> {
    let what = if want.kind != got.kind {
        Some("is of another type than at preparation")
    } else if want.target != got.target {
        Some("the link points elsewhere")
    } else if want.size != got.size {
        Some("size changed")
    } else if want.mtime_ns != got.mtime_ns {
        Some("modified (mtime)")
    } else if want.mode != got.mode {
        Some("permissions changed")
    } else if let Some(ino) = want.inode {
        if got.inode != Some(ino) {
            Some("replaced (no longer the stored object it was)")
        } else if let Some(h) = &want.sha256
            && !match depth {
                Depth::Content => hash_file(full)? == *h,
                Depth::Metadata => holds_content(full, got, h)?,
            }
        {
            Some("content changed (the stored object is damaged)")
        } else {
            None
        }
    } else if want.ctime_ns != got.ctime_ns {
        Some("changed in place (ctime moved, though mtime was kept)")
    } else if depth == Depth::Content
        && let Some(h) = &want.sha256
        && *h != hash_file(full)?
    {
        Some("content changed")
    } else {
        None
    };
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, Manifest) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("case");
        let ws = root.join("ws");
        fs::create_dir_all(ws.join("target/deps")).unwrap();
        fs::write(ws.join("target/deps/libdep.rlib"), vec![7u8; 100_000]).unwrap();
        fs::write(ws.join("Cargo.toml"), "[package]\n").unwrap();
        std::os::unix::fs::symlink("Cargo.toml", ws.join("alias")).unwrap();
        let m = Manifest::record(
            &root,
            &[&ws],
            |_, p, _| p != "target/deps/libdep.rlib",
            &BTreeMap::new(),
        )
        .unwrap();
        (d, root, m)
    }

    #[test]
    fn an_untouched_tree_matches_at_both_depths() {
        let (_d, root, m) = setup();
        let ws = root.join("ws");
        assert!(m.dirs["ws"]["Cargo.toml"].sha256.is_some());
        assert!(m.dirs["ws"]["target/deps/libdep.rlib"].sha256.is_none());
        assert_eq!(m.dirs["ws"]["alias"].target.as_deref(), Some("Cargo.toml"));
        for depth in [Depth::Metadata, Depth::Content] {
            assert_eq!(m.check(&root, &[&ws], depth).unwrap(), []);
        }
        let again = Manifest::record(
            &root,
            &[&ws],
            |_, p, _| p != "target/deps/libdep.rlib",
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(again.sha256(), m.sha256());
    }

    #[test]
    fn a_write_that_keeps_size_and_mtime_is_still_seen() {
        let (_d, root, m) = setup();
        let ws = root.join("ws");
        let lib = ws.join("target/deps/libdep.rlib");
        let mtime = filetime::FileTime::from_last_modification_time(&fs::metadata(&lib).unwrap());
        // Let the coarse clock that stamps ctime move on.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&lib, vec![8u8; 100_000]).unwrap();
        filetime::set_file_mtime(&lib, mtime).unwrap();
        let damage = m.check(&root, &[&ws], Depth::Metadata).unwrap();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert_eq!(damage[0].path, "ws/target/deps/libdep.rlib");
        assert!(damage[0].what.contains("ctime"), "{}", damage[0]);
    }

    #[test]
    fn added_removed_and_retyped_entries_are_named() {
        let (_d, root, m) = setup();
        let ws = root.join("ws");
        fs::remove_file(ws.join("alias")).unwrap();
        fs::write(ws.join("alias"), "x").unwrap();
        fs::write(ws.join("extra.rs"), "x").unwrap();
        fs::remove_file(ws.join("Cargo.toml")).unwrap();
        let damage = m.check(&root, &[&ws], Depth::Metadata).unwrap();
        let text = describe(&damage, 10);
        assert!(text.contains("ws/alias: is of another type"), "{text}");
        assert!(text.contains("ws/extra.rs: not in the manifest"), "{text}");
        assert!(text.contains("ws/Cargo.toml: missing"), "{text}");
        assert!(describe(&damage, 1).ends_with("and 2 more"));
    }

    #[test]
    fn a_stored_object_is_checked_by_inode_and_content_not_ctime() {
        let (d, root, _) = setup();
        let ws = root.join("ws");
        let lib = ws.join("target/deps/libdep.rlib");
        let sha = hash_file(&lib).unwrap();
        let objects = BTreeMap::from([("ws/target/deps/libdep.rlib".to_string(), sha)]);
        let m = Manifest::record(&root, &[&ws], |_, _, _| true, &objects).unwrap();
        let entry = &m.dirs["ws"]["target/deps/libdep.rlib"];
        assert!(entry.inode.is_some() && entry.ctime_ns == 0);
        assert!(m.dirs["ws"]["Cargo.toml"].inode.is_none());

        // Another case linking the same object moves its ctime: no damage.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::hard_link(&lib, d.path().join("other-case-link")).unwrap();
        assert_eq!(m.check(&root, &[&ws], Depth::Metadata).unwrap(), []);

        // A write that keeps size and mtime: the moved ctime makes the check hash it again.
        let mtime = filetime::FileTime::from_last_modification_time(&fs::metadata(&lib).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(d.path().join("other-case-link"), vec![8u8; 100_000]).unwrap();
        filetime::set_file_mtime(&lib, mtime).unwrap();
        let damage = m.check(&root, &[&ws], Depth::Metadata).unwrap();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert!(damage[0].what.contains("stored object"), "{}", damage[0]);

        // A file put in the link's place is another inode, whatever it holds.
        fs::remove_file(&lib).unwrap();
        fs::write(&lib, vec![7u8; 100_000]).unwrap();
        filetime::set_file_mtime(&lib, mtime).unwrap();
        let damage = m.check(&root, &[&ws], Depth::Metadata).unwrap();
        assert!(damage[0].what.contains("replaced"), "{}", damage[0]);
    }
}
