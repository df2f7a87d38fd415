//! Starting bubblewrap: the launcher, a role of the supervisor binary that the harness runs in
//! place of `bwrap` itself.
//!
//! What must happen between the harness and bubblewrap cannot be done from the harness without
//! `unsafe` code in the forked child, so a small program does it and then becomes bubblewrap:
//! it opens the files bubblewrap reads by descriptor (the system-call filter, the user
//! namespaces of the [dedicated identity](crate::identity)), raises its OOM score so everything
//! the sandbox runs inherits it, limits the size of any file to the disk limit, drops to the
//! sandbox's uid, and execs bubblewrap with an empty environment, so that not even the
//! sandbox's PID 1 (bubblewrap's own init) holds a variable of the harness.

use crate::SandboxError;
use crate::bwrap::Invocation;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::OnceLock;

/// The name of the launcher role on the supervisor binary's command line.
pub(crate) const ROLE: &str = "launch";

/// The OOM score every sandboxed process starts with: the highest, so that the sandbox dies
/// first when memory runs out.
const OOM_SCORE_ADJ: &str = "1000";

/// How the launcher's own errors begin on standard error, so that a caller can tell them from
/// bubblewrap's.
pub(crate) fn refusal_prefix() -> String {
    format!("{} {ROLE}:", crate::SUPERVISOR_BIN)
}

/// The supervisor binary, which carries the launcher role.
pub(crate) fn launcher() -> Result<PathBuf, SandboxError> {
    crate::supervisor_path()
}

/// bubblewrap's absolute path, found once on the harness's `PATH` (the launcher runs with an
/// empty environment).
pub(crate) fn bwrap_path() -> PathBuf {
    static BWRAP: OnceLock<PathBuf> = OnceLock::new();
    BWRAP
        .get_or_init(|| {
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join("bwrap"))
                .find(|p| p.is_file())
                .unwrap_or_else(|| PathBuf::from("bwrap"))
        })
        .clone()
}

/// What the launcher does before it becomes bubblewrap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LaunchOptions {
    /// Drop to this uid and gid, entering these user namespaces (outer, inner).
    pub(crate) dedicated: Option<(u32, u32, PathBuf, PathBuf)>,
    /// Hand bubblewrap the system-call filter (the launcher compiles it: it is this crate).
    pub(crate) seccomp: bool,
    /// The largest file any sandboxed process may write, in bytes.
    pub(crate) file_size_limit: Option<u64>,
}

impl LaunchOptions {
    /// The launcher's command line: its options, then bubblewrap and its arguments.
    pub(crate) fn args(&self, invocation: Invocation) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![ROLE.into()];
        if let Some((uid, gid, outer, inner)) = &self.dedicated {
            a.extend([
                "--as".into(),
                format!("{uid}:{gid}").into(),
                "--userns".into(),
                outer.into(),
                "--userns2".into(),
                inner.into(),
            ]);
        }
        if self.seccomp {
            a.push("--seccomp".into());
        }
        if let Some(n) = self.file_size_limit {
            a.extend(["--file-size-limit".into(), n.to_string().into()]);
        }
        a.extend([
            "--bwrap".into(),
            bwrap_path().into(),
            "--command-at".into(),
            invocation.command_at.to_string().into(),
            "--".into(),
        ]);
        a.extend(invocation.args.into_iter().map(OsString::from));
        a
    }

    fn parse(args: &[OsString]) -> Result<(Self, Parsed), String> {
        let mut opts = LaunchOptions::default();
        let mut bwrap = PathBuf::from("bwrap");
        let mut command_at = None;
        let mut dedicated: (Option<(u32, u32)>, Option<PathBuf>, Option<PathBuf>) =
            (None, None, None);
        let mut i = 0;
        let value = |i: usize| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{:?} needs a value", args[i]))
        };
        while i < args.len() {
            let flag = args[i].to_string_lossy().into_owned();
            match flag.as_str() {
                "--" => {
                    if let (Some((uid, gid)), Some(outer), Some(inner)) = dedicated {
                        opts.dedicated = Some((uid, gid, outer, inner));
                    }
                    let rest = args[i + 1..].to_vec();
                    let command_at = command_at
                        .filter(|at| *at <= rest.len())
                        .ok_or("no valid --command-at")?;
                    return Ok((
                        opts,
                        Parsed {
                            bwrap,
                            args: rest,
                            command_at,
                        },
                    ));
                }
                "--as" => {
                    let v = value(i)?.to_string_lossy().into_owned();
                    let ids = v
                        .split_once(':')
                        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
                        .ok_or_else(|| format!("--as {v}: not UID:GID"))?;
                    dedicated.0 = Some(ids);
                }
                "--userns" => dedicated.1 = Some(value(i)?.into()),
                "--userns2" => dedicated.2 = Some(value(i)?.into()),
                "--seccomp" => {
                    opts.seccomp = true;
                    i += 1;
                    continue;
                }
                "--bwrap" => bwrap = value(i)?.into(),
                "--command-at" => {
                    let v = value(i)?.to_string_lossy().into_owned();
                    command_at = Some(v.parse().map_err(|_| format!("--command-at {v}"))?);
                }
                "--file-size-limit" => {
                    let v = value(i)?.to_string_lossy().into_owned();
                    opts.file_size_limit =
                        Some(v.parse().map_err(|_| format!("--file-size-limit {v}"))?);
                }
                other => return Err(format!("unknown option {other}")),
            }
            i += 2;
        }
        Err("no `--` before bubblewrap's arguments".into())
    }
}

/// bubblewrap's side of a parsed launcher command line.
#[derive(Debug)]
struct Parsed {
    bwrap: PathBuf,
    args: Vec<OsString>,
    /// Where in `args` the sandboxed command starts.
    command_at: usize,
}

/// The launcher role: prepares the process as [`LaunchOptions`] say and execs bubblewrap. It
/// returns only on failure.
pub(crate) fn main(args: &[OsString]) -> ExitCode {
    match launch(args) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("{} {e}", refusal_prefix());
            ExitCode::from(125)
        }
    }
}

fn launch(args: &[OsString]) -> Result<std::convert::Infallible, String> {
    let (
        opts,
        Parsed {
            bwrap,
            args: mut rest,
            command_at,
        },
    ) = LaunchOptions::parse(args)?;
    // Files stay open across the exec for bubblewrap to read; everything else std opened is
    // close-on-exec.
    let mut kept = Vec::new();
    let mut keep = |file: std::fs::File, what: &str| -> Result<String, String> {
        rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty())
            .map_err(|e| format!("{what}: {e}"))?;
        let fd = file.as_raw_fd().to_string();
        kept.push(file);
        Ok(fd)
    };
    let mut pass = |path: &Path| -> Result<String, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        keep(file, &path.display().to_string())
    };
    let mut prefix: Vec<String> = Vec::new();
    if let Some((_, _, outer, inner)) = &opts.dedicated {
        prefix.extend(["--userns".into(), pass(outer)?]);
        prefix.extend(["--userns2".into(), pass(inner)?]);
    }
    if opts.seccomp {
        let filter = crate::seccomp::program_file()?;
        prefix.extend(["--seccomp".into(), keep(filter, "the system-call filter")?]);
    }
    // What this process holds open (the files above, whatever the harness inherited) is closed
    // before the sandboxed command runs.
    let closer = crate::bwrap::close_fds_prefix(&crate::reap::inheritable_fds());
    rest.splice(
        command_at..command_at,
        closer.into_iter().map(OsString::from),
    );
    std::fs::write("/proc/self/oom_score_adj", OOM_SCORE_ADJ)
        .map_err(|e| format!("cannot raise oom_score_adj: {e}"))?;
    if let Some(n) = opts.file_size_limit {
        let limit = rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        rustix::process::setrlimit(rustix::process::Resource::Fsize, limit)
            .map_err(|e| format!("cannot limit file sizes: {e}"))?;
    }
    let mut cmd = Command::new(&bwrap);
    cmd.env_clear().args(prefix).args(rest);
    if let Some((uid, gid, _, _)) = opts.dedicated {
        // Dropping from root, std also clears the supplementary groups.
        cmd.uid(uid).gid(gid);
    }
    let err = cmd.exec();
    drop(kept);
    Err(format!("cannot run {}: {err}", bwrap.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_survive_the_command_line() {
        let opts = LaunchOptions {
            dedicated: Some((7, 8, "/proc/1/ns/user".into(), "/proc/2/ns/user".into())),
            seccomp: true,
            file_size_limit: Some(1 << 20),
        };
        let args = opts.args(Invocation {
            args: vec!["--unshare-pid".into(), "--".into(), "true".into()],
            command_at: 2,
        });
        let (parsed, rest) = LaunchOptions::parse(&args[1..]).unwrap();
        assert_eq!(parsed, opts);
        assert_eq!(rest.args, ["--unshare-pid", "--", "true"]);
        assert_eq!(rest.command_at, 2);
    }

    #[test]
    fn a_garbled_command_line_is_refused() {
        let args: Vec<OsString> = vec!["--as".into(), "x".into(), "--".into()];
        assert!(LaunchOptions::parse(&args).is_err());
        assert!(LaunchOptions::parse(&["--seccomp".into()]).is_err());
        assert!(LaunchOptions::parse(&[]).is_err());
    }
}
