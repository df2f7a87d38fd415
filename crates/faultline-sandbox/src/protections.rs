//! Which protections a sandbox's commands run under on this machine, for the run's records.
//!
//! A mechanism the host lacks is reported here rather than failing the run; a run records the
//! list (in its lock and in every grade), and its report says on every page when one of them was
//! missing.

use crate::spec::{Identity, SandboxSpec};
use crate::{Features, cgroup, identity, launch, seccomp};
use std::fmt;

/// Whether one protection is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// In force; the text says how.
    Active(String),
    /// Turned off by the spec.
    Off,
    /// Asked for but not possible on this machine; the text says why.
    Unavailable(String),
}

impl Protection {
    /// Whether it is in force.
    pub fn is_active(&self) -> bool {
        matches!(self, Protection::Active(_))
    }

    /// `active`, `off` or `unavailable`.
    pub fn state(&self) -> &'static str {
        match self {
            Protection::Active(_) => "active",
            Protection::Off => "off",
            Protection::Unavailable(_) => "unavailable",
        }
    }

    /// How it is in force, or why it is not (empty when off).
    pub fn detail(&self) -> &str {
        match self {
            Protection::Active(how) | Protection::Unavailable(how) => how,
            Protection::Off => "",
        }
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protection::Active(how) => write!(f, "active ({how})"),
            Protection::Off => write!(f, "off"),
            Protection::Unavailable(why) => write!(f, "unavailable ({why})"),
        }
    }
}

/// The protections a sandbox's commands run under, so a run can record what held.
///
/// Always in force, and so not listed: fresh PID, mount, IPC, UTS and cgroup namespaces; no
/// capabilities; a cleared environment (bubblewrap itself, the sandbox's PID 1, starts with
/// none); only the listed mounts, every one `nosuid` and `nodev`, with `/`, `/usr`, `/dev` and
/// `/proc/sys` read-only; no file descriptor of the harness but the three standard ones; the
/// wall-clock timeout that kills the whole tree; and the per-request output cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protections {
    /// Commands run as a dedicated unprivileged uid that owns nothing shared, so no file of a
    /// template, the store or the host can be made writable from inside.
    pub dedicated_identity: Protection,
    /// The system-call filter ([`crate::seccomp`]): no set-user-ID or set-group-ID bits, no
    /// terminal injection, no io_uring, no keyrings, no new user namespaces.
    pub syscall_filter: Protection,
    /// Files may be written only under the sandbox's writable mounts and devices: nothing in
    /// `/proc` (such as the process's own OOM score) or `/sys`.
    pub write_restriction: Protection,
    /// No network: a namespace of its own with only loopback (not the host's).
    pub network_isolation: Protection,
    /// The process limit ([`crate::ResourceLimits::max_processes`]).
    pub process_limit: Protection,
    /// The CPU weight ([`crate::ResourceLimits::cpu_weight`]).
    pub cpu_weight: Protection,
    /// The memory limit ([`crate::ResourceLimits::memory_bytes`]).
    pub memory_limit: Protection,
    /// The disk limit on writable mounts ([`crate::ResourceLimits::disk_bytes`]).
    pub disk_limit: Protection,
    /// Size caps on `/tmp`, `/dev/shm` and [`SandboxSpec::tmpfs`] ([`crate::ResourceLimits`]).
    pub tmpfs_caps: Protection,
    /// No user namespaces inside, so no command can gain capabilities in a namespace of its
    /// own (and mount, for instance, an uncapped tmpfs there).
    pub no_nested_userns: Protection,
    /// Sandboxed processes are the out-of-memory killer's first choice, and cannot change that.
    pub oom_first: Protection,
}

impl Protections {
    /// What a sandbox built from `spec` would get on this machine, without building one.
    pub fn for_spec(spec: &SandboxSpec) -> Protections {
        protections(spec, crate::bwrap::features())
    }

    /// Each protection with a short name, in a fixed order.
    pub fn list(&self) -> [(&'static str, &Protection); 11] {
        [
            ("dedicated identity", &self.dedicated_identity),
            ("system-call filter", &self.syscall_filter),
            ("write restriction", &self.write_restriction),
            ("network isolation", &self.network_isolation),
            ("process limit", &self.process_limit),
            ("CPU weight", &self.cpu_weight),
            ("memory limit", &self.memory_limit),
            ("disk limit", &self.disk_limit),
            ("tmpfs caps", &self.tmpfs_caps),
            ("no nested user namespaces", &self.no_nested_userns),
            ("OOM killer prefers the sandbox", &self.oom_first),
        ]
    }

    /// The protections asked for but not in force here, as `name (why)`.
    pub fn lacking(&self) -> Vec<String> {
        self.list()
            .iter()
            .filter_map(|(name, p)| match p {
                Protection::Unavailable(why) => Some(format!("{name} ({why})")),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for Protections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, p) in self.list() {
            writeln!(f, "{name}: {p}")?;
        }
        Ok(())
    }
}

/// What a sandbox built from `spec` gets on this machine.
pub(crate) fn protections(spec: &SandboxSpec, features: Option<Features>) -> Protections {
    let limits = &spec.limits;
    let no_bwrap = || Protection::Unavailable("bubblewrap does not run here".into());
    let launcher = launch::launcher();
    let no_launcher = |what: &str| {
        Protection::Unavailable(format!(
            "{what} needs the `{}` binary, which was not found",
            crate::SUPERVISOR_BIN
        ))
    };
    let dedicated_identity = match spec.identity {
        Identity::Harness => Protection::Off,
        Identity::Dedicated => match (identity::dedicated(), &launcher) {
            (Err(why), _) => Protection::Unavailable(why.to_string()),
            (Ok(_), Err(_)) => no_launcher("switching to it"),
            (Ok(d), Ok(_)) => Protection::Active(format!(
                "uid {} and gid {}, in a user namespace that maps no other host id",
                d.user.uid, d.user.gid
            )),
        },
    };
    let syscall_filter = match (seccomp::program_bytes(), &launcher) {
        (Err(why), _) => Protection::Unavailable(why),
        (Ok(_), Err(_)) => no_launcher("loading it"),
        (Ok(_), Ok(_)) => Protection::Active(
            "seccomp: no set-user-ID or set-group-ID bits, no TIOCSTI or TIOCLINUX, no \
             io_uring, no keyrings, no new user namespaces"
                .into(),
        ),
    };
    let write_restriction = match (crate::supervisor::landlock_support(), &launcher) {
        (Err(why), _) => Protection::Unavailable(why),
        (Ok(()), Err(_)) => no_launcher("applying it"),
        (Ok(()), Ok(_)) => Protection::Active(
            "landlock: files are written only under the writable mounts, /tmp and /dev".into(),
        ),
    };
    let network_isolation = if spec.network {
        Protection::Off
    } else {
        Protection::Active("own network namespace with only loopback".into())
    };
    let cgroup_limit = |setting: Option<String>, controller| match setting {
        None => Protection::Off,
        Some(how) => match cgroup::hierarchy(controller) {
            Ok(_) => Protection::Active(how),
            Err(why) => Protection::Unavailable(why.into()),
        },
    };
    let process_limit = cgroup_limit(
        limits.max_processes.map(|n| {
            format!("pids cgroup v1, at most {n} tasks for the sandbox's commands together")
        }),
        cgroup::Controller::Pids,
    );
    let cpu_weight = cgroup_limit(
        limits
            .cpu_weight
            .map(|n| format!("cpu cgroup v1, weighs as {n} busy processes however many it runs")),
        cgroup::Controller::Cpu,
    );
    let memory_limit = cgroup_limit(
        limits.memory_bytes.map(|b| {
            format!(
                "memory cgroup v1, {} for the sandbox's processes together",
                human_bytes(b)
            )
        }),
        cgroup::Controller::Memory,
    );
    let disk_limit = match (limits.disk_bytes, &launcher) {
        (None, _) => Protection::Off,
        (Some(_), Err(_)) => no_launcher("limiting file sizes"),
        (Some(b), Ok(_)) => Protection::Active(format!(
            "{} of new data on the writable mounts (measured by the harness; no single file \
             larger, by RLIMIT_FSIZE)",
            human_bytes(b)
        )),
    };
    let sizes = [
        ("/tmp", limits.tmp_bytes),
        ("/dev/shm", limits.shm_bytes),
        ("each scratch tmpfs", limits.tmpfs_bytes),
    ];
    let tmpfs_caps = match features {
        _ if sizes.iter().all(|(_, s)| s.is_none()) => Protection::Off,
        None => no_bwrap(),
        Some(f) if !f.tmpfs_size => {
            Protection::Unavailable("this bubblewrap has no --size (0.7 or later needed)".into())
        }
        Some(_) => Protection::Active(
            sizes
                .iter()
                .map(|(what, s)| match s {
                    Some(b) => format!("{what} {}", human_bytes(*b)),
                    None => format!("{what} uncapped"),
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
    };
    let no_nested_userns = if dedicated_identity.is_active() && syscall_filter.is_active() {
        Protection::Active("seccomp refuses clone and unshare with CLONE_NEWUSER".into())
    } else {
        match features {
            None => no_bwrap(),
            Some(f) if f.disable_userns => Protection::Active("bwrap --disable-userns".into()),
            Some(_) => Protection::Unavailable(
                "this bubblewrap or kernel cannot disable user namespaces".into(),
            ),
        }
    };
    let oom_first = match (&launcher, &write_restriction) {
        (Err(_), _) => no_launcher("raising the OOM score before the sandbox starts"),
        (Ok(_), Protection::Active(_)) => Protection::Active(
            "oom_score_adj 1000 from before the sandbox starts; writes to /proc are refused".into(),
        ),
        (Ok(_), _) => Protection::Unavailable(
            "oom_score_adj is raised to 1000, but without the write restriction a command can \
             lower it again"
                .into(),
        ),
    };
    Protections {
        dedicated_identity,
        syscall_filter,
        write_restriction,
        network_isolation,
        process_limit,
        cpu_weight,
        memory_limit,
        disk_limit,
        tmpfs_caps,
        no_nested_userns,
        oom_first,
    }
}

pub(crate) fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if b >= size && b.is_multiple_of(size) {
            return format!("{} {unit}", b / size);
        }
    }
    format!("{b} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }

    #[test]
    fn a_lacking_protection_is_named_with_its_reason() {
        let p = Protection::Unavailable("no cgroup".into());
        let mut all = protections(&SandboxSpec::new(None, "/w"), None);
        all.memory_limit = p;
        assert!(
            all.lacking()
                .iter()
                .any(|l| l == "memory limit (no cgroup)")
        );
    }
}
