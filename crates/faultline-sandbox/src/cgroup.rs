//! Per-sandbox limits through cgroup v1: a `pids` cgroup bounds how many tasks a sandbox may
//! have, a `cpu` cgroup how much CPU time it gets when the machine is busy, a `memory` cgroup how
//! much memory its processes hold together (the kernel's OOM killer then picks among them only).
//!
//! bubblewrap sets no resource limits, and `RLIMIT_NPROC` cannot stand in: the kernel does not
//! apply it to processes whose real uid is root, which is what the sandbox's uid 1000 is on the
//! host when the harness runs as root, and for any other uid it counts every process of that user
//! on the host (the harness and every other sandbox), so it cannot bound one sandbox. Nor does a
//! process limit alone keep a fork bomb from starving the machine: a thousand busy processes get
//! a thousand shares of the CPU, unless they share one group's.
//!
//! The delicate part is getting bubblewrap into the cgroups before it can fork. cgroup v1 places
//! threads one by one, so a thread of the harness moves into the cgroups and spawns bubblewrap
//! from there: bubblewrap is born inside, and so is everything it starts, with no window. Moving
//! a task costs an RCU grace period (milliseconds, more on a loaded machine), far too much to pay
//! per command, so the thread moves once and stays: each sandbox has one set of cgroups and one
//! [`Spawner`] thread living in them, and every command of the sandbox is spawned by that thread.
//! The limits therefore bound the sandbox as a whole, all its commands together.
//!
//! cgroup v2 moves whole processes only (the race-free way there is `clone3(CLONE_INTO_CGROUP)`,
//! which std does not offer), so on a host without the v1 hierarchies the limits are reported
//! unavailable.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

/// A cgroup v1 controller the sandbox uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    /// `pids`: a cap on the number of tasks.
    Pids,
    /// `cpu`: a weight when CPUs are contended.
    Cpu,
    /// `memory`: a cap on resident memory, page cache and tmpfs files included.
    Memory,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Memory => "memory",
        }
    }

    /// A setting that leaves the probe cgroup harmless.
    fn probe_setting(self) -> (&'static str, String) {
        match self {
            Controller::Pids => ("pids.max", "64".into()),
            Controller::Cpu => ("cpu.shares", "1024".into()),
            Controller::Memory => ("memory.limit_in_bytes", (64u64 << 20).to_string()),
        }
    }
}

/// Where this process may create cgroups of one controller.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    /// Our own cgroup's directory in the controller's v1 hierarchy; sandboxes get
    /// subdirectories.
    parent: PathBuf,
}

/// A controller's hierarchy, found and tried once per process; the error says why there is
/// none.
pub(crate) fn hierarchy(c: Controller) -> Result<&'static Hierarchy, &'static str> {
    static PIDS: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
    static CPU: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
    static MEMORY: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
    let cell = match c {
        Controller::Pids => &PIDS,
        Controller::Cpu => &CPU,
        Controller::Memory => &MEMORY,
    };
    cell.get_or_init(|| detect(c))
        .as_ref()
        .map_err(|e| e.as_str())
}

fn detect(c: Controller) -> Result<Hierarchy, String> {
    let name = c.name();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let (mount, mount_root) = mountinfo
        .lines()
        .find_map(|l| v1_mount(l, name))
        .ok_or_else(|| {
            format!(
                "no cgroup v1 `{name}` hierarchy is mounted (on cgroup v2 alone a spawn cannot \
                 be placed race-free without clone3)"
            )
        })?;
    let own = own_cgroup("/proc/self/cgroup", name)
        .ok_or_else(|| format!("this process has no cgroup in the `{name}` hierarchy"))?;
    let hierarchy = Hierarchy {
        parent: join_cgroup(&mount, &mount_root, &own),
    };
    sweep_stale(&hierarchy.parent);
    // Try the whole life cycle once, so a read-only or foreign hierarchy shows up here rather
    // than as a failure in the middle of a trial.
    let (file, value) = c.probe_setting();
    Spawner::start(vec![(&hierarchy, file, value)], Counters::default()).map_err(|e| {
        format!(
            "cannot run a thread in a `{name}` cgroup under {}: {e}",
            hierarchy.parent.display()
        )
    })?;
    Ok(hierarchy)
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

/// The mount point and root of a mountinfo line, if it is the v1 hierarchy of `controller`.
fn v1_mount(line: &str, controller: &str) -> Option<(PathBuf, String)> {
    let (left, right) = line.split_once(" - ")?;
    let mut right = right.split(' ');
    let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
    if fstype != "cgroup" || !options.split(',').any(|o| o == controller) {
        return None;
    }
    let fields: Vec<&str> = left.split(' ').collect();
    Some((PathBuf::from(fields.get(4)?), fields.get(3)?.to_string()))
}

/// The path of this process's cgroup in the hierarchy of `controller`, from a
/// `/proc/.../cgroup` file.
fn own_cgroup(file: &str, controller: &str) -> Option<String> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
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

/// One cgroup of a sandbox; removed (after killing anything left in it) when dropped.
#[derive(Debug)]
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A new, empty cgroup with one setting written.
    fn create(h: &Hierarchy, file: &str, value: &str) -> io::Result<Cgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "faultline-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = Cgroup {
            dir: h.parent.join(name),
        };
        std::fs::create_dir(&cgroup.dir)?;
        std::fs::write(cgroup.dir.join(file), value)?;
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
    // The spawner thread makes this process a member until the thread has fully exited, and
    // this process must not kill itself.
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

impl Drop for Cgroup {
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
            tracing::warn!("cgroup {} is still busy; left in place", dir.display());
        });
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Which of a spawner's cgroups count the events a command's record reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    /// The pids cgroup: forks refused.
    pub(crate) pids: Option<usize>,
    /// The memory cgroup: processes the OOM killer ended.
    pub(crate) memory: Option<usize>,
}

/// A thread living in a sandbox's cgroups, spawning the sandbox's processes there.
#[derive(Debug)]
pub(crate) struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    cgroups: Vec<Cgroup>,
    counters: Counters,
}

impl Spawner {
    /// Creates one cgroup per `(hierarchy, setting file, value)` and a thread inside them all;
    /// `counters` says which of them count refused forks and OOM kills. The thread is one of
    /// the tasks.
    pub(crate) fn start(
        cgroups: Vec<(&Hierarchy, &str, String)>,
        counters: Counters,
    ) -> io::Result<Spawner> {
        let cgroups = cgroups
            .into_iter()
            .map(|(h, file, value)| Cgroup::create(h, file, &value))
            .collect::<io::Result<Vec<_>>>()?;
        let tasks: Vec<PathBuf> = cgroups.iter().map(|c| c.dir.join("tasks")).collect();
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, moved) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("faultline-spawner".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
                let entered = tasks.iter().try_for_each(|t| std::fs::write(t, &tid));
                let inside = entered.is_ok();
                let _ = ready.send(entered);
                if inside {
                    for job in inbox {
                        job();
                    }
                }
                // Ending the thread takes it out of the cgroups, with no move to pay for.
            })?;
        let entered = moved
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the spawner thread died")));
        let spawner = Spawner {
            jobs: Some(jobs),
            thread: Some(thread),
            cgroups,
            counters,
        };
        entered.map(|()| spawner)
    }

    /// Runs `f` on the thread inside the cgroups, so whatever it spawns starts there.
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

    /// How many times the task limit refused a fork so far.
    pub(crate) fn limit_hits(&self) -> u64 {
        self.count(self.counters.pids, "pids.events", "max ")
    }

    /// How many processes the memory limit's OOM killer ended so far.
    pub(crate) fn oom_kills(&self) -> u64 {
        self.count(self.counters.memory, "memory.oom_control", "oom_kill ")
    }

    fn count(&self, cgroup: Option<usize>, file: &str, key: &str) -> u64 {
        let Some(cgroup) = cgroup.map(|i| &self.cgroups[i]) else {
            return 0;
        };
        std::fs::read_to_string(cgroup.dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|n| n.trim().parse().ok()))
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
    fn finds_v1_hierarchies_in_mountinfo() {
        let line = "35 25 0:30 / /sys/fs/cgroup/pids rw,relatime shared:13 - cgroup cgroup rw,pids";
        assert_eq!(
            v1_mount(line, "pids"),
            Some((PathBuf::from("/sys/fs/cgroup/pids"), "/".into()))
        );
        let comounted = "35 25 0:30 /ns /cg rw - cgroup cgroup rw,cpu,cpuacct";
        assert_eq!(
            v1_mount(comounted, "cpu"),
            Some((PathBuf::from("/cg"), "/ns".into()))
        );
        let cpuset = "35 25 0:30 / /x rw - cgroup cgroup rw,cpuset";
        assert_eq!(v1_mount(cpuset, "cpu"), None);
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(v1_mount(v2, "pids"), None);
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
