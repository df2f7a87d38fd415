//! What a sandbox is made of and what one command in it asks for and gives back.

use crate::SandboxError;
use crate::capture::CapturedText;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Where the host's Rust toolchain appears inside the sandbox.
pub const TOOLCHAIN_GUEST: &str = "/opt/rust";

/// The `PATH` inside the sandbox.
pub const GUEST_PATH: &str = "/opt/rust/bin:/usr/local/bin:/usr/bin:/bin";

/// The default output cap, in characters, as mini-swe-agent uses.
pub const DEFAULT_OUTPUT_CAP: usize = 10_000;

/// A host directory or file made visible inside the sandbox.
///
/// Its host path shows inside (in `/proc/self/mountinfo`), so the path must not tell the
/// sandboxed program anything it should not know, such as the name of the case it works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Path on the host.
    pub host: PathBuf,
    /// Absolute path inside the sandbox.
    pub guest: String,
    /// Whether the sandbox may write to it.
    pub writable: bool,
}

impl Mount {
    /// A read-only mount.
    pub fn ro(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        Mount {
            host: host.into(),
            guest: guest.into(),
            writable: false,
        }
    }

    /// A read-write mount.
    pub fn rw(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        Mount {
            host: host.into(),
            guest: guest.into(),
            writable: true,
        }
    }
}

/// The host's Rust toolchain (the sysroot that `rustc --print sysroot` reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// The sysroot directory on the host; its `bin/` holds cargo and rustc.
    pub sysroot: PathBuf,
}

impl Toolchain {
    /// Finds the toolchain that `rustc` on the host's `PATH` belongs to.
    pub fn detect() -> Result<Self, SandboxError> {
        let out = std::process::Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .map_err(|e| SandboxError::Toolchain(format!("running rustc: {e}")))?;
        if !out.status.success() {
            return Err(SandboxError::Toolchain(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if !sysroot.join("bin").join("cargo").exists() {
            return Err(SandboxError::Toolchain(format!(
                "no cargo next to rustc in {}",
                sysroot.display()
            )));
        }
        Ok(Toolchain { sysroot })
    }
}

/// Resource limits of a sandbox; [`ResourceLimits::default`] suits agents and builds alike.
///
/// Each is enforced by the kernel, not by watching: a fork past the process limit fails with
/// `EAGAIN`, a write past a tmpfs cap with `ENOSPC`, both visible to the command like on any full
/// machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Most tasks (processes and threads) alive at once in the sandbox, counting all its
    /// commands (one-shot and in sessions) and bubblewrap's own processes; `None` for no limit.
    /// Enforced with a pids cgroup where the host has one (see [`Protections::process_limit`]).
    pub max_processes: Option<u32>,
    /// Size cap of the private `/tmp`, in bytes; `None` leaves tmpfs's default (half the RAM).
    pub tmp_bytes: Option<u64>,
    /// Size cap of each directory in [`SandboxSpec::tmpfs`], in bytes.
    pub tmpfs_bytes: Option<u64>,
    /// Size cap of `/dev/shm`, in bytes.
    pub shm_bytes: Option<u64>,
    /// How many ordinary processes' worth of CPU time the sandbox as a whole gets when the
    /// machine's CPUs are all busy (an idle CPU is never withheld); `None` lets each of its
    /// processes count as one, so that a fork bomb outweighs everything else. Enforced with a
    /// `cpu` cgroup where the host has one (see [`Protections::cpu_weight`]).
    pub cpu_weight: Option<u32>,
    /// Memory (resident pages, tmpfs files included) of the sandbox's processes together, in
    /// bytes; past it the kernel's OOM killer ends a process of the sandbox, never one outside.
    /// Enforced with a `memory` cgroup (see [`Protections::memory_limit`]).
    pub memory_bytes: Option<u64>,
    /// How much the sandbox may add to the disk usage of its writable mounts, in bytes; also the
    /// largest file it may write. Enforced by the kernel for single files (`RLIMIT_FSIZE`) and by
    /// the harness measuring the mounts during and after every command, which then kills the
    /// sandbox (see [`Protections::disk_limit`]).
    pub disk_bytes: Option<u64>,
}

impl ResourceLimits {
    /// The built-in limits. 1024 tasks leave room for a parallel build and a many-threaded test suite, and are few
    /// enough that a fork bomb's processes fit in memory; 1 GiB of `/tmp` and of each
    /// scratch tmpfs holds any build's temporary files; `/dev/shm` is rarely used by Rust code;
    /// a CPU weight of one process per CPU lets a lone sandbox use the whole machine, and keeps
    /// a busy one from crowding out the harness; 8 GiB of memory and 8 GiB of new files leave
    /// room for the largest case's full rebuild (a whole prepared case takes up to 2.6 GB), and
    /// are both well under what a machine running two trials at once has.
    pub fn builtin() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        ResourceLimits {
            max_processes: Some(1024),
            tmp_bytes: Some(1 << 30),
            tmpfs_bytes: Some(1 << 30),
            shm_bytes: Some(64 << 20),
            cpu_weight: Some(cpus),
            memory_bytes: Some(8 << 30),
            disk_bytes: Some(8 << 30),
        }
    }
}

static CONFIGURED: OnceLock<ResourceLimits> = OnceLock::new();

/// Makes `limits` the default of every sandbox this process creates from now on (a command's
/// `--sandbox-*` options); only the first call counts, and its limits are returned otherwise.
pub fn configure_default_limits(limits: ResourceLimits) -> Result<(), ResourceLimits> {
    CONFIGURED.set(limits)
}

impl Default for ResourceLimits {
    /// The limits [`configure_default_limits`] set, or the [built-in ones](ResourceLimits::builtin).
    fn default() -> Self {
        CONFIGURED
            .get()
            .cloned()
            .unwrap_or_else(ResourceLimits::builtin)
    }
}

/// How a sandbox is laid out; cheap to clone and reused for every command of a trial.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Directories and files to mount, in order (later mounts may sit inside earlier ones).
    pub mounts: Vec<Mount>,
    /// Empty writable directories to create (on the sandbox's own tmpfs), e.g. a cargo home.
    pub tmpfs: Vec<String>,
    /// Whether the sandbox keeps the host's network. Off for agents and oracles.
    pub network: bool,
    /// Environment variables (the host's environment is never inherited).
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox.
    pub workdir: String,
    /// The toolchain to mount at [`TOOLCHAIN_GUEST`], if any.
    pub toolchain: Option<Toolchain>,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// Whose identity its commands run under on the host.
    pub identity: Identity,
    /// The one host service its commands may reach, if any (one-shot commands only).
    pub relay: Option<LoopbackRelay>,
}

/// A TCP port on a sandbox's own loopback whose connections go to a Unix socket of the host: how
/// a program in a sandbox without network reaches one service (an agent's model gateway) and
/// nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackRelay {
    /// The port inside the sandbox (on 127.0.0.1).
    pub port: u16,
    /// The host's socket; the sandbox's uid must be allowed to connect to it.
    pub socket: PathBuf,
}

/// Whose identity a sandbox's commands have on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Identity {
    /// A dedicated unprivileged uid that owns nothing shared (see [`crate::identity`]): for
    /// agents and for anything that runs a submission. The default.
    #[default]
    Dedicated,
    /// The harness's own uid, which owns the data directory: only for trusted work whose
    /// outputs must belong to the harness, such as building a case's templates from published
    /// crates.
    Harness,
}

impl SandboxSpec {
    /// A spec with the toolchain mounted, no network, default limits, and a plain environment
    /// for `workdir`.
    pub fn new(toolchain: Option<Toolchain>, workdir: impl Into<String>) -> Self {
        let mut env = BTreeMap::new();
        env.insert("PATH".into(), GUEST_PATH.into());
        env.insert("HOME".into(), "/tmp/home".into());
        env.insert("USER".into(), "agent".into());
        env.insert("LANG".into(), "C.UTF-8".into());
        env.insert("TERM".into(), "dumb".into());
        env.insert("CARGO_TERM_COLOR".into(), "never".into());
        SandboxSpec {
            mounts: Vec::new(),
            tmpfs: Vec::new(),
            network: false,
            env,
            workdir: workdir.into(),
            toolchain,
            limits: ResourceLimits::default(),
            identity: Identity::Dedicated,
            relay: None,
        }
    }

    /// Adds a mount.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Replaces the resource limits.
    pub fn limits(mut self, limits: ResourceLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Lets its one-shot commands reach a host service through a port of their loopback.
    pub fn relay(mut self, relay: LoopbackRelay) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Runs the commands under another identity.
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = identity;
        self
    }

    /// The guest paths a command may write to: the writable mounts and the scratch tmpfs
    /// directories (besides `/tmp`, `/dev/shm` and the devices, which every sandbox has).
    pub fn writable_guest_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .mounts
            .iter()
            .filter(|m| m.writable)
            .map(|m| m.guest.clone())
            .collect();
        paths.extend(self.tmpfs.iter().cloned());
        paths
    }
}

/// A command to run in a sandbox.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The program and its arguments (inside the sandbox).
    pub argv: Vec<String>,
    /// Wall-clock limit; the whole process tree is killed when it passes.
    pub timeout: Duration,
    /// Characters kept of each stream (head and tail halves).
    pub output_cap: usize,
    /// Extra environment for this command only.
    pub env: BTreeMap<String, String>,
    /// Working directory for this command, overriding the spec's.
    pub workdir: Option<String>,
}

impl ExecRequest {
    /// Runs `script` with `bash -c`, as an agent's action.
    pub fn bash(script: impl Into<String>, timeout: Duration) -> Self {
        ExecRequest::argv(["/bin/bash", "-c", &script.into()], timeout)
    }

    /// Runs a program with arguments.
    pub fn argv<S: AsRef<str>>(argv: impl IntoIterator<Item = S>, timeout: Duration) -> Self {
        ExecRequest {
            argv: argv.into_iter().map(|s| s.as_ref().to_string()).collect(),
            timeout,
            output_cap: DEFAULT_OUTPUT_CAP,
            env: BTreeMap::new(),
            workdir: None,
        }
    }

    /// Sets the output cap.
    pub fn cap(mut self, chars: usize) -> Self {
        self.output_cap = chars;
        self
    }

    /// Adds an environment variable for this command.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Runs in another working directory.
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }
}

/// What a sandboxed command did.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    /// The exit code, when the command exited normally. A command killed by a signal (other
    /// than at the timeout) reports 128 + the signal, as bubblewrap and shells do.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, when one did.
    pub signal: Option<i32>,
    /// Whether the timeout fired (the tree was killed).
    pub timed_out: bool,
    /// Captured standard output.
    pub stdout: CapturedText,
    /// Captured standard error.
    pub stderr: CapturedText,
    /// Wall-clock time from spawn to exit.
    pub duration: Duration,
    /// Whether the process limit refused a fork during the command (a fork bomb, or a limit
    /// set too low for the job).
    pub process_limit_hit: bool,
    /// Whether the memory limit made the kernel kill a process of the sandbox during the
    /// command.
    pub memory_limit_hit: bool,
    /// Whether the command wrote past the disk limit and was killed for it (the sandbox's
    /// other commands in a session are killed too).
    pub disk_limit_hit: bool,
}

impl ExecOutput {
    /// True when the command exited with status 0 before its timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// The resource limit that ended or hampered the command, if one did.
    pub fn limit_hit(&self) -> Option<LimitHit> {
        if self.disk_limit_hit {
            Some(LimitHit::Disk)
        } else if self.memory_limit_hit {
            Some(LimitHit::Memory)
        } else if self.process_limit_hit {
            Some(LimitHit::Processes)
        } else {
            None
        }
    }
}

/// A resource limit that a command ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// [`ResourceLimits::max_processes`].
    Processes,
    /// [`ResourceLimits::memory_bytes`].
    Memory,
    /// [`ResourceLimits::disk_bytes`].
    Disk,
}

impl LimitHit {
    /// The name of the limit as its command-line flag has it (`--sandbox-memory`), for
    /// messages.
    pub fn name(self) -> &'static str {
        match self {
            LimitHit::Processes => "processes",
            LimitHit::Memory => "memory",
            LimitHit::Disk => "disk",
        }
    }
}
