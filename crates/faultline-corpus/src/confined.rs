//! File operations that cannot leave a directory tree.
//!
//! The grader runs on the host, often as root, and edits files of workbenches whose contents a
//! submitted patch or sandboxed code chose. A path inside such a tree may be a symbolic link to any
//! host file, or a hard link to a file shared with other trees, or a FIFO that blocks whoever
//! opens it. [`Confined`] resolves every path one component at a time from a directory handle,
//! refusing symbolic links (`O_NOFOLLOW`), opens only regular files for reading, and writes by
//! creating a new file and renaming it over the old name, so it never writes into an existing
//! inode. Every host-side edit of a workbench goes through it.

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// A directory tree that file operations cannot leave.
#[derive(Debug)]
pub struct Confined {
    root: OwnedFd,
    shown: PathBuf,
}

/// What [`Confined::read_dir`] reports of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// Whether it is a directory (symbolic links never count as one).
    pub is_dir: bool,
}

/// A path [`Confined`] will not use: a symbolic link, a file that is not regular, or a path
/// that is not plainly below the root. Inside the `io::Error`s it returns (see [`is_refusal`]),
/// so a caller can tell what the tree holds from a failure of the machine.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", .path.display())]
pub struct Refused {
    /// The path.
    pub path: PathBuf,
    /// Why it is refused.
    pub why: &'static str,
}

/// Whether an error of [`Confined`] is a [`Refused`] path.
pub fn is_refusal(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Refused>())
}

fn refused(path: &Path, why: &'static str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        Refused {
            path: path.to_path_buf(),
            why,
        },
    )
}

fn named(path: &Path, e: rustix::io::Errno) -> io::Error {
    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
        return refused(
            path,
            "is a symbolic link or not a directory, and the grader follows no link",
        );
    }
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Confined {
    /// Opens the tree at `root`. The root itself is trusted (the caller made it); only paths
    /// below it are checked.
    pub fn open(root: &Path) -> io::Result<Confined> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| named(root, e))?;
        Ok(Confined {
            root: fd,
            shown: root.to_path_buf(),
        })
    }

    /// The path below the root as names to walk: relative, with no `..`.
    fn names<'a>(&self, rel: &'a Path) -> io::Result<Vec<&'a OsStr>> {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n),
                Component::CurDir => {}
                _ => return Err(refused(rel, "not a plain path below the workbench")),
            }
        }
        if names.is_empty() {
            return Err(refused(rel, "names no file"));
        }
        Ok(names)
    }

    /// The directory holding `rel`, opened without following links, and the last name.
    fn parent<'a>(&self, rel: &'a Path, create: bool) -> io::Result<(OwnedFd, &'a OsStr)> {
        let names = self.names(rel)?;
        let (last, dirs) = names.split_last().expect("at least one name");
        let mut dir = rustix::io::dup(&self.root)?;
        let mut walked = PathBuf::new();
        for name in dirs {
            walked.push(name);
            if create {
                match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(named(&self.shown.join(&walked), e)),
                }
            }
            dir = rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty())
                .map_err(|e| named(&self.shown.join(&walked), e))?;
        }
        Ok((dir, last))
    }

    /// Opens a regular file for reading; anything else (a link, a FIFO, a directory) is refused.
    fn open_regular(&self, rel: &Path) -> io::Result<std::fs::File> {
        let (dir, name) = self.parent(rel, false)?;
        let shown = self.shown.join(rel);
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| named(&shown, e))?;
        let stat = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(refused(&shown, "is not a regular file"));
        }
        Ok(std::fs::File::from(fd))
    }

    /// The contents of a regular file.
    pub fn read(&self, rel: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.open_regular(rel.as_ref())?.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// The contents of a regular file as UTF-8 text.
    pub fn read_to_string(&self, rel: impl AsRef<Path>) -> io::Result<String> {
        let rel = rel.as_ref();
        String::from_utf8(self.read(rel)?).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not UTF-8 text", self.shown.join(rel).display()),
            )
        })
    }

    /// Whether `rel` is a regular file (not a link to one).
    pub fn is_file(&self, rel: impl AsRef<Path>) -> bool {
        let Ok((dir, name)) = self.parent(rel.as_ref(), false) else {
            return false;
        };
        rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::RegularFile)
    }

    /// Replaces (or creates) `rel` with a new regular file holding `bytes`, creating missing
    /// directories. Whatever was at that name (a link, a file with other names elsewhere) is
    /// replaced, never written through.
    pub fn write(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> io::Result<()> {
        let rel = rel.as_ref();
        let (dir, name) = self.parent(rel, true)?;
        let mut tmp_name = b".faultline-".to_vec();
        tmp_name.extend_from_slice(name.as_bytes());
        let tmp = OsStr::from_bytes(&tmp_name);
        match rustix::fs::unlinkat(&dir, tmp, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(named(&self.shown.join(rel), e)),
        }
        let fd = rustix::fs::openat(
            &dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| named(&self.shown.join(rel), e))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        drop(file);
        rustix::fs::renameat(&dir, tmp, &dir, name).map_err(|e| named(&self.shown.join(rel), e))
    }

    /// Appends `bytes` to a regular file (by writing the whole new text, see [`Confined::write`]).
    pub fn append(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> io::Result<()> {
        let rel = rel.as_ref();
        let mut text = self.read(rel)?;
        text.extend_from_slice(bytes);
        self.write(rel, &text)
    }

    /// Moves `rel` (a file, or a link itself, never what it points to) to `to_rel` in the tree
    /// `to`, creating missing directories there and replacing what is at that name. A rename
    /// keeps the file's modification time.
    pub fn rename_to(
        &self,
        rel: impl AsRef<Path>,
        to: &Confined,
        to_rel: impl AsRef<Path>,
    ) -> io::Result<()> {
        let (rel, to_rel) = (rel.as_ref(), to_rel.as_ref());
        let (from_dir, from_name) = self.parent(rel, false)?;
        let (to_dir, to_name) = to.parent(to_rel, true)?;
        rustix::fs::renameat(&from_dir, from_name, &to_dir, to_name)
            .map_err(|e| named(&self.shown.join(rel), e))
    }

    /// Removes a file or link (never what a link points to).
    pub fn remove_file(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let rel = rel.as_ref();
        let (dir, name) = self.parent(rel, false)?;
        rustix::fs::unlinkat(&dir, name, AtFlags::empty())
            .map_err(|e| named(&self.shown.join(rel), e))
    }

    /// Creates a directory and its missing parents.
    pub fn create_dir_all(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let rel = rel.as_ref();
        let (dir, name) = self.parent(rel, true)?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(named(&self.shown.join(rel), e)),
        }
        rustix::fs::openat(&dir, name, DIR_FLAGS, Mode::empty())
            .map(drop)
            .map_err(|e| named(&self.shown.join(rel), e))
    }

    /// The entries of a directory (sorted by name); a missing directory has none.
    pub fn read_dir(&self, rel: impl AsRef<Path>) -> io::Result<Vec<DirEntry>> {
        let rel = rel.as_ref();
        let (parent, name) = self.parent(rel, false)?;
        let dir = match rustix::fs::openat(&parent, name, DIR_FLAGS, Mode::empty()) {
            Ok(d) => d,
            Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
            Err(e) => return Err(named(&self.shown.join(rel), e)),
        };
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
                }
                t => t == FileType::Directory,
            };
            out.push(DirEntry {
                name: String::from_utf8_lossy(name).into_owned(),
                is_dir,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes a directory and everything in it, following no link; a missing one is no error.
    pub fn remove_dir_all(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let rel = rel.as_ref();
        for entry in self.read_dir(rel)? {
            let child = rel.join(&entry.name);
            if entry.is_dir {
                self.remove_dir_all(&child)?;
            } else {
                self.remove_file(&child)?;
            }
        }
        let (dir, name) = self.parent(rel, false)?;
        match rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(named(&self.shown.join(rel), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, symlink};

    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("bench");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("src")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(root.join("src/lib.rs"), "fn a() {}\n").unwrap();
        fs::write(outside.join("host.rs"), "host\n").unwrap();
        (dir, root, outside)
    }

    #[test]
    fn plain_files_are_read_written_and_removed() {
        let (_d, root, _) = tree();
        let c = Confined::open(&root).unwrap();
        assert_eq!(c.read_to_string("src/lib.rs").unwrap(), "fn a() {}\n");
        c.append("src/lib.rs", b"fn b() {}\n").unwrap();
        assert_eq!(
            fs::read_to_string(root.join("src/lib.rs")).unwrap(),
            "fn a() {}\nfn b() {}\n"
        );
        c.write("tests/new/t.rs", b"t").unwrap();
        assert!(c.is_file("tests/new/t.rs"));
        assert_eq!(
            c.read_dir("tests").unwrap(),
            [DirEntry {
                name: "new".into(),
                is_dir: true
            }]
        );
        c.remove_dir_all("tests").unwrap();
        assert!(!root.join("tests").exists());
        c.remove_file("src/lib.rs").unwrap();
        assert!(!c.is_file("src/lib.rs"));
        assert!(c.read_dir("missing").unwrap().is_empty());
    }

    #[test]
    fn links_out_of_the_tree_are_never_followed() {
        let (_d, root, outside) = tree();
        let host = outside.join("host.rs");
        symlink(&host, root.join("src/leak.rs")).unwrap();
        symlink(&outside, root.join("src/dir")).unwrap();
        let c = Confined::open(&root).unwrap();
        let err = c.read("src/leak.rs").unwrap_err();
        assert!(is_refusal(&err), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(c.read("src/dir/host.rs").is_err_and(|e| is_refusal(&e)));
        assert!(c.write("src/dir/host.rs", b"pwned").is_err());
        assert!(c.append("src/leak.rs", b"pwned").is_err());
        assert!(!c.is_file("src/leak.rs"));
        assert!(c.remove_dir_all("src/dir").is_err());
        // Writing the name replaces the link itself.
        c.write("src/leak.rs", b"mine").unwrap();
        assert_eq!(fs::read_to_string(&host).unwrap(), "host\n");
        assert_eq!(
            fs::read_to_string(root.join("src/leak.rs")).unwrap(),
            "mine"
        );
        for bad in ["../outside/host.rs", "/etc/passwd", ""] {
            assert!(c.read(bad).is_err(), "{bad}");
            assert!(c.write(bad, b"x").is_err(), "{bad}");
        }
        assert_eq!(fs::read_to_string(&host).unwrap(), "host\n");
    }

    #[test]
    fn a_rename_moves_the_link_itself_and_keeps_times() {
        let (_d, root, outside) = tree();
        let store = outside.join("store");
        fs::create_dir_all(&store).unwrap();
        symlink(&outside, root.join("src/dir")).unwrap();
        let c = Confined::open(&root).unwrap();
        let s = Confined::open(&store).unwrap();
        let before = fs::metadata(root.join("src/lib.rs")).unwrap().mtime_nsec();
        c.rename_to("src/lib.rs", &s, "0").unwrap();
        assert!(!root.join("src/lib.rs").exists());
        s.rename_to("0", &c, "src/lib.rs").unwrap();
        let after = fs::metadata(root.join("src/lib.rs")).unwrap().mtime_nsec();
        assert_eq!(before, after);
        // A destination below a link is refused, so nothing lands outside the tree.
        s.write("1", b"x").unwrap();
        assert!(s.rename_to("1", &c, "src/dir/planted.rs").is_err());
        assert!(!outside.join("planted.rs").exists());
        // Moving a link moves the link, and its target stays where it is.
        c.rename_to("src/dir", &s, "2").unwrap();
        assert!(fs::symlink_metadata(store.join("2")).unwrap().is_symlink());
        assert!(outside.join("host.rs").exists());
    }

    #[test]
    fn a_hard_link_is_replaced_not_written_through() {
        let (_d, root, outside) = tree();
        let host = outside.join("host.rs");
        fs::hard_link(&host, root.join("src/shared.rs")).unwrap();
        let c = Confined::open(&root).unwrap();
        c.write("src/shared.rs", b"mine").unwrap();
        assert_eq!(fs::read_to_string(&host).unwrap(), "host\n");
        assert_eq!(fs::metadata(&host).unwrap().nlink(), 1);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_d, root, _) = tree();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("src/pipe.rs"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let c = Confined::open(&root).unwrap();
        let err = c.read("src/pipe.rs").unwrap_err();
        assert!(is_refusal(&err), "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
