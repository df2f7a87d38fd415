//! Runs commands inside a bubblewrap sandbox.
//!
//! Everything an agent, an oracle or a case build runs goes through [`Sandbox::exec`]: a fresh
//! set of namespaces (no network unless asked, a private PID space so nothing outside can be
//! signalled, a private `/tmp`), only the mounts the caller lists, a cleared environment, a
//! wall-clock timeout that kills the whole process tree, and output capped head-and-tail.
//!
//! bubblewrap itself bounds nothing, so the sandbox adds [`ResourceLimits`]: a process limit and a CPU
//! weight (cgroups, which stop a fork bomb and keep it from starving the machine), size caps on
//! every writable tmpfs, and no nested user namespaces (which would let a command mount an
//! uncapped tmpfs of its own). It also closes what bubblewrap leaves open when the harness runs
//! as root: `/proc/sys` is read-only (the sandbox's uid is root's on the host, and root's uid
//! may write host-wide sysctls), and descriptors the harness inherited do not reach commands.
//! What is in force on this machine is in [`Sandbox::protections`], for the run's records; a
//! mechanism the host lacks is reported there rather than failing the run.
//!
//! A trial that runs many commands can keep one sandbox alive instead
//! ([`Sandbox::start_session`]): a small supervisor runs as PID 1 inside it and starts each
//! command with the same semantics at about the cost of a plain process spawn.
//!
//! The Rust toolchain is mounted read-only at [`TOOLCHAIN_GUEST`], so paths inside the sandbox
//! are the same on every machine and cargo's build cache stays valid from one sandbox to the
//! next.

mod capture;
mod cgroup;
mod session;
pub mod supervisor;
mod wire;

pub use capture::{CappedBuffer, CapturedText};
pub use session::{SUPERVISOR_BIN, Session, supervisor_path, use_supervisor};

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// Where the host's Rust toolchain appears inside the sandbox.
pub const TOOLCHAIN_GUEST: &str = "/opt/rust";

/// The `PATH` inside the sandbox.
pub const GUEST_PATH: &str = "/opt/rust/bin:/usr/local/bin:/usr/bin:/bin";

/// The default output cap, in characters, as mini-swe-agent uses.
pub const DEFAULT_OUTPUT_CAP: usize = 10_000;

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

/// Why a sandboxed command could not be run (as opposed to running and failing).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bubblewrap is missing or cannot create namespaces on this machine.
    #[error(
        "bubblewrap cannot run here: {0}\n\
         install it (Debian: apt-get install -y bubblewrap); inside Docker, user namespaces must be allowed"
    )]
    Unavailable(String),
    /// The toolchain could not be located on the host.
    #[error("cannot locate the Rust toolchain: {0}")]
    Toolchain(String),
    /// Spawning or waiting on the sandbox failed.
    #[error("sandbox process error: {0}")]
    Io(#[from] std::io::Error),
    /// A session's supervisor could not start, died, or stopped answering; the session is over
    /// and a new one can be started.
    #[error("sandbox session lost: {0}")]
    SessionLost(String),
    /// The session supervisor binary is not where it is looked for (see [`supervisor_path`]).
    #[error(
        "the session supervisor `{SUPERVISOR_BIN}` was not found: {0}\n\
         build it with `cargo build -p faultline-sandbox --bin {SUPERVISOR_BIN}`, or set FAULTLINE_SUPERVISOR"
    )]
    NoSupervisor(String),
}

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
}

impl Default for ResourceLimits {
    /// 1024 tasks leave room for a parallel build and a many-threaded test suite, and are few
    /// enough that a fork bomb's processes fit in memory; 1 GiB of `/tmp` and of each
    /// scratch tmpfs holds any build's temporary files; `/dev/shm` is rarely used by Rust code;
    /// a CPU weight of one process per CPU lets a lone sandbox use the whole machine, and keeps
    /// a busy one from crowding out the harness.
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        ResourceLimits {
            max_processes: Some(1024),
            tmp_bytes: Some(1 << 30),
            tmpfs_bytes: Some(1 << 30),
            shm_bytes: Some(64 << 20),
            cpu_weight: Some(cpus),
        }
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
}

impl ExecOutput {
    /// True when the command exited with status 0 before its timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

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
/// Always in force, and so not listed: fresh user, PID, mount, IPC, UTS and cgroup namespaces;
/// no capabilities; a cleared environment; only the listed mounts, with `/`, `/usr`, `/dev`
/// and `/proc/sys` read-only; no file descriptor of the harness but the three standard ones;
/// the wall-clock timeout that kills the whole tree; and the per-request output cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protections {
    /// No network: a namespace of its own with only loopback (not the host's).
    pub network_isolation: Protection,
    /// The process limit ([`ResourceLimits::max_processes`]).
    pub process_limit: Protection,
    /// The CPU weight ([`ResourceLimits::cpu_weight`]).
    pub cpu_weight: Protection,
    /// Size caps on `/tmp`, `/dev/shm` and [`SandboxSpec::tmpfs`] ([`ResourceLimits`]).
    pub tmpfs_caps: Protection,
    /// No user namespaces inside, so no command can gain capabilities in a namespace of its
    /// own (and mount, for instance, an uncapped tmpfs there).
    pub no_nested_userns: Protection,
    /// Sandboxed processes are the out-of-memory killer's first choice. Memory itself is not
    /// limited: that needs a memory cgroup, which the harness's host may reserve for itself.
    pub oom_first: Protection,
}

impl Protections {
    /// Each protection with a short name, in a fixed order.
    pub fn list(&self) -> [(&'static str, &Protection); 6] {
        [
            ("network isolation", &self.network_isolation),
            ("process limit", &self.process_limit),
            ("CPU weight", &self.cpu_weight),
            ("tmpfs caps", &self.tmpfs_caps),
            ("no nested user namespaces", &self.no_nested_userns),
            ("OOM killer prefers the sandbox", &self.oom_first),
        ]
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

/// What the installed bubblewrap and kernel support beyond the basics, found once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Features {
    /// `--disable-userns` (bubblewrap 0.8, and a kernel with per-namespace user limits).
    disable_userns: bool,
    /// `--size` before `--tmpfs` (bubblewrap 0.7).
    tmpfs_size: bool,
}

/// Probes the features by running bubblewrap; `None` when bubblewrap cannot run at all, in
/// which case every feature is used and the first command reports the real problem.
fn features() -> Option<Features> {
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

/// A sandbox layout bound to generated files (its `/etc/passwd`, `/etc/group`), ready to run
/// commands. Each [`Sandbox::exec`] gets fresh namespaces.
#[derive(Debug, Clone)]
pub struct Sandbox {
    spec: SandboxSpec,
    etc: Arc<tempfile::TempDir>,
    features: Option<Features>,
    protections: Protections,
    /// The thread in this sandbox's cgroups, started at the first command.
    spawner: Arc<OnceLock<Result<cgroup::Spawner, String>>>,
}

impl Sandbox {
    /// Prepares a sandbox from a spec; checks that every mount exists on the host.
    ///
    /// The first call in a process also probes what bubblewrap and the host support (tens of
    /// milliseconds), which [`Sandbox::protections`] then reports.
    pub fn new(spec: SandboxSpec) -> Result<Self, SandboxError> {
        for m in &spec.mounts {
            if !m.host.exists() {
                return Err(SandboxError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("mount source {} does not exist", m.host.display()),
                )));
            }
        }
        // One prepared directory mounted as a whole, plus two big directories: a bind mount
        // per file made a third of bubblewrap's start-up time.
        let etc = tempfile::Builder::new().prefix("faultline-etc").tempdir()?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(etc.path(), std::fs::Permissions::from_mode(0o755))?;
        }
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
        let features = features();
        let protections = protections(&spec, features);
        // Said once per process, for what the host lacks (not for what only sessions have).
        static WARNED: std::sync::Once = std::sync::Once::new();
        let lacking: Vec<String> = [
            ("process limit", &protections.process_limit),
            ("CPU weight", &protections.cpu_weight),
            ("tmpfs caps", &protections.tmpfs_caps),
            ("no nested user namespaces", &protections.no_nested_userns),
        ]
        .iter()
        .filter_map(|(name, p)| match p {
            Protection::Unavailable(why) => Some(format!("{name} ({why})")),
            _ => None,
        })
        .collect();
        if !lacking.is_empty() {
            WARNED.call_once(|| {
                tracing::warn!(
                    "sandbox protections unavailable here: {}",
                    lacking.join("; ")
                )
            });
        }
        Ok(Sandbox {
            spec,
            etc: Arc::new(etc),
            features,
            protections,
            spawner: Arc::new(OnceLock::new()),
        })
    }

    /// The layout this sandbox was built from.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// The protections its commands run under on this machine.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// The bubblewrap argument list that runs `req` (everything after `bwrap`).
    pub fn bwrap_args(&self, req: &ExecRequest) -> Vec<String> {
        let mut a = self.layout_args(None);
        self.command_args(&mut a, &req.env, req.workdir.as_deref(), &req.argv);
        a
    }

    /// Namespaces, limits and mounts. With `supervisor` (a host path), the binary is mounted at
    /// [`session::SUPERVISOR_GUEST`] and the command runs as PID 1 instead of under bubblewrap's
    /// own init.
    fn layout_args(&self, supervisor: Option<&Path>) -> Vec<String> {
        let features = self.features.unwrap_or(Features {
            disable_userns: true,
            tmpfs_size: true,
        });
        let limits = &self.spec.limits;
        let mut a = Args {
            v: Vec::with_capacity(80),
            sizes: features.tmpfs_size,
        };
        a.push(&[
            "--unshare-all",
            "--unshare-user",
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
        if features.disable_userns {
            a.push(&["--disable-userns"]);
        }
        if supervisor.is_some() {
            a.push(&["--as-pid-1"]);
        }
        if self.spec.network {
            a.push(&["--share-net"]);
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
        // The sandbox's uid is the harness's on the host, root when the harness runs as root,
        // and the kernel lets root's uid write most sysctls without any capability: a command
        // could set the host's kernel.core_pattern to a program of its own and have the kernel
        // run it as root. Every value read there is the reader's own namespace's, so a
        // read-only view of the host's /proc/sys is the same view, frozen.
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
        if let Some(bin) = supervisor {
            a.push(&[
                "--ro-bind",
                &bin.to_string_lossy(),
                session::SUPERVISOR_GUEST,
            ]);
        }
        for t in &self.spec.tmpfs {
            a.tmpfs(limits.tmpfs_bytes, t);
        }
        for m in &self.spec.mounts {
            let flag = if m.writable { "--bind" } else { "--ro-bind" };
            a.push(&[flag, &m.host.to_string_lossy(), &m.guest]);
        }
        // The root itself is a private tmpfs; freeze it so only the listed mounts are writable.
        a.push(&["--remount-ro", "/"]);
        a.v
    }

    /// The environment, working directory and command line.
    fn command_args(
        &self,
        a: &mut Vec<String>,
        env: &BTreeMap<String, String>,
        workdir: Option<&str>,
        argv: &[String],
    ) {
        let mut all = self.spec.env.clone();
        all.extend(env.clone());
        for (k, v) in all {
            a.extend(["--setenv".to_string(), k, v]);
        }
        let workdir = workdir.unwrap_or(&self.spec.workdir);
        a.extend(["--chdir".to_string(), workdir.to_string(), "--".to_string()]);
        let leaks = inheritable_fds();
        if !leaks.is_empty() {
            // bubblewrap passes every open descriptor on; these would reach the command.
            let closes: Vec<String> = leaks.iter().map(|fd| format!("{fd}>&-")).collect();
            a.extend([
                "/bin/bash".to_string(),
                "-c".to_string(),
                format!("exec {} \"$@\"", closes.join(" ")),
                "faultline-close-fds".to_string(),
            ]);
        }
        a.extend(argv.iter().cloned());
    }

    /// The spawner in this sandbox's cgroups, when a limit that needs them is in force.
    ///
    /// A limit reported active is applied to every command or the command does not run, so a
    /// failure here is an error, not a quiet downgrade.
    fn spawner(&self) -> Result<Option<&cgroup::Spawner>, SandboxError> {
        use cgroup::Controller;
        let mut wanted = Vec::new();
        let mut pids = None;
        if let (true, Some(max), Ok(h)) = (
            self.protections.process_limit.is_active(),
            self.spec.limits.max_processes,
            cgroup::hierarchy(Controller::Pids),
        ) {
            pids = Some(wanted.len());
            wanted.push((h, "pids.max", max.to_string()));
        }
        if let (true, Some(weight), Ok(h)) = (
            self.protections.cpu_weight.is_active(),
            self.spec.limits.cpu_weight,
            cgroup::hierarchy(Controller::Cpu),
        ) {
            // cpu.shares counts 1024 for each ordinary process.
            let shares = u64::from(weight.max(1)) * 1024;
            wanted.push((h, "cpu.shares", shares.to_string()));
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        match self
            .spawner
            .get_or_init(|| cgroup::Spawner::start(wanted, pids).map_err(|e| e.to_string()))
        {
            Ok(spawner) => Ok(Some(spawner)),
            Err(e) => Err(SandboxError::Io(std::io::Error::other(format!(
                "cannot set up the sandbox's cgroups: {e}"
            )))),
        }
    }

    /// Spawns bubblewrap, inside the sandbox's cgroups when there are some.
    async fn spawn_bwrap(
        &self,
        mut cmd: Command,
    ) -> Result<(tokio::process::Child, Option<&cgroup::Spawner>), SandboxError> {
        let spawner = self.spawner()?;
        let spawned = match spawner {
            Some(s) => {
                let runtime = tokio::runtime::Handle::current();
                s.run(move || {
                    let _in_runtime = runtime.enter();
                    cmd.spawn()
                })
                .await?
            }
            None => cmd.spawn(),
        };
        let child = spawned.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SandboxError::Unavailable("the `bwrap` program was not found".into())
            } else {
                SandboxError::Io(e)
            }
        })?;
        Ok((child, spawner))
    }

    /// Runs a command to completion or timeout, capturing capped output.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let mut cmd = Command::new("bwrap");
        cmd.args(self.bwrap_args(req))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let start = Instant::now();
        let (mut child, spawner) = self.spawn_bwrap(cmd).await?;
        let hits_before = spawner.map_or(0, |s| s.limit_hits());
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let cap = req.output_cap;
        let out_task = tokio::spawn(drain(stdout, cap));
        let err_task = tokio::spawn(drain(stderr, cap));
        let (status, timed_out) = match tokio::time::timeout(req.timeout, child.wait()).await {
            Ok(status) => (status?, false),
            Err(_) => (kill_sandbox(&mut child).await?, true),
        };
        let duration = start.elapsed();
        let join = |r: Result<std::io::Result<CappedBuffer>, tokio::task::JoinError>| {
            r.map_err(std::io::Error::other).and_then(|x| x)
        };
        let stdout = join(out_task.await)?.finish(cap);
        let stderr = join(err_task.await)?.finish(cap);
        let process_limit_hit = spawner.is_some_and(|s| s.limit_hits() > hits_before);
        use std::os::unix::process::ExitStatusExt;
        Ok(ExecOutput {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout,
            stderr,
            duration,
            process_limit_hit,
        })
    }

    /// Runs an interactive shell in the sandbox with the caller's terminal (for `faultline
    /// shell`); returns its exit code.
    pub fn interactive(&self, argv: &[&str]) -> Result<i32, SandboxError> {
        let req = ExecRequest::argv(argv.iter().copied(), Duration::MAX);
        let mut args = self.bwrap_args(&req);
        // An interactive shell needs the caller's session for job control.
        args.retain(|a| a != "--new-session");
        let mut cmd = std::process::Command::new("bwrap");
        cmd.args(args);
        let mut child = match self.spawner()? {
            Some(s) => s.run_blocking(move || cmd.spawn())??,
            None => cmd.spawn()?,
        };
        Ok(child.wait()?.code().unwrap_or(128))
    }
}

/// Descriptors of this process, other than the standard three, that a program it spawns would
/// inherit.
///
/// Rust opens everything close-on-exec, so these were inherited by the harness itself (from a
/// shell, a CI runner, cargo's jobserver). bubblewrap does not close them, and a command that
/// finds one can write into whatever the harness's parent reads, or drain a jobserver. Safe
/// Rust cannot close a descriptor it does not own, so the command line closes them instead, in
/// a `bash` that then execs the command: about a millisecond, paid only where they exist.
fn inheritable_fds() -> Vec<u32> {
    const O_CLOEXEC: u32 = 0o2000000;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut fds: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|fd| *fd > 2)
        .filter(|fd| {
            std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).is_ok_and(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|flags| flags & O_CLOEXEC == 0)
            })
        })
        .collect();
    fds.sort_unstable();
    fds
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

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    if let Ok(list) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        return list
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
    }
    // Kernels built without CONFIG_PROC_CHILDREN: the parent is in each process's stat.
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// Pidfds of the processes whose parent is `pid`: bubblewrap's child is the sandbox's PID 1.
pub(crate) fn child_pidfds(pid: Option<u32>) -> Vec<OwnedFd> {
    pid.map(children_of)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| rustix::process::Pid::from_raw(p as i32))
        .filter_map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        .collect()
}

/// Kills a sandbox whose command ran out of time, and returns once nothing in it runs.
async fn kill_sandbox(
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    let inits = child_pidfds(child.id());
    child.start_kill()?;
    let status = child.wait().await?;
    wait_gone(&inits).await;
    Ok(status)
}

/// Kills the sandboxes whose PID 1 the pidfds stand for, and waits until they are gone.
///
/// The sandbox's PID 1 exits only after the kernel has killed and reaped every other process
/// of its namespace, so once it has exited nothing the sandbox ran still runs. bubblewrap
/// itself exits a moment earlier, which is why its own exit is not enough.
pub(crate) async fn wait_gone(inits: &[OwnedFd]) {
    for init in inits {
        let _ = rustix::process::pidfd_send_signal(init, rustix::process::Signal::KILL);
    }
    let start = Instant::now();
    for init in inits {
        while !exited(init) {
            if start.elapsed() > Duration::from_secs(10) {
                tracing::warn!("a killed sandbox is still not gone after 10 s");
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Whether the process behind a pidfd has exited (a pidfd polls readable then).
fn exited(pidfd: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0)
}

/// What a sandbox built from `spec` gets on this machine.
fn protections(spec: &SandboxSpec, features: Option<Features>) -> Protections {
    let limits = &spec.limits;
    let no_bwrap = || Protection::Unavailable("bubblewrap does not run here".into());
    let network_isolation = if spec.network {
        Protection::Off
    } else {
        Protection::Active("own network namespace with only loopback".into())
    };
    let process_limit = match limits.max_processes {
        None => Protection::Off,
        Some(n) => match cgroup::hierarchy(cgroup::Controller::Pids) {
            Ok(_) => Protection::Active(format!(
                "pids cgroup v1, at most {n} tasks for the sandbox's commands together"
            )),
            Err(why) => Protection::Unavailable(why.into()),
        },
    };
    let cpu_weight = match limits.cpu_weight {
        None => Protection::Off,
        Some(n) => match cgroup::hierarchy(cgroup::Controller::Cpu) {
            Ok(_) => Protection::Active(format!(
                "cpu cgroup v1, weighs as {n} busy processes however many it runs"
            )),
            Err(why) => Protection::Unavailable(why.into()),
        },
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
    let no_nested_userns = match features {
        None => no_bwrap(),
        Some(f) if f.disable_userns => Protection::Active("bwrap --disable-userns".into()),
        Some(_) => Protection::Unavailable(
            "this bubblewrap or kernel cannot disable user namespaces".into(),
        ),
    };
    Protections {
        network_isolation,
        process_limit,
        cpu_weight,
        tmpfs_caps,
        no_nested_userns,
        oom_first: Protection::Unavailable(
            "sessions only: a one-shot exec runs no process of ours inside to set it".into(),
        ),
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if b >= size && b.is_multiple_of(size) {
            return format!("{} {unit}", b / size);
        }
    }
    format!("{b} bytes")
}

async fn drain<R: AsyncRead + Unpin>(mut r: R, cap: usize) -> std::io::Result<CappedBuffer> {
    let mut buf = CappedBuffer::new(cap);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buf);
        }
        buf.push(&chunk[..n]);
    }
}

/// Checks that bubblewrap can create its namespaces here; the error says how to fix it.
pub async fn check_available() -> Result<(), SandboxError> {
    let sandbox = Sandbox::new(SandboxSpec::new(None, "/"))?;
    let out = sandbox
        .exec(&ExecRequest::argv(["/bin/true"], Duration::from_secs(30)))
        .await?;
    if out.success() {
        Ok(())
    } else {
        Err(SandboxError::Unavailable(
            out.stderr.text.trim().to_string(),
        ))
    }
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
    fn every_tmpfs_gets_its_cap_before_it() {
        let mut spec = SandboxSpec::new(None, "/w");
        spec.tmpfs.push("/cargo".into());
        spec.limits.tmpfs_bytes = Some(4096);
        let sb = Sandbox::new(spec).unwrap();
        let args = sb.bwrap_args(&ExecRequest::argv(["true"], Duration::from_secs(1)));
        if sb.features.is_some_and(|f| !f.tmpfs_size) {
            return;
        }
        for dir in ["/tmp", "/dev/shm", "/cargo"] {
            let i = args
                .windows(2)
                .position(|w| w[0] == "--tmpfs" && w[1] == dir)
                .unwrap_or_else(|| panic!("no tmpfs at {dir}: {args:?}"));
            assert_eq!(args[i - 2], "--size", "{dir}: {args:?}");
        }
        let cargo = args.iter().position(|a| a == "/cargo").unwrap();
        assert_eq!(args[cargo - 2], "4096");
    }

    #[test]
    fn dev_is_frozen_after_its_shm_is_mounted() {
        let sb = Sandbox::new(SandboxSpec::new(None, "/w")).unwrap();
        let args = sb.bwrap_args(&ExecRequest::argv(["true"], Duration::from_secs(1)));
        let shm = args.iter().position(|a| a == "/dev/shm").unwrap();
        let freeze = args
            .windows(2)
            .position(|w| w[0] == "--remount-ro" && w[1] == "/dev")
            .unwrap();
        assert!(shm < freeze);
    }
}
