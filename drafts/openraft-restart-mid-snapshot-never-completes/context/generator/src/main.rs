//! Prints `../snapshot-rpcs.md`: the oracle's scenario with one learner that restarts once, just
//! before the fourth chunk of the snapshot reaches it, on tokio's paused clock. Every
//! InstallSnapshot request to the learner is listed with its answer; heartbeats are only counted.
//! Times are virtual, so every run prints the same text.

#[path = "../../../oracle/tests/chunked_restart.rs"]
#[allow(dead_code)]
mod scenario;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use scenario::{run, Fate, Plan};
use tokio::time::Instant;

struct Log {
    start: Instant,
    lines: Vec<String>,
    last: Option<String>,
    repeats: usize,
    heartbeats: usize,
}

impl Log {
    fn push(&mut self, line: String) {
        if line.contains("AppendEntries") {
            self.heartbeats += 1;
            return;
        }
        // Request numbers differ on every line; drop them so repeats collapse.
        let line = match (line.find(" #"), line.find(" offset=")) {
            (Some(a), Some(b)) if a < b => format!("{}{}", &line[..a], &line[b..]),
            _ => line,
        };
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
            self.lines.push(format!("           (same line {} more times, until {} ms)", self.repeats, self.start.elapsed().as_millis()));
            self.repeats = 0;
        }
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let log = Arc::new(Mutex::new(Log { start: Instant::now(), lines: Vec::new(), last: None, repeats: 0, heartbeats: 0 }));
    let l = log.clone();
    let trace: scenario::Trace = Arc::new(move |line: String| l.lock().unwrap().push(line));
    let plan = Plan {
        writes: 12,
        chunk: 32,
        fates: vec![Fate { restart_before_chunk: vec![4], lost_requests: BTreeSet::new() }],
    };
    let (res, out) = run(&plan, Some(trace)).await;
    let mut g = log.lock().unwrap();
    g.flush();

    println!("# InstallSnapshot requests from leader 0 to learner 1\n");
    println!("Leader 0 (the only voter) takes 12 writes, builds a snapshot and purges its log; then");
    println!("`add_learner(1)`. `snapshot_max_chunk_size = 32`, `heartbeat_interval = 100`. The");
    println!("learner's process restarts (storage kept) just before the fourth chunk reaches it. Lines");
    println!("are what the leader's network saw for each InstallSnapshot request; identical lines are");
    println!("collapsed. Times are milliseconds since the start.\n");
    println!("```text");
    for line in g.lines.iter().take(40) {
        println!("{line}");
    }
    println!("```\n");
    let s = out.seen.get(&1).cloned().unwrap_or_default();
    println!(
        "Snapshot size {} bytes. Over the run: {} InstallSnapshot requests ({} bytes) to node 1, {} AppendEntries \
         between the nodes.",
        out.snapshot_len, s.requests, s.bytes, g.heartbeats
    );
    match res {
        Ok(()) => println!("Result: the learner installed the snapshot."),
        Err(_) => println!("Result: 10 s after joining, the learner still has no snapshot."),
    }
}
