//! The processes of a sandbox seen from the host: descriptors that must not leak into it, finding
//! its PID 1, killing it and waiting until nothing of it runs, and draining its output.

use crate::capture::CappedBuffer;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Descriptors of this process, other than the standard three, that a program it spawns would
/// inherit.
///
/// Rust opens everything close-on-exec, so these were inherited by the harness itself (from a
/// shell, a CI runner, cargo's jobserver), or, in the launcher, opened for bubblewrap to read.
/// bubblewrap does not close them, and a command that finds one can write into whatever the
/// harness's parent reads, or drain a jobserver; the command line closes them instead (see
/// [`crate::bwrap::close_fds_prefix`]).
pub(crate) fn inheritable_fds() -> Vec<u32> {
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
pub(crate) async fn kill_sandbox(
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

/// Reads a stream to its end, keeping what the cap allows.
pub(crate) async fn drain<R: AsyncRead + Unpin>(
    mut r: R,
    cap: usize,
) -> std::io::Result<CappedBuffer> {
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
