//! The object store: one copy, under `<data>/objects/`, of every file that prepared cases may
//! hold alike (vendored sources and the build outputs of dependencies), which their templates
//! hard-link instead of keeping copies of their own.
//!
//! An object is named by its content's SHA-256, its modification time (cargo reads both, so two
//! files are the same object only when both agree) and whether it is executable; it belongs to
//! the harness and only the harness may write it (`0644`, or `0755` for an executable such as a
//! build script: rustc refuses to replace an output whose mode says read-only, even when the
//! output is a link it would replace rather than write through). No sandbox ever holds a link to
//! one in a writable tree: vendored files are mounted read-only, and copies of a template reach
//! its shared build outputs through symbolic links to a read-only mount. An object in use has
//! more than one link (the store's and a template's), so [`ObjectStore::collect_garbage`] removes
//! exactly those no template links.
//!
//! Preparations store objects under a shared lock, the garbage collection under an exclusive one;
//! two preparations that store the same object at once both end up linking the one that won.

use crate::manifest::{Entry, hash_file, holds_content};
use anyhow::{Context, Result};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The modification time given to every vendored file and every build output of a registry
/// dependency before it is stored (2020-01-01): the same for every case, so the same build
/// output of two cases is one object, and never newer than what depends on it, so cargo finds
/// every shared output fresh.
pub const SHARED_MTIME_SECS: i64 = 1_577_836_800;

/// The name of the lock file in the store.
const LOCK: &str = ".lock";

/// The content-addressed store of files that prepared cases share (see the module docs).
#[derive(Debug, Clone)]
pub struct ObjectStore {
    dir: PathBuf,
}

/// What [`ObjectStore::collect_garbage`] removed, or what [`ObjectStore::usage`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Objects {
    /// How many objects.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl ObjectStore {
    /// The store at `dir` (created when the first object is stored).
    pub fn new(dir: PathBuf) -> ObjectStore {
        ObjectStore { dir }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Holds the store's lock until the file is dropped: shared while a preparation stores
    /// objects, exclusive while the garbage collection removes them.
    pub fn lock(&self, exclusive: bool) -> Result<fs::File> {
        fs::create_dir_all(&self.dir)?;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(LOCK))
            .context("opening the object store's lock")?;
        if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        }
        .context("locking the object store")?;
        Ok(file)
    }

    /// Where the object of content `sha256` with modification time `mtime_ns` lives.
    fn path(&self, sha256: &str, mtime_ns: i64, executable: bool) -> PathBuf {
        let kind = if executable { ".x" } else { "" };
        self.dir
            .join(&sha256[..2])
            .join(format!("{}.{mtime_ns}{kind}", &sha256[2..]))
    }

    /// Replaces the regular file `file` with a hard link to the object of the same content and
    /// modification time, storing it first (writable by its owner alone) when the store has none.
    /// An object found damaged (its content no longer its name) is taken out of the store and
    /// replaced by this file. Returns the content's SHA-256. Call it under [`ObjectStore::lock`].
    pub fn intern(&self, file: &Path) -> Result<String> {
        let sha = hash_file(file).with_context(|| format!("hashing {}", file.display()))?;
        let meta = fs::symlink_metadata(file)?;
        let mtime_ns = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
        let executable = meta.mode() & 0o111 != 0;
        let object = self.path(&sha, mtime_ns, executable);
        // A few rounds: another process may store, or the garbage collection remove, the object
        // between two steps.
        for _ in 0..4 {
            match fs::symlink_metadata(&object) {
                Ok(found) if found.ino() == meta.ino() && found.dev() == meta.dev() => {
                    return Ok(sha);
                }
                Ok(found) => {
                    if !found.is_file() || !holds_content(&object, &observed(&found), &sha)? {
                        tracing::warn!("{}: damaged, taken out of the store", object.display());
                        remove_if_present(&object)?;
                        continue;
                    }
                    let tmp = file.with_file_name(format!(
                        ".{}.object",
                        file.file_name().unwrap_or_default().to_string_lossy()
                    ));
                    remove_if_present(&tmp)?;
                    match fs::hard_link(&object, &tmp) {
                        Ok(()) => {
                            fs::rename(&tmp, file)?;
                            return Ok(sha);
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e).context("linking a stored object"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let mode = if executable { 0o755 } else { 0o644 };
                    fs::set_permissions(file, fs::Permissions::from_mode(mode))?;
                    fs::create_dir_all(object.parent().expect("below the store"))?;
                    match fs::hard_link(file, &object) {
                        Ok(()) => return Ok(sha),
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                        Err(e) => return Err(e).context("storing an object"),
                    }
                }
                Err(e) => return Err(e).context("reading the object store"),
            }
        }
        anyhow::bail!(
            "{}: the object store kept changing while it was stored",
            file.display()
        )
    }

    /// Removes every object that no prepared case links any more (its only link is the
    /// store's), under the exclusive lock, so that no preparation links one meanwhile.
    pub fn collect_garbage(&self) -> Result<Objects> {
        if !self.dir.is_dir() {
            return Ok(Objects::default());
        }
        let _lock = self.lock(true)?;
        let mut removed = Objects::default();
        self.each_object(|path, meta| {
            if meta.nlink() == 1 {
                remove_if_present(path)?;
                removed.count += 1;
                removed.bytes += meta.len();
            }
            Ok(())
        })?;
        Ok(removed)
    }

    /// How many objects the store holds, and their bytes.
    pub fn usage(&self) -> Result<Objects> {
        let mut found = Objects::default();
        if self.dir.is_dir() {
            self.each_object(|_, meta| {
                found.count += 1;
                found.bytes += meta.len();
                Ok(())
            })?;
        }
        Ok(found)
    }

    fn each_object(&self, mut visit: impl FnMut(&Path, &fs::Metadata) -> Result<()>) -> Result<()> {
        for shard in fs::read_dir(&self.dir)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for object in fs::read_dir(shard.path())? {
                let object = object?;
                let meta = object.metadata()?;
                if meta.is_file() {
                    visit(&object.path(), &meta)?;
                }
            }
        }
        Ok(())
    }
}

/// What the manifest's content check needs of a file: its inode and `ctime`.
fn observed(meta: &fs::Metadata) -> Entry {
    Entry {
        kind: crate::manifest::Kind::File,
        mode: meta.mode() & 0o7777,
        size: meta.len(),
        mtime_ns: 0,
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        sha256: None,
        target: None,
        inode: Some(meta.ino()),
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Gives `path` the shared modification time ([`SHARED_MTIME_SECS`]).
pub fn set_shared_mtime(path: &Path) -> io::Result<()> {
    let t = filetime::FileTime::from_unix_time(SHARED_MTIME_SECS, 0);
    filetime::set_symlink_file_times(path, t, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        set_shared_mtime(&p).unwrap();
        p
    }

    #[test]
    fn equal_files_become_one_read_only_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::new(dir.path().join("objects"));
        let _lock = store.lock(false).unwrap();
        let a = file(dir.path(), "a", b"same bytes");
        let b = file(dir.path(), "b", b"same bytes");
        let c = file(dir.path(), "c", b"other bytes");
        let sha = store.intern(&a).unwrap();
        assert_eq!(store.intern(&b).unwrap(), sha);
        store.intern(&c).unwrap();
        let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
        assert_eq!(ma.ino(), mb.ino());
        assert_eq!(ma.nlink(), 3);
        assert_eq!(ma.mode() & 0o777, 0o644);
        assert_eq!(store.usage().unwrap().count, 2);
        // Interning a file already linked changes nothing.
        assert_eq!(store.intern(&a).unwrap(), sha);
        assert_eq!(fs::metadata(&a).unwrap().nlink(), 3);
    }

    #[test]
    fn a_different_modification_time_is_another_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::new(dir.path().join("objects"));
        let a = file(dir.path(), "a", b"bytes");
        let b = dir.path().join("b");
        fs::write(&b, b"bytes").unwrap();
        store.intern(&a).unwrap();
        store.intern(&b).unwrap();
        assert_ne!(
            fs::metadata(&a).unwrap().ino(),
            fs::metadata(&b).unwrap().ino()
        );
        assert_eq!(store.usage().unwrap().count, 2);
    }

    #[test]
    fn a_damaged_object_is_replaced_not_linked() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::new(dir.path().join("objects"));
        let a = file(dir.path(), "a", b"good bytes");
        let sha = store.intern(&a).unwrap();
        // Damage through the first link, keeping size and modification time.
        fs::write(&a, b"evil bytes").unwrap();
        set_shared_mtime(&a).unwrap();
        let b = file(dir.path(), "b", b"good bytes");
        assert_eq!(store.intern(&b).unwrap(), sha);
        assert_eq!(fs::read(&b).unwrap(), b"good bytes");
        assert_ne!(
            fs::metadata(&a).unwrap().ino(),
            fs::metadata(&b).unwrap().ino()
        );
        assert_eq!(
            fs::read(store.path(&sha, SHARED_MTIME_SECS * 1_000_000_000, false)).unwrap(),
            b"good bytes"
        );
    }

    #[test]
    fn garbage_collection_keeps_every_linked_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::new(dir.path().join("objects"));
        let kept = file(dir.path(), "kept", b"in use");
        let gone = file(dir.path(), "gone", b"no longer used");
        store.intern(&kept).unwrap();
        store.intern(&gone).unwrap();
        fs::remove_file(&gone).unwrap();
        let removed = store.collect_garbage().unwrap();
        assert_eq!(
            removed,
            Objects {
                count: 1,
                bytes: 14
            }
        );
        assert_eq!(store.usage().unwrap().count, 1);
        assert_eq!(fs::read(&kept).unwrap(), b"in use");
        assert_eq!(store.collect_garbage().unwrap(), Objects::default());
    }
}
