//! A process limit per sandbox, through a cgroup of the `pids` controller (cgroup v1).
//!
//! bubblewrap sets no resource limits, and `RLIMIT_NPROC` cannot stand in: the kernel does not
//! apply it to processes whose real uid is root, which is what the sandbox's uid 1000 is on the
//! host when the harness runs as root, and for any other uid it counts every process of that user
//! on the host (the harness and every other sandbox), so it cannot bound one sandbox.
//!
//! The delicate part is getting bubblewrap into the cgroup before it can fork. cgroup v1 places
//! threads one by one, so a thread of the harness moves into the cgroup and spawns bubblewrap
//! from there: bubblewrap is born inside, and so is everything it starts, with no window. Moving
//! a task costs an RCU grace period (milliseconds, more on a loaded machine), far too much to pay
//! per command, so the thread moves once and stays: each sandbox has one cgroup and one
//! [`Spawner`] thread living in it, and every command of the sandbox is spawned by that thread.
//! The limit therefore bounds the sandbox as a whole, all its commands together.
//!
//! cgroup v2 moves whole processes only (the race-free way there is `clone3(CLONE_INTO_CGROUP)`,
//! which std does not offer), so on a host without a v1 `pids` hierarchy the limit is reported
//! unavailable.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

/// Where this process may create pids cgroups.
#[derive(Debug)]
pub(crate) struct PidsRoot {
    /// Our own cgroup's directory in the v1 `pids` hierarchy; sandboxes get subdirectories.
    parent: PathBuf,
}

/// The pids hierarchy, found and tried once per process; the error says why there is none.
pub(crate) fn root() -> Result<&'static PidsRoot, &'static str> {
    static ROOT: OnceLock<Result<PidsRoot, String>> = OnceLock::new();
    ROOT.get_or_init(detect).as_ref().map_err(|e| e.as_str())
}

fn detect() -> Result<PidsRoot, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let (mount, mount_root) = mountinfo.lines().find_map(pids_mount).ok_or_else(|| {
        "no cgroup v1 `pids` hierarchy is mounted (cgroup v2 alone cannot place a spawn \
             race-free without clone3)"
            .to_string()
    })?;
    let own = own_cgroup("/proc/self/cgroup")
        .ok_or("this process has no cgroup in the `pids` hierarchy")?;
    let root = PidsRoot {
        parent: join_cgroup(&mount, &mount_root, &own),
    };
    sweep_stale(&root.parent);
    // Try the whole life cycle once, so a read-only or foreign hierarchy shows up here rather
    // than as a failure in the middle of a trial.
    let probe = Spawner::start(&root, 64).map_err(|e| {
        format!(
            "cannot run a thread in a pids cgroup under {}: {e}",
            root.parent.display()
        )
    })?;
    drop(probe);
    Ok(root)
}

/// Removes the cgroups of harness processes that died before cleaning up after themselves.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("faultline-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        kill_members(&entry.path());
        let _ = std::fs::remove_dir(entry.path());
    }
}

/// The mount point and root of a mountinfo line, if it is the v1 `pids` hierarchy.
fn pids_mount(line: &str) -> Option<(PathBuf, String)> {
    let (left, right) = line.split_once(" - ")?;
    let mut right = right.split(' ');
    let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
    if fstype != "cgroup" || !options.split(',').any(|o| o == "pids") {
        return None;
    }
    let fields: Vec<&str> = left.split(' ').collect();
    Some((PathBuf::from(fields.get(4)?), fields.get(3)?.to_string()))
}

/// The path of this process's cgroup in the `pids` hierarchy, from a `/proc/.../cgroup` file.
fn own_cgroup(file: &str) -> Option<String> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| path.to_string())
    })
}

fn join_cgroup(mount: &Path, mount_root: &str, cgroup: &str) -> PathBuf {
    let root = mount_root.trim_end_matches('/');
    let relative = match cgroup.strip_prefix(root) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => cgroup,
    };
    mount.join(relative.trim_start_matches('/'))
}

/// One sandbox's pids cgroup; removed (after killing anything left in it) when dropped.
#[derive(Debug)]
struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    /// A new, empty cgroup admitting at most `max` tasks.
    fn create(root: &PidsRoot, max: u32) -> io::Result<PidsCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "faultline-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = PidsCgroup {
            dir: root.parent.join(name),
        };
        std::fs::create_dir(&cgroup.dir)?;
        std::fs::write(cgroup.dir.join("pids.max"), max.to_string())?;
        Ok(cgroup)
    }

    fn remove(&self) -> io::Result<()> {
        std::fs::remove_dir(&self.dir)
    }
}

fn kill_members(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    // Never this process: it is in no sandbox's cgroup, but a bug must not make it kill itself.
    let me = std::process::id();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if pid as u32 == me {
            continue;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Everything the sandbox ran is normally gone by now; anything left is killed, and a
        // background thread waits for the kernel to finish tearing it down.
        for _ in 0..50 {
            if self.remove().is_ok() {
                return;
            }
            kill_members(&self.dir);
            std::thread::sleep(Duration::from_millis(1));
        }
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            for _ in 0..500 {
                std::thread::sleep(Duration::from_millis(10));
                kill_members(&dir);
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    return;
                }
            }
            tracing::warn!("pids cgroup {} is still busy; left in place", dir.display());
        });
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread living in a sandbox's pids cgroup, spawning the sandbox's processes there.
#[derive(Debug)]
pub(crate) struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    cgroup: PidsCgroup,
}

impl Spawner {
    /// Creates the cgroup, admitting at most `max` tasks (the spawner thread is one of them),
    /// and a thread inside it.
    pub(crate) fn start(root: &PidsRoot, max: u32) -> io::Result<Spawner> {
        let cgroup = PidsCgroup::create(root, max)?;
        let tasks = cgroup.dir.join("tasks");
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, moved) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("faultline-spawner".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
                let entered = std::fs::write(&tasks, tid);
                let inside = entered.is_ok();
                let _ = ready.send(entered);
                if inside {
                    for job in inbox {
                        job();
                    }
                }
                // Ending the thread takes it out of the cgroup, with no move to pay for.
            })?;
        let entered = moved
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the spawner thread died")));
        let spawner = Spawner {
            jobs: Some(jobs),
            thread: Some(thread),
            cgroup,
        };
        entered.map(|()| spawner)
    }

    /// Runs `f` on the thread inside the cgroup, so whatever it spawns starts there.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(Box::new(move || {
            let _ = tx.send(f());
        }))?;
        rx.await
            .map_err(|_| io::Error::other("the spawner thread is gone"))
    }

    /// Like [`Spawner::run`], blocking the calling thread.
    pub(crate) fn run_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = mpsc::channel();
        self.submit(Box::new(move || {
            let _ = tx.send(f());
        }))?;
        rx.recv()
            .map_err(|_| io::Error::other("the spawner thread is gone"))
    }

    fn submit(&self, job: Job) -> io::Result<()> {
        self.jobs
            .as_ref()
            .expect("jobs are open until drop")
            .send(job)
            .map_err(|_| io::Error::other("the spawner thread is gone"))
    }

    /// How many times the limit refused a fork so far.
    pub(crate) fn limit_hits(&self) -> u64 {
        std::fs::read_to_string(self.cgroup.dir.join("pids.events"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("max ").and_then(|n| n.trim().parse().ok()))
            })
            .unwrap_or(0)
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_pids_hierarchy_in_mountinfo() {
        let line = "35 25 0:30 / /sys/fs/cgroup/pids rw,relatime shared:13 - cgroup cgroup rw,pids";
        assert_eq!(
            pids_mount(line),
            Some((PathBuf::from("/sys/fs/cgroup/pids"), "/".into()))
        );
        let comounted = "35 25 0:30 /ns /cg rw - cgroup cgroup rw,cpu,pids";
        assert_eq!(
            pids_mount(comounted),
            Some((PathBuf::from("/cg"), "/ns".into()))
        );
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(pids_mount(v2), None);
        let pidsish = "35 25 0:30 / /x rw - cgroup cgroup rw,pidsx";
        assert_eq!(pids_mount(pidsish), None);
    }

    #[test]
    fn joins_a_cgroup_path_under_its_mount() {
        let m = Path::new("/sys/fs/cgroup/pids");
        assert_eq!(join_cgroup(m, "/", "/"), m);
        assert_eq!(join_cgroup(m, "/", "/a/b"), m.join("a/b"));
        assert_eq!(join_cgroup(m, "/ns", "/ns/a"), m.join("a"));
        assert_eq!(join_cgroup(m, "/ns", "/nsx/a"), m.join("nsx/a"));
    }
}
