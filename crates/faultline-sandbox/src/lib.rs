//! Runs commands inside a bubblewrap sandbox.
//!
//! Everything an agent, an oracle or a case build runs goes through [`Sandbox::exec`]: a fresh
//! set of namespaces (no network unless asked, a private PID space so nothing outside can be
//! signalled, a private `/tmp`), only the mounts the caller lists, a cleared environment, a
//! wall-clock timeout that kills the whole process tree, and output capped head-and-tail.
//!
//! The Rust toolchain is mounted read-only at [`TOOLCHAIN_GUEST`], so paths inside the sandbox
//! are the same on every machine and cargo's build cache stays valid from one sandbox to the
//! next.

mod capture;

pub use capture::{CappedBuffer, CapturedText};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
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
/// time zone, Debian's alternatives links). Nothing else of `/etc` is visible.
const ETC_FILES: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "alternatives",
    "ssl",
    "bash.bashrc",
    "inputrc",
    "profile",
];

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
}

/// A host directory or file made visible inside the sandbox.
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
}

impl SandboxSpec {
    /// A spec with the toolchain mounted, no network, and a plain environment for `workdir`.
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
    /// The exit code, when the command exited normally.
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
}

impl ExecOutput {
    /// True when the command exited with status 0 before its timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// A sandbox layout bound to generated files (its `/etc/passwd`, `/etc/group`), ready to run
/// commands. Each [`Sandbox::exec`] gets fresh namespaces.
#[derive(Debug, Clone)]
pub struct Sandbox {
    spec: SandboxSpec,
    etc: Arc<tempfile::TempDir>,
}

impl Sandbox {
    /// Prepares a sandbox from a spec; checks that every mount exists on the host.
    pub fn new(spec: SandboxSpec) -> Result<Self, SandboxError> {
        for m in &spec.mounts {
            if !m.host.exists() {
                return Err(SandboxError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("mount source {} does not exist", m.host.display()),
                )));
            }
        }
        let etc = tempfile::Builder::new().prefix("faultline-etc").tempdir()?;
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
        Ok(Sandbox {
            spec,
            etc: Arc::new(etc),
        })
    }

    /// The layout this sandbox was built from.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// The bubblewrap argument list that runs `req` (everything after `bwrap`).
    pub fn bwrap_args(&self, req: &ExecRequest) -> Vec<String> {
        let mut a: Vec<String> = Vec::with_capacity(96);
        let mut push = |parts: &[&str]| a.extend(parts.iter().map(|s| s.to_string()));
        push(&[
            "--unshare-all",
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
        if self.spec.network {
            push(&["--share-net"]);
        }
        push(&[
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
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--dir",
            "/tmp/home",
        ]);
        if Path::new("/usr/lib64").exists() {
            push(&["--symlink", "usr/lib64", "/lib64"]);
        }
        for f in ETC_FILES {
            let host = format!("/etc/{f}");
            push(&["--ro-bind-try", &host, &host]);
        }
        let etc = self.etc.path().to_string_lossy().into_owned();
        for f in ["passwd", "group", "hosts"] {
            push(&["--ro-bind", &format!("{etc}/{f}"), &format!("/etc/{f}")]);
        }
        if let Some(tc) = &self.spec.toolchain {
            let host = tc.sysroot.to_string_lossy().into_owned();
            push(&["--ro-bind", &host, TOOLCHAIN_GUEST]);
        }
        for t in &self.spec.tmpfs {
            push(&["--tmpfs", t]);
        }
        for m in &self.spec.mounts {
            let host = m.host.to_string_lossy().into_owned();
            let flag = if m.writable { "--bind" } else { "--ro-bind" };
            push(&[flag, &host, &m.guest]);
        }
        // The root itself is a private tmpfs; freeze it so only the listed mounts are writable.
        push(&["--remount-ro", "/"]);
        let mut env = self.spec.env.clone();
        env.extend(req.env.clone());
        for (k, v) in &env {
            push(&["--setenv", k, v]);
        }
        let workdir = req.workdir.as_deref().unwrap_or(&self.spec.workdir);
        push(&["--chdir", workdir, "--"]);
        a.extend(req.argv.iter().cloned());
        a
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
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SandboxError::Unavailable("the `bwrap` program was not found".into())
            } else {
                SandboxError::Io(e)
            }
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let cap = req.output_cap;
        let out_task = tokio::spawn(drain(stdout, cap));
        let err_task = tokio::spawn(drain(stderr, cap));
        let (status, timed_out) = match tokio::time::timeout(req.timeout, child.wait()).await {
            Ok(status) => (status?, false),
            Err(_) => {
                // Killing bwrap takes its PID namespace, and so every process inside, with it.
                child.start_kill()?;
                (child.wait().await?, true)
            }
        };
        let duration = start.elapsed();
        let join = |r: Result<std::io::Result<CappedBuffer>, tokio::task::JoinError>| {
            r.map_err(std::io::Error::other).and_then(|x| x)
        };
        let stdout = join(out_task.await)?.finish(cap);
        let stderr = join(err_task.await)?.finish(cap);
        use std::os::unix::process::ExitStatusExt;
        Ok(ExecOutput {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout,
            stderr,
            duration,
        })
    }

    /// Runs an interactive shell in the sandbox with the caller's terminal (for `faultline
    /// shell`); returns its exit code.
    pub fn interactive(&self, argv: &[&str]) -> Result<i32, SandboxError> {
        let req = ExecRequest::argv(argv.iter().copied(), Duration::MAX);
        let mut args = self.bwrap_args(&req);
        // An interactive shell needs the caller's session for job control.
        args.retain(|a| a != "--new-session");
        let status = std::process::Command::new("bwrap").args(args).status()?;
        Ok(status.code().unwrap_or(128))
    }
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
