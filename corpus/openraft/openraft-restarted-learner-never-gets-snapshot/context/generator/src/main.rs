//! Prints `../snapshot-rpc-trace.md`: the oracle's scenario with one restart of learner 1 after
//! it accepted two snapshot chunks, on tokio's paused clock, with every RPC the leader sends to
//! the learner as the scenario's network reports it. Times are virtual, so every run prints the
//! same text.

#[path = "../../../oracle/tests/restarted_learner.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scenario::{learner_reaches, start, Plan};
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
        if self.last.as_deref() == Some(line.as_str()) {
            self.repeats += 1;
            return;
        }
        self.flush();
        self.lines.push(format!("{:>6} ms  {}", self.start.elapsed().as_millis(), line));
        self.last = Some(line);
    }

    fn flush(&mut self) {
        if self.repeats > 0 {
            self.lines.push(format!("          (same line {} more times)", self.repeats));
            self.repeats = 0;
        }
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let plan = Plan { writes: 15, status_len: 12, chunk: 128, restart_after: vec![2], keep_store: true };
    let trace = Arc::new(Mutex::new(Trace { start: Instant::now(), lines: Vec::new(), last: None, repeats: 0 }));
    let t = trace.clone();
    let log = move |line: String| t.lock().unwrap().log(line);
    log("leader 0 initialized alone; learner 1 running with empty storage".into());
    let rpc = log.clone();
    let c = start(plan.clone(), Some(Arc::new(move |line| rpc(line)))).await;
    let m = c.leader.metrics().borrow().clone();
    let show = |l: Option<openraft::LogId<u64>>| l.map(|l| l.to_string()).unwrap_or("None".into());
    log(format!(
        "(setup) 15 client writes, snapshot + purge_log, add_learner(1) returned; leader: last_log_index={:?} snapshot={} purged={}",
        m.last_log_index,
        show(m.snapshot),
        show(m.purged)
    ));
    let target = m.last_log_index.unwrap();
    let ok = learner_reaches(&c.link, target, 5).await;
    trace.lock().unwrap().flush();
    let m = c.link.learner().metrics().borrow().clone();
    log(format!(
        "5 s later: learner caught up = {ok}; learner 1: last_log_index={:?} last_applied={} snapshot={}",
        m.last_log_index,
        show(m.last_applied),
        show(m.snapshot)
    ));
    let m = c.leader.metrics().borrow().clone();
    let matched = m.replication.as_ref().and_then(|r| r.get(&1).cloned()).flatten();
    log(format!("leader 0: replication matched for node 1 = {}", show(matched)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    trace.lock().unwrap().flush();

    let lines = trace.lock().unwrap().lines.clone();
    println!("# Leader-side RPC trace: learner restarted during a snapshot transfer\n");
    println!("Two nodes in one process (openraft with the in-memory example store), leader 0 and learner 1,");
    println!("`snapshot_max_chunk_size = 128`, `max_in_snapshot_log_to_keep = 0`. Every line is an RPC the");
    println!("leader sent to node 1 and what came back, as seen by the test network. Times are since the");
    println!("start of the run. Node 1 is restarted (same storage) right after it accepted its second chunk.\n");
    println!("```text");
    for l in lines {
        println!("{l}");
    }
    println!("```");
    c.leader.shutdown().await.unwrap();
    c.link.learner().shutdown().await.unwrap();
}
