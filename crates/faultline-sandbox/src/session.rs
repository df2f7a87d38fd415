//! A sandbox kept alive for a whole trial: the harness's side of a [`Session`].

use crate::capture::CappedBuffer;
use crate::reap::{child_pidfds, drain, wait_gone};
use crate::wire::{self, Reply, Request};
use crate::{ExecOutput, ExecRequest, Protection, Protections, Sandbox, SandboxError};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

/// The file name of the supervisor binary, built from this crate.
pub const SUPERVISOR_BIN: &str = "faultline-supervisor";

/// Where the supervisor binary is mounted inside a session's sandbox.
pub(crate) const SUPERVISOR_GUEST: &str = "/run/faultline-supervisor";

/// How long a new sandbox may take to greet; generous, as a loaded machine can be slow.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How much longer than a command's own timeout the harness waits for the reply: the supervisor
/// may need a few seconds to kill a fork bomb and drain the pipes. Past it, the session is
/// declared lost rather than trusted.
const REPLY_GRACE: Duration = Duration::from_secs(15);

/// Characters of the supervisor's own standard error kept to explain a lost session.
const DIAGNOSTIC_CAP: usize = 2000;

/// Finds the supervisor binary: `$FAULTLINE_SUPERVISOR`, else next to the running executable or
/// one directory up (where cargo puts a workspace's binaries relative to its tests and benches).
///
/// A plain `cargo build` or `cargo test` of the workspace builds it; a build of another package
/// alone does not, so callers should treat [`SandboxError::NoSupervisor`] as "fall back to
/// [`Sandbox::exec`]".
pub fn supervisor_path() -> Result<PathBuf, SandboxError> {
    if let Some(p) = SUPERVISOR_OVERRIDE.get() {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("FAULTLINE_SUPERVISOR") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(SandboxError::NoSupervisor(format!(
                "FAULTLINE_SUPERVISOR names {}, which is not a file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(SUPERVISOR_BIN))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            SandboxError::NoSupervisor(format!(
                "not next to {} nor one directory up, and FAULTLINE_SUPERVISOR is not set",
                exe.display()
            ))
        })
}

static SUPERVISOR_OVERRIDE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Names the supervisor binary for this process, ahead of every other place it is looked for.
/// A program that runs [`crate::supervisor::main`] itself when started as [`SUPERVISOR_BIN`] can
/// name its own executable, so sessions work wherever that program does.
pub fn use_supervisor(path: PathBuf) {
    let _ = SUPERVISOR_OVERRIDE.set(path);
}

/// A sandbox kept alive for many commands.
///
/// A one-shot [`Sandbox::exec`] pays for bubblewrap every time: new namespaces, a dozen mounts,
/// a procfs. A session pays once: one bubblewrap runs the supervisor ([`crate::supervisor`]) as
/// PID 1, and each command is one request on a pipe and one plain spawn inside. The semantics
/// stay those of `exec` (timeout kills everything the command started, nothing outlives it,
/// output capped, same limits), with one difference that follows from keeping the sandbox: the
/// tmpfs mounts (`/tmp`, [`SandboxSpec::tmpfs`](crate::SandboxSpec::tmpfs)) keep their files
/// from one command to the next, as a container's would.
///
/// The supervisor is a separate binary ([`SUPERVISOR_BIN`]), since it runs inside the sandbox's
/// namespaces where the harness cannot. It is Rust rather than a script because it must make
/// itself non-dumpable and reap every orphan as PID 1, which a shell cannot; see
/// [`supervisor_path`] for where it is looked for.
///
/// Commands run one at a time, in the order their [`Session::exec`] calls take the session's
/// lock. Dropping the session kills the sandbox and everything in it.
#[derive(Debug)]
pub struct Session {
    conn: tokio::sync::Mutex<Conn>,
    protections: Protections,
    // Declared after `conn`, so the sandbox is killed before its cgroup can go.
    sandbox: Sandbox,
}

#[derive(Debug)]
struct Conn {
    child: Child,
    /// The supervisor (PID 1 inside), to wait for when the session ends.
    init: Vec<OwnedFd>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: Option<JoinHandle<io::Result<CappedBuffer>>>,
    next_id: u64,
    /// Set for good once the session cannot be trusted any more.
    lost: Option<String>,
    /// A request was sent and its reply not read: the exec that sent it was dropped.
    in_flight: bool,
}

impl Sandbox {
    /// Starts a session with the supervisor found by [`supervisor_path`].
    pub async fn start_session(&self) -> Result<Session, SandboxError> {
        self.start_session_with(&supervisor_path()?).await
    }

    /// Starts a session with the supervisor binary at `supervisor` on the host.
    pub async fn start_session_with(&self, supervisor: &Path) -> Result<Session, SandboxError> {
        if !supervisor.is_file() {
            return Err(SandboxError::NoSupervisor(format!(
                "{} is not a file",
                supervisor.display()
            )));
        }
        let mut argv = vec![SUPERVISOR_GUEST.to_string()];
        argv.extend(self.write_options());
        let invocation = self.invocation(Some(supervisor), &BTreeMap::new(), None, &argv);
        let mut child = self.spawn_bwrap(invocation, Stdio::piped()).await?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut conn = Conn {
            init: Vec::new(),
            child,
            stdin,
            stdout,
            stderr: Some(tokio::spawn(drain(stderr, DIAGNOSTIC_CAP))),
            next_id: 0,
            lost: None,
            in_flight: false,
        };
        let greeting = tokio::time::timeout(START_TIMEOUT, read_frame(&mut conn.stdout)).await;
        let oom_raised = match greeting {
            Ok(Ok(Some(g))) if g.starts_with(wire::GREETING) => g[wire::GREETING.len()..] == [1],
            Ok(Ok(Some(_))) => return Err(conn.lose("it sent a garbled greeting".into()).await),
            Ok(Ok(None)) => return Err(conn.lose("it exited at start".into()).await),
            Ok(Err(e)) => return Err(conn.lose(format!("reading its greeting: {e}")).await),
            Err(_) => {
                return Err(conn
                    .lose(format!("no greeting within {START_TIMEOUT:?}"))
                    .await);
            }
        };
        // Greeted, so bubblewrap has started it: its only child is the supervisor.
        conn.init = child_pidfds(conn.child.id());
        let mut protections = self.protections.clone();
        if !oom_raised {
            protections.oom_first =
                Protection::Unavailable("the supervisor could not raise its oom_score_adj".into());
        }
        Ok(Session {
            conn: tokio::sync::Mutex::new(conn),
            protections,
            sandbox: self.clone(),
        })
    }
}

impl Session {
    /// Runs a command in the session's sandbox, as [`Sandbox::exec`] would in a fresh one.
    ///
    /// An error means the session is lost (its supervisor died, hung or misbehaved) and every
    /// later call fails too; start a new session. Dropping the returned future before it
    /// completes also loses the session, since the command may still be running.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let mut conn = self.conn.lock().await;
        if let Some(why) = &conn.lost {
            return Err(SandboxError::SessionLost(why.clone()));
        }
        if conn.in_flight {
            return Err(conn
                .lose("an earlier exec was dropped while its command ran".into())
                .await);
        }
        conn.next_id += 1;
        let request = Request {
            id: conn.next_id,
            argv: req.argv.clone(),
            env: req
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            workdir: req.workdir.clone(),
            timeout: Some(req.timeout),
            cap: req.output_cap,
        };
        let counts_before = self.sandbox.limit_counts();
        let start = Instant::now();
        conn.in_flight = true;
        let exchange = tokio::select! {
            reply = conn.round_trip(&request, req.timeout.saturating_add(REPLY_GRACE)) => Some(reply),
            () = self.sandbox.disk_over_limit() => None,
        };
        let reply = match exchange {
            Some(Ok(reply)) if reply.id == request.id => reply,
            Some(Ok(reply)) => {
                let why = format!("reply {} to request {}", reply.id, request.id);
                return Err(conn.lose(why).await);
            }
            Some(Err(why)) => return Err(conn.lose(why).await),
            None => {
                // The command is killed with its sandbox; the next exec says the session is lost.
                let _ = conn
                    .lose("was killed: the disk limit was exceeded".into())
                    .await;
                return Ok(disk_killed(req, start.elapsed()));
            }
        };
        conn.in_flight = false;
        let duration = start.elapsed();
        let disk_limit_hit =
            duration >= crate::disk::SHORT_COMMAND && self.sandbox.disk_exceeded().await;
        if disk_limit_hit {
            let _ = conn
                .lose("was killed: the disk limit was exceeded".into())
                .await;
        }
        let counts_after = self.sandbox.limit_counts();
        Ok(ExecOutput {
            exit_code: reply.exit_code,
            signal: reply.signal,
            timed_out: reply.timed_out,
            stdout: reply.stdout,
            stderr: reply.stderr,
            duration,
            process_limit_hit: counts_after.0 > counts_before.0,
            memory_limit_hit: counts_after.1 > counts_before.1,
            disk_limit_hit,
        })
    }

    /// The protections its commands run under.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// Ends the session: the supervisor exits when its input closes, and its sandbox with it.
    pub async fn close(self) -> Result<(), SandboxError> {
        let Conn {
            mut child,
            stdin,
            init,
            ..
        } = self.conn.into_inner();
        drop(stdin);
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            child.start_kill()?;
            child.wait().await?;
        }
        wait_gone(&init).await;
        Ok(())
    }
}

impl Conn {
    async fn round_trip(&mut self, req: &Request, limit: Duration) -> Result<Reply, String> {
        let exchange = async {
            self.stdin.write_all(&wire::frame(&req.encode())).await?;
            self.stdin.flush().await?;
            read_frame(&mut self.stdout).await
        };
        match tokio::time::timeout(limit, exchange).await {
            Err(_) => Err(format!("no reply within {limit:?}")),
            Ok(Err(e)) => Err(format!("talking to the supervisor: {e}")),
            Ok(Ok(None)) => Err("the supervisor exited".into()),
            Ok(Ok(Some(frame))) => {
                Reply::decode(&frame).map_err(|e| format!("unreadable reply: {e}"))
            }
        }
    }

    /// Kills the sandbox, marks the session lost, and says why, with what the supervisor
    /// printed.
    async fn lose(&mut self, why: String) -> SandboxError {
        let _ = self.child.start_kill();
        wait_gone(&self.init).await;
        let mut message = format!("the supervisor {why}");
        if let Some(task) = self.stderr.take()
            && let Ok(Ok(Ok(buf))) = tokio::time::timeout(Duration::from_secs(2), task).await
        {
            let text = buf.finish(DIAGNOSTIC_CAP).text;
            let text = text.trim();
            if !text.is_empty() {
                message.push_str(&format!("; it said: {text}"));
            }
        }
        self.lost = Some(message.clone());
        SandboxError::SessionLost(message)
    }
}

/// The record of a command killed with its session for writing past the disk limit.
fn disk_killed(req: &ExecRequest, duration: Duration) -> ExecOutput {
    let mut err = CappedBuffer::new(req.output_cap);
    err.push(b"faultline: the sandbox was killed for writing past its disk limit\n");
    ExecOutput {
        exit_code: None,
        signal: Some(9),
        timed_out: false,
        stdout: CappedBuffer::new(req.output_cap).finish(req.output_cap),
        stderr: err.finish(req.output_cap),
        duration,
        process_limit_hit: false,
        memory_limit_hit: false,
        disk_limit_hit: true,
    }
}

/// Reads one frame; `None` when the stream ends first.
async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut payload = vec![0u8; wire::frame_len(header)?];
    r.read_exact(&mut payload).await?;
    Ok(Some(payload))
}
