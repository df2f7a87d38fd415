//! Runs commands inside a bubblewrap sandbox.
//!
//! Everything an agent, an oracle or a case build runs goes through [`Sandbox::exec`]: a fresh
//! set of namespaces (no network unless asked, a private PID space so nothing outside can be
//! signalled, a private `/tmp`), only the mounts the caller lists, a cleared environment, a
//! wall-clock timeout that kills the whole process tree, and output capped head-and-tail.
//!
//! Commands run as a [dedicated unprivileged uid](identity) that owns nothing shared, under a
//! [system-call filter](seccomp) and a write restriction (landlock). bubblewrap itself bounds
//! nothing, so the sandbox adds [`ResourceLimits`]: process, CPU and memory limits (cgroups), a
//! disk limit on the writable mounts, and size caps on every writable tmpfs. What is in force on
//! this machine is in [`Sandbox::protections`], for the run's records; a mechanism the host
//! lacks is reported there rather than failing the run.
//!
//! A trial that runs many commands can keep one sandbox alive instead
//! ([`Sandbox::start_session`]): a small supervisor runs as PID 1 inside it and starts each
//! command with the same semantics at about the cost of a plain process spawn.
//!
//! The Rust toolchain is mounted read-only at [`TOOLCHAIN_GUEST`], so paths inside the sandbox
//! are the same on every machine and cargo's build cache stays valid from one sandbox to the
//! next.
//!
//! Files: `spec` (what a sandbox and a command are made of), `protections` (what holds here),
//! `bwrap` (bubblewrap's command line), `launch` (starting bubblewrap as the dedicated uid),
//! `identity`, `seccomp`, `disk`, `cgroup` (limits), `reap` (the sandbox's processes from the
//! host), `session` and `supervisor` (sandboxes kept alive for a trial), `capture` and `wire`.

mod bwrap;
mod capture;
mod cgroup;
mod disk;
pub mod identity;
mod launch;
mod protections;
mod reap;
mod relay;
mod roles;
pub mod seccomp;
mod session;
mod spec;
pub mod supervisor;
mod wire;

pub use capture::{CappedBuffer, CapturedText};
pub use identity::{SandboxUser, give_to_sandbox};
pub use protections::{Protection, Protections};
pub use session::{SUPERVISOR_BIN, Session, supervisor_path, use_supervisor};
pub use spec::{
    DEFAULT_OUTPUT_CAP, ExecOutput, ExecRequest, GUEST_PATH, Identity, LimitHit, LoopbackRelay,
    Mount, ResourceLimits, SandboxSpec, TOOLCHAIN_GUEST, Toolchain, configure_default_limits,
};

use bwrap::Features;
use disk::DiskWatch;
use reap::{drain, kill_sandbox};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::process::Command;

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
    /// Spawning or waiting on the sandbox failed. The message, which a trajectory records as the
    /// trial's error, names the cause, so the cause is not also the `source`.
    #[error("sandbox process error: {0}")]
    Io(std::io::Error),
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
    /// The supervisor's launcher role failed before bubblewrap started.
    #[error(
        "the session supervisor `{SUPERVISOR_BIN}` could not start bubblewrap: {0}\n\
         it must come from the same build as this program (rebuild both, or set FAULTLINE_SUPERVISOR)"
    )]
    LauncherFailed(String),
}

impl From<std::io::Error> for SandboxError {
    fn from(e: std::io::Error) -> Self {
        SandboxError::Io(e)
    }
}

/// A sandbox layout bound to generated files (its `/etc/passwd`, `/etc/group`), ready to run
/// commands. Each [`Sandbox::exec`] gets fresh namespaces.
#[derive(Debug, Clone)]
pub struct Sandbox {
    spec: SandboxSpec,
    etc: Arc<bwrap::EtcDir>,
    features: Option<Features>,
    protections: Protections,
    /// The supervisor binary (launcher, write restriction, sessions), when there is one.
    supervisor: Option<PathBuf>,
    /// The thread in this sandbox's cgroups, started at the first command.
    spawner: Arc<OnceLock<Result<cgroup::Spawner, String>>>,
    /// The disk limit's measurements, when there is a limit and something writable.
    disk: Option<Arc<DiskWatch>>,
}

impl Sandbox {
    /// Prepares a sandbox from a spec; checks that every mount exists on the host, and gives
    /// the writable ones to the sandbox's identity ([`give_to_sandbox`]).
    ///
    /// The first call in a process also probes what bubblewrap and the host support (tens of
    /// milliseconds), and sets up the dedicated identity, which [`Sandbox::protections`] then
    /// reports.
    pub fn new(spec: SandboxSpec) -> Result<Self, SandboxError> {
        for m in &spec.mounts {
            if !m.host.exists() {
                return Err(SandboxError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("mount source {} does not exist", m.host.display()),
                )));
            }
        }
        let supervisor = launch::launcher().ok();
        if let Some(relay) = &spec.relay {
            if supervisor.is_none() {
                return Err(SandboxError::NoSupervisor(
                    "a sandbox with a loopback relay needs it".to_string(),
                ));
            }
            if !relay.socket.exists() {
                return Err(SandboxError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("relay socket {} does not exist", relay.socket.display()),
                )));
            }
        }
        let etc = bwrap::make_etc()?;
        let features = bwrap::features();
        let protections = protections::protections(&spec, features);
        // Said once per process, for what the host lacks.
        static WARNED: std::sync::Once = std::sync::Once::new();
        let lacking = protections.lacking();
        if !lacking.is_empty() {
            WARNED.call_once(|| {
                tracing::warn!(
                    "sandbox protections unavailable here: {}",
                    lacking.join("; ")
                )
            });
        }
        if protections.dedicated_identity.is_active() {
            // What the sandbox may write must be its own; shared hard links stay the harness's.
            for m in spec.mounts.iter().filter(|m| m.writable) {
                give_to_sandbox(&m.host)?;
            }
        }
        let disk = match (spec.limits.disk_bytes, protections.disk_limit.is_active()) {
            (Some(limit), true) => {
                let roots: Vec<PathBuf> = spec
                    .mounts
                    .iter()
                    .filter(|m| m.writable)
                    .map(|m| m.host.clone())
                    .collect();
                (!roots.is_empty()).then(|| Arc::new(DiskWatch::new(roots, limit)))
            }
            _ => None,
        };
        Ok(Sandbox {
            supervisor,
            spec,
            etc: Arc::new(etc),
            features,
            protections,
            spawner: Arc::new(OnceLock::new()),
            disk,
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
        self.request_invocation(req).args
    }

    fn request_invocation(&self, req: &ExecRequest) -> bwrap::Invocation {
        self.invocation(None, &req.env, req.workdir.as_deref(), &req.argv)
    }

    /// What the launcher does before it becomes bubblewrap, as this sandbox's protections say.
    fn launch_options(&self) -> launch::LaunchOptions {
        let dedicated = identity::dedicated()
            .ok()
            .filter(|_| self.protections.dedicated_identity.is_active())
            .map(|d| (d.user.uid, d.user.gid, d.outer.clone(), d.inner.clone()));
        let seccomp = self.protections.syscall_filter.is_active();
        let file_size_limit = self
            .spec
            .limits
            .disk_bytes
            .filter(|_| self.protections.disk_limit.is_active());
        launch::LaunchOptions {
            dedicated,
            seccomp,
            file_size_limit,
        }
    }

    /// The command that starts bubblewrap with `args`: the launcher when there is one, else
    /// bubblewrap itself; either way with an empty environment.
    pub(crate) fn bwrap_command(&self, invocation: bwrap::Invocation) -> std::process::Command {
        let mut cmd = match &self.supervisor {
            Some(launcher) => {
                let mut cmd = std::process::Command::new(launcher);
                std::os::unix::process::CommandExt::arg0(&mut cmd, SUPERVISOR_BIN);
                cmd.args(self.launch_options().args(invocation));
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new(launch::bwrap_path());
                cmd.args(invocation.args);
                cmd
            }
        };
        cmd.env_clear();
        cmd
    }

    /// The spawner in this sandbox's cgroups, when a limit that needs them is in force.
    ///
    /// A limit reported active is applied to every command or the command does not run, so a
    /// failure here is an error, not a quiet downgrade.
    fn spawner(&self) -> Result<Option<&cgroup::Spawner>, SandboxError> {
        use cgroup::Controller;
        let limits = &self.spec.limits;
        let mut wanted = Vec::new();
        let mut counters = cgroup::Counters::default();
        if let (true, Some(max), Ok(h)) = (
            self.protections.process_limit.is_active(),
            limits.max_processes,
            cgroup::hierarchy(Controller::Pids),
        ) {
            counters.pids = Some(wanted.len());
            wanted.push((h, "pids.max", max.to_string()));
        }
        if let (true, Some(weight), Ok(h)) = (
            self.protections.cpu_weight.is_active(),
            limits.cpu_weight,
            cgroup::hierarchy(Controller::Cpu),
        ) {
            // cpu.shares counts 1024 for each ordinary process.
            let shares = u64::from(weight.max(1)) * 1024;
            wanted.push((h, "cpu.shares", shares.to_string()));
        }
        if let (true, Some(bytes), Ok(h)) = (
            self.protections.memory_limit.is_active(),
            limits.memory_bytes,
            cgroup::hierarchy(Controller::Memory),
        ) {
            counters.memory = Some(wanted.len());
            wanted.push((h, "memory.limit_in_bytes", bytes.to_string()));
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        match self
            .spawner
            .get_or_init(|| cgroup::Spawner::start(wanted, counters).map_err(|e| e.to_string()))
        {
            Ok(spawner) => Ok(Some(spawner)),
            Err(e) => Err(SandboxError::Io(std::io::Error::other(format!(
                "cannot set up the sandbox's cgroups: {e}"
            )))),
        }
    }

    /// Counts of limit events so far (refused forks, OOM kills), to tell what a command hit.
    pub(crate) fn limit_counts(&self) -> (u64, u64) {
        match self.spawner() {
            Ok(Some(s)) => (s.limit_hits(), s.oom_kills()),
            _ => (0, 0),
        }
    }

    /// Spawns bubblewrap with `args`, inside the sandbox's cgroups when there are some.
    pub(crate) async fn spawn_bwrap(
        &self,
        invocation: bwrap::Invocation,
        stdin: Stdio,
    ) -> Result<tokio::process::Child, SandboxError> {
        let mut cmd = Command::from(self.bwrap_command(invocation));
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(disk) = &self.disk {
            let disk = disk.clone();
            tokio::task::spawn_blocking(move || disk.start())
                .await
                .map_err(std::io::Error::other)?;
        }
        let spawned = match self.spawner()? {
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
        spawned.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SandboxError::Unavailable("the `bwrap` program was not found".into())
            } else {
                SandboxError::Io(e)
            }
        })
    }

    /// Resolves when the sandbox's writable mounts have grown past the disk limit; never, when
    /// there is none.
    pub(crate) async fn disk_over_limit(&self) {
        match &self.disk {
            Some(d) => d.clone().over_limit().await,
            None => std::future::pending().await,
        }
    }

    /// Whether the writable mounts are past the disk limit now (measured after a command).
    pub(crate) async fn disk_exceeded(&self) -> bool {
        let Some(d) = self.disk.clone() else {
            return false;
        };
        tokio::task::spawn_blocking(move || d.exceeded())
            .await
            .unwrap_or(false)
    }

    /// Runs a command to completion or timeout, capturing capped output.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let (output, _) = self.exec_until(req, std::future::pending()).await?;
        Ok(output)
    }

    /// [`Self::exec`], but the whole sandbox is also killed when `stop` completes first (the
    /// harness decided to end the command, say because its agent ran out of budget); the flag
    /// says whether it did.
    pub async fn exec_until(
        &self,
        req: &ExecRequest,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(ExecOutput, bool), SandboxError> {
        let start = Instant::now();
        let counts_before = self.limit_counts();
        let mut child = self
            .spawn_bwrap(self.request_invocation(req), Stdio::null())
            .await?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let cap = req.output_cap;
        let out_task = tokio::spawn(drain(stdout, cap));
        let err_task = tokio::spawn(drain(stderr, cap));
        let mut stopped = false;
        let ended = tokio::select! {
            ended = tokio::time::timeout(req.timeout, child.wait()) => Some(ended),
            () = self.disk_over_limit() => None,
            () = stop => {
                stopped = true;
                None
            }
        };
        let (status, timed_out, mut disk_limit_hit) = match ended {
            Some(Ok(status)) => (status?, false, false),
            Some(Err(_)) => (kill_sandbox(&mut child).await?, true, false),
            None => (kill_sandbox(&mut child).await?, false, !stopped),
        };
        let duration = start.elapsed();
        if !disk_limit_hit && duration >= disk::SHORT_COMMAND {
            disk_limit_hit = self.disk_exceeded().await;
        }
        let join = |r: Result<std::io::Result<CappedBuffer>, tokio::task::JoinError>| {
            r.map_err(std::io::Error::other).and_then(|x| x)
        };
        let stdout = join(out_task.await)?.finish(cap);
        let stderr = join(err_task.await)?.finish(cap);
        let counts_after = self.limit_counts();
        use std::os::unix::process::ExitStatusExt;
        let output = ExecOutput {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout,
            stderr,
            duration,
            process_limit_hit: counts_after.0 > counts_before.0,
            memory_limit_hit: counts_after.1 > counts_before.1,
            disk_limit_hit,
        };
        Ok((output, stopped))
    }

    /// Runs an interactive shell in the sandbox with the caller's terminal (for `faultline
    /// shell`); returns its exit code. The shell runs in a session of its own, so it has no
    /// job control, and the system-call filter refuses terminal injection besides.
    pub fn interactive(&self, argv: &[&str]) -> Result<i32, SandboxError> {
        let req = ExecRequest::argv(argv.iter().copied(), Duration::MAX);
        let mut cmd = self.bwrap_command(self.request_invocation(&req));
        let mut child = match self.spawner()? {
            Some(s) => s.run_blocking(move || cmd.spawn())??,
            None => cmd.spawn()?,
        };
        Ok(child.wait()?.code().unwrap_or(128))
    }
}

/// Checks that bubblewrap can create its namespaces here; the error says how to fix it.
pub async fn check_available() -> Result<(), SandboxError> {
    let sandbox = Sandbox::new(SandboxSpec::new(None, "/"))?;
    let out = sandbox
        .exec(&ExecRequest::argv(["/bin/true"], Duration::from_secs(30)))
        .await?;
    let why = out.stderr.text.trim().to_string();
    if out.success() {
        Ok(())
    } else if why.starts_with(&launch::refusal_prefix()) {
        // The launcher refused before bubblewrap ran: typically a supervisor from another build.
        Err(SandboxError::LauncherFailed(why))
    } else {
        Err(SandboxError::Unavailable(why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
