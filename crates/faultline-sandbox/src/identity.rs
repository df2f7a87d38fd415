//! The dedicated identity agents and graded code run as: an unprivileged host uid that owns
//! nothing shared.
//!
//! By default bubblewrap maps the sandbox's uid to the uid that started it, which is the
//! harness's: root when the harness runs as root. Inside, that uid owns every file the harness
//! owns, so a command could `chmod u+w` a read-only file that a grading workbench shares with its
//! template by hard link and rewrite the template, or give a file it wrote the set-user-ID bit
//! and leave a set-user-ID-root program on the host.
//!
//! Here the sandbox's uid 1000 is instead host uid `N` ([`DEFAULT_UID`], or
//! `$FAULTLINE_SANDBOX_UID`), which owns only what the harness hands it ([`give_to_sandbox`]):
//! the writable copy a command works in. Files of the harness appear owned by `nobody` and no
//! capability applies to them. Getting there takes two user namespaces, created once per harness
//! process and kept alive by two holder processes:
//!
//! - the *outer* one, owned by `N`, maps host root and `N`. bubblewrap (started as `N`) enters
//!   it to set the sandbox up, with capabilities over files owned by host root, so it can mount
//!   directories that only root may enter (a data directory under `/root`);
//! - the *inner* one, a child of the outer, maps only `N`. bubblewrap switches to it
//!   (`--userns2`) before it runs the command, so nothing the command does can touch an
//!   object of the outer one.
//!
//! Only a process running as `N` in the host's own user namespace could enter the outer
//! namespace and act as root there; the harness's launcher is such a process for the moment
//! between dropping privileges and bubblewrap's first system call, and nothing else ever is.
//! Sandboxed commands are in the inner namespace, and the system-call filter refuses them new
//! user namespaces.
//!
//! A harness that is not root cannot switch uids; its sandboxes then run as its own uid, the
//! protection is reported unavailable, and workbenches copy what they would otherwise share.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The host uid and gid sandboxes run as unless `$FAULTLINE_SANDBOX_UID` says otherwise: high
/// in the range Debian leaves to local administrators' system accounts, and not `nobody`.
pub const DEFAULT_UID: u32 = 64_321;

/// The host ids a dedicated sandbox runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxUser {
    /// Host uid.
    pub uid: u32,
    /// Host gid.
    pub gid: u32,
}

/// The dedicated identity, set up once per process.
#[derive(Debug)]
pub(crate) struct Dedicated {
    pub(crate) user: SandboxUser,
    /// `/proc/PID/ns/user` of the outer namespace's holder.
    pub(crate) outer: PathBuf,
    /// `/proc/PID/ns/user` of the inner namespace's holder.
    pub(crate) inner: PathBuf,
    /// The holders; they exit when their standard input closes, with this process at the latest.
    _holders: Mutex<Vec<Child>>,
}

/// The dedicated identity, or why this machine cannot have one.
pub fn dedicated_user() -> Result<SandboxUser, &'static str> {
    dedicated().map(|d| d.user)
}

pub(crate) fn dedicated() -> Result<&'static Dedicated, &'static str> {
    static DEDICATED: OnceLock<Result<Dedicated, String>> = OnceLock::new();
    DEDICATED
        .get_or_init(set_up)
        .as_ref()
        .map_err(String::as_str)
}

fn set_up() -> Result<Dedicated, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("the harness does not run as root, so it cannot switch to another uid".into());
    }
    let user = chosen_user()?;
    let (outer_holder, outer) = hold(user, Command::new("unshare").args(["--user", "--"]))
        .map_err(|e| format!("cannot create the outer user namespace: {e}"))?;
    let pid = outer_holder.id();
    let map = format!("0 0 1\n1000 {} 1\n", user.uid);
    let gmap = format!("0 0 1\n1000 {} 1\n", user.gid);
    std::fs::write(format!("/proc/{pid}/uid_map"), map)
        .and_then(|()| std::fs::write(format!("/proc/{pid}/gid_map"), gmap))
        .map_err(|e| format!("cannot map the outer user namespace: {e}"))?;
    let (inner_holder, inner) = hold(
        user,
        Command::new("nsenter").args([
            &format!("--user={}", outer.display()),
            "--preserve-credentials",
            "--",
            "unshare",
            "--user",
            "--map-user=1000",
            "--map-group=1000",
            "--",
        ]),
    )
    .map_err(|e| format!("cannot create the inner user namespace: {e}"))?;
    Ok(Dedicated {
        user,
        outer,
        inner,
        _holders: Mutex::new(vec![outer_holder, inner_holder]),
    })
}

/// The uid from `$FAULTLINE_SANDBOX_UID`, or [`DEFAULT_UID`] if no account on this machine has
/// it (an account's files would be the sandbox's).
fn chosen_user() -> Result<SandboxUser, String> {
    if let Some(v) = std::env::var_os("FAULTLINE_SANDBOX_UID") {
        let uid = v
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|u| *u != 0)
            .ok_or_else(|| format!("FAULTLINE_SANDBOX_UID={v:?} is not a non-zero uid"))?;
        return Ok(SandboxUser { uid, gid: uid });
    }
    let taken = |file: &str| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines()
                .any(|l| l.split(':').nth(2) == Some(&DEFAULT_UID.to_string()))
        })
    };
    if taken("/etc/passwd") || taken("/etc/group") {
        return Err(format!(
            "uid or gid {DEFAULT_UID} belongs to an account here; set FAULTLINE_SANDBOX_UID to an \
             unused one"
        ));
    }
    Ok(SandboxUser {
        uid: DEFAULT_UID,
        gid: DEFAULT_UID,
    })
}

/// Starts `cmd` (a program that ends in a new user namespace and runs what follows `--`) as
/// `user`, holding the namespace with a shell that waits on its input; returns the holder and
/// the path of its namespace once it is there.
fn hold(user: SandboxUser, cmd: &mut Command) -> std::io::Result<(Child, PathBuf)> {
    cmd.args(["/bin/sh", "-c", "echo ready && exec cat >/dev/null"])
        .uid(user.uid)
        .gid(user.gid)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    BufReader::new(stdout).read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let out = child.wait_with_output()?;
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let path = PathBuf::from(format!("/proc/{}/ns/user", child.id()));
    Ok((child, path))
}

/// Gives the sandbox's identity the tree at `root` (when sandboxes have one): every directory,
/// and every file and link that is this tree's own. A file with other hard links is left as it
/// is: it is shared with a template, and must stay the harness's and read-only.
///
/// The tree may be in use: a build directory shared by concurrent builds loses temporary files
/// while it is walked. What vanishes during the walk needs no owner; only a missing `root` is an
/// error.
pub fn give_to_sandbox(root: &Path) -> std::io::Result<()> {
    let Ok(d) = dedicated() else {
        return Ok(());
    };
    chown_tree(root, d.user)
}

fn chown_tree(path: &Path, user: SandboxUser) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let child = match entry {
                Ok(entry) => chown_tree(&entry.path(), user),
                Err(e) => Err(e),
            };
            match child {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
    } else if meta.nlink() > 1 {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_files_keep_their_owner() {
        let Ok(d) = dedicated() else {
            return;
        };
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let template = dir.path().join("template");
        std::fs::write(&template, "x").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        std::fs::hard_link(&template, tree.join("shared")).unwrap();
        std::fs::write(tree.join("own"), "y").unwrap();
        give_to_sandbox(&tree).unwrap();
        let uid = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(uid(&tree), d.user.uid);
        assert_eq!(uid(&tree.join("own")), d.user.uid);
        assert_eq!(uid(&tree.join("shared")), 0);
        assert_eq!(uid(&template), 0);
    }

    /// Builds sharing a build directory delete their temporary files while another sandbox's
    /// setup walks it; a file gone mid-walk must not fail that setup (it did, at random, in CI).
    #[test]
    fn a_tree_losing_files_while_it_is_given_away_is_still_given() {
        let Ok(d) = dedicated() else {
            return;
        };
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        let churn = tree.join("churn");
        std::fs::create_dir_all(&churn).unwrap();
        std::fs::write(tree.join("kept"), "x").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churner = {
            let (churn, stop) = (churn.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sub = churn.join(format!("d{}", n % 4));
                    let _ = std::fs::create_dir_all(&sub);
                    for i in 0..50 {
                        let _ = std::fs::write(sub.join(format!("f{i}")), "y");
                    }
                    let _ = std::fs::remove_dir_all(&sub);
                    n += 1;
                }
            })
        };
        let walks: Vec<_> = (0..300).map(|_| give_to_sandbox(&tree)).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churner.join().unwrap();
        let failed: Vec<_> = walks.into_iter().filter_map(Result::err).collect();
        assert!(
            failed.is_empty(),
            "{} walks failed: {:?}",
            failed.len(),
            failed.first()
        );
        let uid = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(uid(&tree.join("kept")), d.user.uid);
        assert!(give_to_sandbox(&dir.path().join("absent")).is_err());
    }
}
