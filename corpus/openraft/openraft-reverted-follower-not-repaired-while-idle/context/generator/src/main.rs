//! Prints `../leader-rpc-trace.md`: the oracle's cluster (leader 0, voter 1, learner 2) after
//! voter 1 restarts with wiped storage while nobody writes, on tokio's paused clock, with every
//! RPC the leader sends from then on. Times are virtual, so every run prints the same text.

#[path = "../../../oracle/tests/reverted_follower.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scenario::{Cluster, Revert};
use tokio::time::Instant;

struct Trace {
    start: Option<Instant>,
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
        let ms = self.start.map(|s| s.elapsed().as_millis()).unwrap_or(0);
        self.lines.push(format!("{ms:>6} ms  {line}"));
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
    let trace = Arc::new(Mutex::new(Trace { start: None, lines: Vec::new(), last: None, repeats: 0 }));
    let on = Arc::new(AtomicBool::new(false));
    let (t, o) = (trace.clone(), on.clone());
    let rpc = move |line: String| {
        if o.load(Ordering::SeqCst) && line.starts_with("-> node 1") {
            t.lock().unwrap().log(line)
        }
    };
    let c = Cluster::start(8, Some(Arc::new(rpc))).await;
    let last = c.leader_last();
    trace.lock().unwrap().start = Some(Instant::now());
    let log = |line: String| trace.lock().unwrap().log(line);
    log(format!("cluster: leader 0, voters {{0,1}}, learner 2; 8 client writes; all nodes at log index {last}"));
    on.store(true, Ordering::SeqCst);
    c.revert(&Revert { node: 1, keep: 0 }).await;
    log("node 1 restarted with empty storage; no client writes from here on".into());
    let ok = c.reaches(1, last, 3).await;
    trace.lock().unwrap().flush();
    let m = c.node(1).0.metrics().borrow().clone();
    log(format!("3 s later: node 1 caught up = {ok}; node 1 last_log_index={:?} last_applied={:?}", m.last_log_index, m.last_applied.map(|l| l.index)));
    log(format!("leader 0 metrics: replication matched for node 1 = {:?}, for node 2 = {:?}", c.leader_sees(1), c.leader_sees(2)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    trace.lock().unwrap().flush();
    let lines = trace.lock().unwrap().lines.clone();
    println!("# Leader-side RPC trace: voter 1 restarted with wiped storage, cluster idle\n");
    println!("Three nodes in one process (openraft with feature `loosen-follower-log-revert`, in-memory example");
    println!("store), `heartbeat_interval = 100` ms. Lines are RPCs leader 0 sent to node 1 and what came back,");
    println!("as seen by the test network. Times are since node 1's restart was about to happen.\n");
    println!("```text");
    for l in lines {
        println!("{l}");
    }
    println!("```");
    c.shutdown().await;
}
