//! Prints `../leader-rpc-trace.md`: the oracle's scenario (leader 0 snapshots and purges its
//! whole log while learner 1 is unreachable, then the learner comes back) on tokio's paused
//! clock, with every RPC to the learner as the scenario's network reports it. Times are virtual,
//! so every run prints the same text.

#[path = "../../../oracle/tests/purged_log.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scenario::{purge_behind_learner, request};
use tokio::time::Instant;

/// Trace lines; a run of identical RPC lines is collapsed into one with a count.
struct Trace {
    start: Instant,
    lines: Vec<String>,
    last: Option<String>,
    repeats: usize,
}

impl Trace {
    fn log(&mut self, line: String) {
        // The unreachable error names the scenario's error type by its module path; keep its text.
        let line = line.replace(concat!(env!("CARGO_CRATE_NAME"), "::scenario::Down: "), "");
        if self.last.as_deref() == Some(line.as_str()) {
            self.repeats += 1;
            return;
        }
        if self.repeats > 0 {
            self.lines.push(format!("          (same line {} more times)", self.repeats));
            self.repeats = 0;
        }
        self.lines.push(format!("{:>6} ms  {}", self.start.elapsed().as_millis(), line));
        self.last = Some(line);
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let trace = Arc::new(Mutex::new(Trace { start: Instant::now(), lines: Vec::new(), last: None, repeats: 0 }));
    let t = trace.clone();
    let log = move |line: String| t.lock().unwrap().log(line);
    log("leader 0 created; node 1 unreachable".into());
    let rpc = log.clone();
    let nodes = purge_behind_learner(Some(Arc::new(move |line| rpc(line)))).await;
    let m = nodes.leader.metrics().borrow().clone();
    let show = |l: Option<openraft::LogId<u64>>| l.map(|l| l.to_string()).unwrap_or("None".into());
    log(format!("3 client writes and add_learner(1) done; leader: last_log_index={:?} snapshot={} purged={}", m.last_log_index, show(m.snapshot), show(m.purged)));
    nodes.reconnect();
    log("node 1 reachable again (no more client writes)".into());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = nodes.learner.metrics().borrow().clone();
    log(format!("3 s later, learner 1: last_log={:?} last_applied={} snapshot={}", m.last_log_index, show(m.last_applied), show(m.snapshot)));
    let m = nodes.leader.metrics().borrow().clone();
    let matched = m.replication.as_ref().and_then(|r| r.get(&1).cloned()).flatten();
    log(format!("leader 0: replication matched for node 1 = {}", show(matched)));
    log("one more client write".into());
    nodes.leader.client_write(request(4)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m = nodes.learner.metrics().borrow().clone();
    log(format!("1 s later, learner 1: last_log={:?} last_applied={} snapshot={}", m.last_log_index, show(m.last_applied), show(m.snapshot)));
    let sent = nodes.link.snapshots.load(std::sync::atomic::Ordering::SeqCst);
    log(format!("InstallSnapshot requests delivered to node 1 in the whole run: {}", sent));

    println!("# RPCs from leader 0 to learner 1\n");
    println!("One voter (node 0) and one learner (node 1), both on openraft-memstore. `heartbeat_interval =");
    println!("100`, `max_in_snapshot_log_to_keep = 0`, `purge_batch_size = 1`. The leader's `RaftNetwork` logs");
    println!("every RPC to node 1 with its answer; a run of identical lines is collapsed. Node 1 is unreachable");
    println!("until the leader has snapshotted and purged its log. Times are milliseconds since the start.\n");
    println!("```text");
    for l in trace.lock().unwrap().lines.iter() {
        println!("{}", l);
    }
    println!("```");
}
