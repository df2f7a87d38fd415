//! bubblewrap's command line: what the installed version supports, the sandbox's own `/etc`, and
//! the namespaces, mounts and command of one sandbox.

use crate::reap::inheritable_fds;
use crate::roles::{RESTRICT_FLAG, RESTRICT_ROLE};
use crate::session::SUPERVISOR_GUEST;
use crate::spec::TOOLCHAIN_GUEST;
use crate::{Sandbox, SandboxError};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::OnceLock;

/// Files from the host's `/etc` that programs inside need (dynamic linker cache, name service,
/// time zone, shell start-up, OpenSSL's configuration), copied into the sandbox's own `/etc`.
/// Nothing else of the host's `/etc` is visible.
const ETC_FILES: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "bash.bashrc",
    "inputrc",
    "profile",
    "ssl/openssl.cnf",
];

/// Directories of the host's `/etc` mounted read-only in the sandbox's: hundreds of small
/// entries each (Debian's alternatives links, the CA certificates), cheaper to mount than to
/// copy.
const ETC_DIRS: &[&str] = &["alternatives", "ssl/certs"];

/// What the installed bubblewrap and kernel support beyond the basics, found once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Features {
    /// `--disable-userns` (bubblewrap 0.8, and a kernel with per-namespace user limits).
    pub(crate) disable_userns: bool,
    /// `--size` before `--tmpfs` (bubblewrap 0.7).
    pub(crate) tmpfs_size: bool,
}

/// Probes the features by running bubblewrap; `None` when bubblewrap cannot run at all, in
/// which case every feature is used and the first command reports the real problem.
pub(crate) fn features() -> Option<Features> {
    static FEATURES: OnceLock<Option<Features>> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        let runs = |extra: &[&str]| {
            let mut args = vec!["--unshare-all", "--unshare-user"];
            args.extend_from_slice(extra);
            args.extend([
                "--ro-bind",
                "/usr",
                "/usr",
                "--symlink",
                "usr/bin",
                "/bin",
                "--symlink",
                "usr/lib",
                "/lib",
            ]);
            if Path::new("/usr/lib64").exists() {
                args.extend(["--symlink", "usr/lib64", "/lib64"]);
            }
            args.extend(["--", "/usr/bin/true"]);
            std::process::Command::new("bwrap")
                .args(&args)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let disable = ["--disable-userns"];
        let size = ["--size", "1048576", "--tmpfs", "/tmp"];
        if runs(&[&disable[..], &size[..]].concat()) {
            return Some(Features {
                disable_userns: true,
                tmpfs_size: true,
            });
        }
        if !runs(&[]) {
            return None;
        }
        Some(Features {
            disable_userns: runs(&disable),
            tmpfs_size: runs(&size),
        })
    })
}

/// What the sandbox `/etc` directories in the host's temporary directory are named; a killed
/// process leaves its own behind, which a later process removes ([`sweep_stale_etc`]).
const ETC_PREFIX: &str = "faultline-sandbox-etc-";

/// How old an unlocked `/etc` directory must be before a sweep removes it: a directory is
/// locked right after it is made, so a younger one may be in the moment between the two.
const ETC_SWEEP_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// A sandbox's own `/etc` on the host, locked (`flock`) for as long as it lives: the lock dies
/// with the process however it ends, which tells a sweep the directory is left over.
#[derive(Debug)]
pub(crate) struct EtcDir {
    // Dropped in order: the directory is removed before its lock is released.
    dir: tempfile::TempDir,
    _lock: std::fs::File,
}

impl EtcDir {
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Makes the sandbox's `/etc`: one prepared directory mounted as a whole (a bind mount per file
/// made a third of bubblewrap's start-up time), with its own accounts and hosts. The first call
/// in a process removes what killed processes left.
pub(crate) fn make_etc() -> Result<EtcDir, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let tmp = std::env::temp_dir();
    SWEPT.call_once(|| {
        sweep_stale_etc(&tmp, ETC_SWEEP_AGE);
    });
    let dir = tempfile::Builder::new()
        .prefix(ETC_PREFIX)
        .tempdir_in(&tmp)?;
    let lock = std::fs::File::open(dir.path())?;
    lock.try_lock().map_err(std::io::Error::from)?;
    let etc = EtcDir { dir, _lock: lock };
    std::fs::set_permissions(etc.path(), std::fs::Permissions::from_mode(0o755))?;
    for dir in ETC_DIRS {
        // Mount points: the mounted /etc is read-only, so bubblewrap cannot make them.
        std::fs::create_dir_all(etc.path().join(dir))?;
    }
    for f in ETC_FILES {
        copy_public(&Path::new("/etc").join(f), &etc.path().join(f))?;
    }
    std::fs::write(
        etc.path().join("passwd"),
        "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000:agent:/tmp/home:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    )?;
    std::fs::write(
        etc.path().join("group"),
        "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n",
    )?;
    std::fs::write(
        etc.path().join("hosts"),
        "127.0.0.1 localhost sandbox\n::1 localhost\n",
    )?;
    Ok(etc)
}

/// Removes the `/etc` directories in `tmp` that no process holds and that are older than
/// `min_age`; how many it removed. Errors (another user's directory, a race with a second
/// sweep) leave a directory where it is.
fn sweep_stale_etc(tmp: &Path, min_age: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(ETC_PREFIX) {
            continue;
        }
        let Ok(dir) = std::fs::File::open(entry.path()) else {
            continue;
        };
        let old = dir
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if old && dir.try_lock().is_ok() && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Copies a file, symbolic link or directory tree, leaving out whatever not every user of the
/// host may read (such as `/etc/ssl/private`); a missing source is skipped.
fn copy_public(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(from) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
    }
    if meta.permissions().mode() & 0o004 == 0 {
        return Ok(());
    }
    if meta.is_dir() {
        std::fs::create_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_public(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if meta.is_file() {
        std::fs::copy(from, to)?;
    }
    Ok(())
}

/// A bubblewrap command line under construction.
struct Args {
    v: Vec<String>,
    /// Whether this bubblewrap takes `--size`.
    sizes: bool,
}

impl Args {
    fn push(&mut self, parts: &[&str]) {
        self.v.extend(parts.iter().map(|s| s.to_string()));
    }

    /// A tmpfs at `dir`, capped at `size` bytes where bubblewrap can.
    fn tmpfs(&mut self, size: Option<u64>, dir: &str) {
        if let (Some(bytes), true) = (size, self.sizes) {
            self.push(&["--size", &bytes.to_string()]);
        }
        self.push(&["--tmpfs", dir]);
    }
}

impl Sandbox {
    /// Namespaces, limits and mounts. For a session (`session`: its supervisor binary on the
    /// host), the supervisor runs as PID 1 instead of under bubblewrap's own init.
    pub(crate) fn layout_args(&self, session: Option<&Path>) -> Vec<String> {
        let features = self.features.unwrap_or(Features {
            disable_userns: true,
            tmpfs_size: true,
        });
        let limits = &self.spec.limits;
        let mut a = Args {
            v: Vec::with_capacity(80),
            sizes: features.tmpfs_size,
        };
        if self.protections.dedicated_identity.is_active() {
            // The launcher adds the user namespaces (`--userns`, `--userns2`).
            a.push(&[
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ]);
            if !self.spec.network {
                a.push(&["--unshare-net"]);
            }
        } else {
            a.push(&["--unshare-all", "--unshare-user"]);
            if features.disable_userns {
                a.push(&["--disable-userns"]);
            }
            if self.spec.network {
                a.push(&["--share-net"]);
            }
        }
        a.push(&[
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--hostname",
            "sandbox",
        ]);
        if session.is_some() {
            a.push(&["--as-pid-1"]);
        }
        a.push(&[
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--symlink",
            "usr/lib",
            "/lib",
        ]);
        if Path::new("/usr/lib64").exists() {
            a.push(&["--symlink", "usr/lib64", "/lib64"]);
        }
        // Without the dedicated identity the sandbox's uid is the harness's on the host, root
        // when the harness runs as root, and the kernel lets root's uid write most sysctls
        // without any capability: a command could set the host's kernel.core_pattern to a
        // program of its own and have the kernel run it as root. Every value read there is the
        // reader's own namespace's, so a read-only view of the host's /proc/sys is the same
        // view, frozen.
        a.push(&["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]);
        // bubblewrap's /dev is an uncapped tmpfs; give /dev/shm a capped one of its own and
        // freeze the rest (device nodes stay usable: a read-only mount only stops writes to
        // files and directories).
        a.push(&["--dev", "/dev"]);
        a.tmpfs(limits.shm_bytes, "/dev/shm");
        a.push(&["--remount-ro", "/dev"]);
        a.tmpfs(limits.tmp_bytes, "/tmp");
        a.push(&["--dir", "/tmp/home"]);
        a.push(&["--ro-bind", &self.etc.path().to_string_lossy(), "/etc"]);
        for dir in ETC_DIRS {
            a.push(&[
                "--ro-bind-try",
                &format!("/etc/{dir}"),
                &format!("/etc/{dir}"),
            ]);
        }
        if let Some(tc) = &self.spec.toolchain {
            a.push(&["--ro-bind", &tc.sysroot.to_string_lossy(), TOOLCHAIN_GUEST]);
        }
        if let Some(bin) = session.or(self.supervisor.as_deref()) {
            a.push(&["--ro-bind", &bin.to_string_lossy(), SUPERVISOR_GUEST]);
        }
        for t in &self.spec.tmpfs {
            a.tmpfs(limits.tmpfs_bytes, t);
        }
        for m in &self.spec.mounts {
            let flag = if m.writable { "--bind" } else { "--ro-bind" };
            a.push(&[flag, &m.host.to_string_lossy(), &m.guest]);
        }
        if let (Some(relay), None) = (&self.spec.relay, session) {
            a.push(&[
                "--ro-bind",
                &relay.socket.to_string_lossy(),
                crate::relay::RELAY_SOCKET_GUEST,
            ]);
        }
        // The root itself is a private tmpfs; freeze it so only the listed mounts are writable.
        a.push(&["--remount-ro", "/"]);
        a.v
    }

    /// The supervisor's own options when writes are restricted: the flag, and the paths its
    /// commands may write to besides `/tmp` and `/dev`.
    pub(crate) fn write_options(&self) -> Vec<String> {
        if !self.protections.write_restriction.is_active() {
            return Vec::new();
        }
        let mut options = vec![RESTRICT_FLAG.to_string()];
        for p in self.spec.writable_guest_paths() {
            options.extend(["--write".to_string(), p]);
        }
        options
    }

    /// The whole bubblewrap invocation of one command (or of a session's supervisor).
    pub(crate) fn invocation(
        &self,
        session: Option<&Path>,
        env: &BTreeMap<String, String>,
        workdir: Option<&str>,
        argv: &[String],
    ) -> Invocation {
        let mut a = self.layout_args(session);
        let mut all = self.spec.env.clone();
        all.extend(env.clone());
        for (k, v) in all {
            a.extend(["--setenv".to_string(), k, v]);
        }
        let workdir = workdir.unwrap_or(&self.spec.workdir);
        a.extend(["--chdir".to_string(), workdir.to_string(), "--".to_string()]);
        let command_at = a.len();
        if self.supervisor.is_none() {
            // Without the launcher, which closes what it holds itself, the harness's own
            // inherited descriptors are closed here.
            a.extend(close_fds_prefix(&inheritable_fds()));
        }
        let restrict = self.write_options();
        if !restrict.is_empty() && session.is_none() {
            a.extend([SUPERVISOR_GUEST.to_string(), RESTRICT_ROLE.to_string()]);
            a.extend(restrict);
            a.push("--".to_string());
        }
        if let (Some(relay), None, Some(_)) = (&self.spec.relay, session, &self.supervisor) {
            a.push(SUPERVISOR_GUEST.to_string());
            a.extend(crate::relay::args(relay.port));
        }
        a.extend(argv.iter().cloned());
        Invocation {
            args: a,
            command_at,
        }
    }
}

/// bubblewrap's arguments, and where in them the command starts (the launcher puts what closes
/// its descriptors there).
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    pub(crate) args: Vec<String>,
    pub(crate) command_at: usize,
}

/// A command-line prefix that closes `fds` and then runs the rest: bubblewrap passes every open
/// descriptor on to the command, and safe Rust cannot close a descriptor it does not own, so a
/// `bash` does it (about a millisecond, paid only when there are some).
pub(crate) fn close_fds_prefix(fds: &[u32]) -> Vec<String> {
    if fds.is_empty() {
        return Vec::new();
    }
    let closes: Vec<String> = fds.iter().map(|fd| format!("{fd}>&-")).collect();
    vec![
        "/bin/bash".to_string(),
        "-c".to_string(),
        format!("exec {} \"$@\"", closes.join(" ")),
        "faultline-close-fds".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn backdate(dir: &Path) {
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }

    #[test]
    fn a_sweep_removes_only_old_etc_directories_nobody_holds() {
        let tmp = tempfile::tempdir().unwrap();
        // What a killed process leaves: an old directory whose lock died with it.
        let left = tmp.path().join(format!("{ETC_PREFIX}left"));
        std::fs::create_dir_all(left.join("ssl/certs")).unwrap();
        std::fs::write(left.join("passwd"), "").unwrap();
        backdate(&left);
        // A live process's, as old.
        let held = tmp.path().join(format!("{ETC_PREFIX}held"));
        std::fs::create_dir(&held).unwrap();
        let lock = std::fs::File::open(&held).unwrap();
        lock.try_lock().unwrap();
        backdate(&held);
        // One just made, not locked yet.
        let young = tmp.path().join(format!("{ETC_PREFIX}young"));
        std::fs::create_dir(&young).unwrap();
        // Not ours.
        let other = tmp.path().join("faultline-etc-other");
        std::fs::create_dir(&other).unwrap();
        backdate(&other);

        assert_eq!(sweep_stale_etc(tmp.path(), ETC_SWEEP_AGE), 1);
        assert!(!left.exists());
        assert!(held.exists() && young.exists() && other.exists());
        drop(lock);
        assert_eq!(sweep_stale_etc(tmp.path(), ETC_SWEEP_AGE), 1);
        assert!(!held.exists() && young.exists());
    }

    #[test]
    fn a_live_etc_directory_is_locked_and_gone_when_dropped() {
        let etc = make_etc().unwrap();
        let path = etc.path().to_owned();
        assert!(path.join("passwd").is_file());
        let other = std::fs::File::open(&path).unwrap();
        assert!(other.try_lock().is_err(), "a live /etc must be locked");
        drop(other);
        drop(etc);
        assert!(!path.exists());
    }
}
