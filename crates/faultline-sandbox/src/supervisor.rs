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
use crate::wire::{self, Reply, Request};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions, WaitStatus};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{ChildStderr, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long the supervisor keeps killing stragglers before it reports that it cannot.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// Runs the supervisor on standard input and output until the harness closes its input.
///
/// This is the whole of the `faultline-supervisor` binary; a program that wants to be its own
/// supervisor can call it when started under that role.
pub fn main() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve() -> io::Result<()> {
    if !rustix::process::getpid().is_init() {
        return Err(io::Error::other(
            "must run as PID 1 of its own PID namespace (bwrap --unshare-pid --as-pid-1)",
        ));
    }
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    // When memory runs out, the sandbox should die first, not the harness next to it. Children
    // inherit the score and cannot lower it without CAP_SYS_RESOURCE.
    let oom_raised = match std::fs::write("/proc/self/oom_score_adj", "1000") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("faultline-supervisor: cannot raise oom_score_adj: {e}");
            false
        }
    };
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
        Err(e) => {
            // A failed spawn may have left nothing, but a previous command's orphans must not
            // wait for the next one.
            let mut reaper = Reaper::new(None);
            reaper.kill_everyone();
            return refused(req, format!("cannot run `{program}`: {e}"));
        }
    };
    let pid = Pid::from_child(&child);
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut reaper = Reaper::new(Some(pid));
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
    let mut streams = Streams::new(stdout, stderr, req.cap);
    let deadline = req.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut timed_out = false;
    loop {
        if reaper.main_status.is_some() && streams.all_closed() {
            break;
        }
        let waiting_for_main = reaper.main_status.is_none();
        let mut wait = if waiting_for_main && !timed_out {
            deadline.map(|d| d.saturating_duration_since(Instant::now()))
        } else {
            None
        };
        if waiting_for_main && pidfd.is_none() {
            // Without a pidfd (kernels before 5.3) the exit is noticed by polling.
            wait = Some(wait.map_or(Duration::from_millis(5), |w| {
                w.min(Duration::from_millis(5))
            }));
        }
        let ready = streams.poll(pidfd.as_ref().filter(|_| waiting_for_main), wait);
        if ready.main_exited || (waiting_for_main && pidfd.is_none()) {
            reaper.reap();
            if reaper.main_status.is_some() {
                // The command is done; whatever it left behind goes, as it would with the
                // sandbox it would have had to itself.
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
    let status = reaper.main_status.expect("the loop ends after the command exits");
    let (stdout, stderr) = streams.finish(req.cap);
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

/// A command that could not start: reported as bubblewrap reports a failed exec.
fn refused(req: &Request, why: String) -> Reply {
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
    /// lock, so even a fork bomb cannot outrun it for long; it is repeated until `/proc` shows
    /// nobody else, because a process in the middle of `fork` can still produce a child.
    fn kill_everyone(&mut self) {
        let start = Instant::now();
        loop {
            let _ = rustix::process::kill_process_group(Pid::INIT, Signal::KILL);
            self.reap();
            if !others_alive() {
                return;
            }
            if start.elapsed() > KILL_PATIENCE {
                eprintln!("faultline-supervisor: processes survive SIGKILL after {KILL_PATIENCE:?}");
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether any process but the supervisor exists in the sandbox.
fn others_alive() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|pid| pid != 1)
    })
}

/// What a call to [`Streams::poll`] found.
struct Ready {
    main_exited: bool,
}

/// The command's two output pipes, each read into a capped buffer until end of file.
struct Streams {
    out: Option<ChildStdout>,
    err: Option<ChildStderr>,
    out_buf: CappedBuffer,
    err_buf: CappedBuffer,
    chunk: Vec<u8>,
}

impl Streams {
    fn new(out: ChildStdout, err: ChildStderr, cap: usize) -> Self {
        Streams {
            out: Some(out),
            err: Some(err),
            out_buf: CappedBuffer::new(cap),
            err_buf: CappedBuffer::new(cap),
            chunk: vec![0u8; 64 * 1024],
        }
    }

    fn all_closed(&self) -> bool {
        self.out.is_none() && self.err.is_none()
    }

    /// Waits until a pipe has data or closes, the pidfd says the command exited, or `wait`
    /// passes; then reads what is there.
    fn poll(&mut self, pidfd: Option<&OwnedFd>, wait: Option<Duration>) -> Ready {
        let flags = PollFlags::IN;
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        if let Some(out) = &self.out {
            fds.push(PollFd::new(out, flags));
        }
        if let Some(err) = &self.err {
            fds.push(PollFd::new(err, flags));
        }
        if let Some(pidfd) = pidfd {
            fds.push(PollFd::new(pidfd, flags));
        }
        let timeout = wait.map(|w| Timespec {
            tv_sec: w.as_secs() as i64,
            tv_nsec: w.subsec_nanos() as i64,
        });
        if fds.is_empty() {
            if let Some(w) = wait {
                std::thread::sleep(w);
            }
            return Ready { main_exited: false };
        }
        if rustix::event::poll(&mut fds, timeout.as_ref()).is_err() {
            // EINTR or EAGAIN: the caller's loop polls again.
            return Ready { main_exited: false };
        }
        let revents: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        let mut i = 0;
        if self.out.is_some() {
            if revents[i] {
                let closed = read_into(self.out.as_mut().expect("open"), &mut self.chunk, &mut self.out_buf);
                if closed {
                    self.out = None;
                }
            }
            i += 1;
        }
        if self.err.is_some() {
            if revents[i] {
                let closed = read_into(self.err.as_mut().expect("open"), &mut self.chunk, &mut self.err_buf);
                if closed {
                    self.err = None;
                }
            }
            i += 1;
        }
        Ready {
            main_exited: pidfd.is_some() && revents[i],
        }
    }

    fn finish(self, cap: usize) -> (crate::CapturedText, crate::CapturedText) {
        (self.out_buf.finish(cap), self.err_buf.finish(cap))
    }
}

/// Reads once from a pipe that poll reported ready; true when it is closed (or broken).
fn read_into(pipe: &mut impl Read, chunk: &mut [u8], buf: &mut CappedBuffer) -> bool {
    match pipe.read(chunk) {
        Ok(0) => true,
        Ok(n) => {
            buf.push(&chunk[..n]);
            false
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
        Err(_) => true,
    }
}
