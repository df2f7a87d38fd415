//! The supervisor a [`Session`](crate::Session) keeps running inside its sandbox.
//!
//! It reads commands on its standard input, runs each one, and writes the outcome on its
//! standard output, with the same semantics as a one-shot [`Sandbox::exec`](crate::Sandbox::exec):
//! the command is killed with everything it started when its timeout passes, nothing it started
//! outlives it, and its output is capped head-and-tail.
//!
//! The commands it runs are hostile, so it protects itself and its channel:
//! - It is PID 1 of the sandbox's PID namespace (`bwrap --as-pid-1`). The kernel drops every
//!   signal sent to a namespace's init from inside the namespace unless init handles it, so
//!   `kill -9 1` and `kill -9 -1` cannot touch it, and it reaps every orphan.
//! - It makes itself non-dumpable before reading anything. The commands run under the same uid,
//!   so without this they could `ptrace` it, or open `/proc/1/fd/0` and `/proc/1/fd/1` to read
//!   other commands or forge their replies; a non-dumpable process needs `CAP_SYS_PTRACE` for
//!   all of that, and the sandbox has no capabilities.
//! - Its channel is fds 0 and 1, which every command gets replaced with its own `/dev/null`
//!   and pipes, and it opens nothing else a command could inherit (std opens all files
//!   close-on-exec).
//!
//! What a command can still do is make the supervisor's next reply late (a fork bomb it has to
//! kill) or starve it of memory; the harness answers both with its own deadline, after which the
//! session is dead and the next exec says so.

use crate::capture::CappedBuffer;
use crate::roles::{RESTRICT_FLAG, RESTRICT_ROLE};
use crate::wire::{self, Reply, Request};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions, WaitStatus};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long the supervisor keeps killing stragglers before it reports that it cannot.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// How often a command's exit is checked for where the kernel has no pidfds.
const POLL_TICK: Duration = Duration::from_millis(5);

/// The supervisor binary's roles, by its first argument: `launch` (on the host, see
/// [`crate::launch`]), `restrict` (inside a one-shot sandbox: [`restrict_writes`], then exec
/// the command), `relay` (inside a one-shot sandbox: a loopback port to a host socket, see
/// [`crate::relay`]), or the session supervisor (anything else).
///
/// This is the whole of the `faultline-supervisor` binary; a program that wants to be its own
/// supervisor can call it when started under that name.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let role = args.first().and_then(|a| a.to_str());
    if role == Some(crate::launch::ROLE) {
        return crate::launch::main(&args[1..]);
    }
    if role == Some(crate::relay::RELAY_ROLE) {
        return crate::relay::main(&args[1..]);
    }
    let result = match role {
        Some(RESTRICT_ROLE) => restrict_and_exec(&args[1..]),
        _ => serve(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The write restriction's options (`--restrict-writes`, `--write PATH`...), up to `--` or the
/// end: the writable paths if writes are to be restricted, and the rest.
fn writable_paths(args: &[OsString]) -> io::Result<(Option<Vec<String>>, &[OsString])> {
    let mut paths = Vec::new();
    let mut restrict = false;
    let mut i = 0;
    let result = |restrict: bool, paths: Vec<String>| restrict.then_some(paths);
    while i < args.len() {
        match args[i].to_str() {
            Some("--") => return Ok((result(restrict, paths), &args[i + 1..])),
            Some(RESTRICT_FLAG) => {
                restrict = true;
                i += 1;
            }
            Some("--write") => {
                let p = args
                    .get(i + 1)
                    .and_then(|p| p.to_str())
                    .ok_or_else(|| io::Error::other("--write needs a path"))?;
                paths.push(p.to_string());
                i += 2;
            }
            _ => return Err(io::Error::other(format!("unknown option {:?}", args[i]))),
        }
    }
    Ok((result(restrict, paths), &[]))
}

fn restrict_and_exec(args: &[OsString]) -> io::Result<()> {
    let (writable, argv) = writable_paths(args)?;
    let Some((program, rest)) = argv.split_first() else {
        return Err(io::Error::other("no command after --"));
    };
    if let Some(writable) = writable {
        restrict_writes(&writable).map_err(io::Error::other)?;
    }
    let err = Command::new(program).args(rest).exec();
    Err(io::Error::other(format!("cannot run {program:?}: {err}")))
}

/// Landlock rules for everything this process and its descendants open for writing: only under
/// `writable`, `/tmp` and `/dev`. ABI 2 at least: under ABI 1 landlock refuses every rename
/// between directories, and rustc renames its outputs into place. Elsewhere the mounts are read-only anyway; what this closes is
/// `/proc`, where a process could otherwise lower its own OOM score (the host's root lacks
/// `CAP_SYS_RESOURCE` on some machines, so a floor cannot be set from outside) or write other
/// knobs of its own.
pub(crate) fn restrict_writes(writable: &[String]) -> Result<(), String> {
    use landlock::{
        ABI, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
        path_beneath_rules,
    };
    let access = AccessFs::from_write(ABI::V2);
    let mut paths: Vec<&str> = vec!["/tmp", "/dev"];
    paths.extend(writable.iter().map(String::as_str));
    paths.retain(|p| std::path::Path::new(p).exists());
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(access)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&paths, access)))
        .and_then(|r| r.restrict_self())
        .map(|_| ())
        .map_err(|e| format!("cannot restrict writes with landlock: {e}"))
}

/// Whether this kernel can apply [`restrict_writes`]; checked once, from the harness.
pub(crate) fn landlock_support() -> Result<(), String> {
    use landlock::{ABI, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
    static SUPPORT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    SUPPORT
        .get_or_init(|| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_write(ABI::V2))
                .and_then(|r| r.create())
                .map(|_| ())
                .map_err(|e| format!("landlock is not available: {e}"))
        })
        .clone()
}

fn serve(args: &[OsString]) -> io::Result<()> {
    let (writable, _) = writable_paths(args)?;
    if !rustix::process::getpid().is_init() {
        return Err(io::Error::other(
            "must run as PID 1 of its own PID namespace (bwrap --unshare-pid --as-pid-1)",
        ));
    }
    // When memory runs out, the sandbox should die first, not the harness next to it. Children
    // inherit the score (the launcher has usually set it already), and the write restriction
    // that follows keeps them from lowering it. It is written while this process's /proc files
    // are still its own, before it makes itself non-dumpable.
    let oom_raised = match std::fs::write("/proc/self/oom_score_adj", "1000") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("faultline-supervisor: cannot raise oom_score_adj: {e}");
            false
        }
    };
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    if let Some(writable) = writable {
        restrict_writes(&writable).map_err(io::Error::other)?;
    }
    let mut input = io::stdin().lock();
    let mut output = io::stdout().lock();
    let mut greeting = wire::GREETING.to_vec();
    greeting.push(oom_raised as u8);
    wire::write_frame(&mut output, &greeting)?;
    while let Some(frame) = wire::read_frame(&mut input)? {
        let req = Request::decode(&frame)?;
        let reply = run(&req);
        wire::write_frame(&mut output, &reply.encode())?;
    }
    Ok(())
}

/// Runs one command to completion or timeout; never fails, as a spawn error is a reply too.
fn run(req: &Request) -> Reply {
    let Some((program, args)) = req.argv.split_first() else {
        return refused(req, "empty command line".into());
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &req.workdir {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return refused(req, format!("cannot run `{program}`: {e}")),
    };
    let pid = Pid::from_child(&child);
    let mut pipes = [
        Pipe::new(
            child.stdout.take().expect("stdout is piped").into(),
            req.cap,
        ),
        Pipe::new(
            child.stderr.take().expect("stderr is piped").into(),
            req.cap,
        ),
    ];
    // Without a pidfd (kernels before 5.3) the command's exit is noticed by polling.
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
    let deadline = req.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut reaper = Reaper::new(Some(pid));
    let mut timed_out = false;
    while reaper.main_status.is_none() || pipes.iter().any(Pipe::is_open) {
        let running = reaper.main_status.is_none();
        let mut wait = match deadline {
            Some(d) if running && !timed_out => Some(d.saturating_duration_since(Instant::now())),
            _ => None,
        };
        if running && pidfd.is_none() {
            wait = Some(wait.map_or(POLL_TICK, |w| w.min(POLL_TICK)));
        }
        let exit_fd = pidfd.as_ref().filter(|_| running);
        let exited = wait_and_read(&mut pipes, exit_fd, wait);
        if running && (exited || pidfd.is_none()) {
            reaper.reap();
            if reaper.main_status.is_some() {
                // The command is done; whatever it left behind goes, as it would with the
                // sandbox of a one-shot exec.
                reaper.kill_everyone();
            }
        }
        if reaper.main_status.is_none()
            && !timed_out
            && deadline.is_some_and(|d| Instant::now() >= d)
        {
            timed_out = true;
            reaper.kill_everyone();
        }
    }
    let status = reaper
        .main_status
        .expect("the loop ends after the command exits");
    let [stdout, stderr] = pipes.map(|p| p.buf.finish(req.cap));
    let (exit_code, signal) = if timed_out {
        (None, Some(Signal::KILL.as_raw()))
    } else {
        shell_style(status)
    };
    Reply {
        id: req.id,
        exit_code,
        signal,
        timed_out,
        stdout,
        stderr,
    }
}

/// Reports a command killed by a signal as bubblewrap does (exit code 128 + signal), so a
/// session and a one-shot exec describe the same command the same way.
fn shell_style(status: WaitStatus) -> (Option<i32>, Option<i32>) {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => (Some(code), None),
        (None, Some(sig)) => (Some(128 + sig), None),
        (None, None) => (None, None),
    }
}

/// A command that could not start, reported as bubblewrap reports a failed exec.
fn refused(req: &Request, why: String) -> Reply {
    // Nothing of this command runs, but a previous command's orphans must not wait for the next.
    Reaper::new(None).kill_everyone();
    let mut err = CappedBuffer::new(req.cap);
    err.push(format!("faultline-supervisor: {why}\n").as_bytes());
    Reply {
        id: req.id,
        exit_code: Some(1),
        signal: None,
        timed_out: false,
        stdout: CappedBuffer::new(req.cap).finish(req.cap),
        stderr: err.finish(req.cap),
    }
}

/// Reaps every child of PID 1 (orphans land here), remembering the status of the command.
struct Reaper {
    main: Option<Pid>,
    main_status: Option<WaitStatus>,
}

impl Reaper {
    fn new(main: Option<Pid>) -> Self {
        Reaper {
            main,
            main_status: None,
        }
    }

    /// Collects every child that has exited, without blocking.
    fn reap(&mut self) {
        while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
            if Some(pid) == self.main {
                self.main_status = Some(status);
            }
        }
    }

    /// Kills every process in the sandbox but the supervisor, and reaps them.
    ///
    /// `kill(-1)` signals every process in the namespace at once, under the kernel's task-list
    /// lock, so even a fork bomb cannot outrun it for long. It fails with `ESRCH` only when
    /// there is nobody left to signal (dying processes and zombies still count), so it is
    /// repeated until then: a process in the middle of `fork` can still produce a child.
    fn kill_everyone(&mut self) {
        let start = Instant::now();
        loop {
            let sent = rustix::process::kill_process_group(Pid::INIT, Signal::KILL);
            self.reap();
            if sent == Err(rustix::io::Errno::SRCH) {
                return;
            }
            if start.elapsed() > KILL_PATIENCE {
                eprintln!(
                    "faultline-supervisor: processes survive SIGKILL after {KILL_PATIENCE:?}"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One of the command's output pipes, read into a capped buffer until end of file.
struct Pipe {
    file: Option<File>,
    buf: CappedBuffer,
}

impl Pipe {
    fn new(fd: OwnedFd, cap: usize) -> Self {
        Pipe {
            file: Some(File::from(fd)),
            buf: CappedBuffer::new(cap),
        }
    }

    fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Reads once from a pipe that poll reported ready; closes it at end of file.
    fn read(&mut self, chunk: &mut [u8]) {
        let Some(file) = &mut self.file else {
            return;
        };
        match file.read(chunk) {
            Ok(0) => self.file = None,
            Ok(n) => self.buf.push(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => self.file = None,
        }
    }
}

/// Waits until a pipe has data or closes, `exit_fd` (a pidfd) reports an exit, or `wait`
/// passes, then reads what the pipes have; returns whether the pidfd fired.
fn wait_and_read(pipes: &mut [Pipe; 2], exit_fd: Option<&OwnedFd>, wait: Option<Duration>) -> bool {
    let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
    let mut owners = Vec::with_capacity(2);
    for (i, pipe) in pipes.iter().enumerate() {
        if let Some(file) = &pipe.file {
            fds.push(PollFd::new(file, PollFlags::IN));
            owners.push(i);
        }
    }
    if let Some(fd) = exit_fd {
        fds.push(PollFd::new(fd, PollFlags::IN));
    }
    if fds.is_empty() {
        if let Some(w) = wait {
            std::thread::sleep(w);
        }
        return false;
    }
    let timeout = wait.map(|w| Timespec {
        tv_sec: w.as_secs() as i64,
        tv_nsec: w.subsec_nanos() as i64,
    });
    if rustix::event::poll(&mut fds, timeout.as_ref()).is_err() {
        // Interrupted: the caller's loop waits again.
        return false;
    }
    let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
    drop(fds);
    let mut chunk = [0u8; 64 * 1024];
    for (&i, &r) in owners.iter().zip(&ready) {
        if r {
            pipes[i].read(&mut chunk);
        }
    }
    exit_fd.is_some() && ready[owners.len()]
}
