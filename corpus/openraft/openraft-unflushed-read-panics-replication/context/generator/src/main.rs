//! Prints `../cluster-trace.md`: the oracle's scenario with three voters, short flush delays and no
//! long stall, on tokio's paused clock, with every RPC between the nodes, every read that came
//! back empty, and every panic. Times are virtual, so every run prints the same text.

#[path = "../../../oracle/tests/lagging_reader.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};

use scenario::{run, Plan};
use tokio::time::Instant;

/// Trace lines; a run of lines that differ only in their time is collapsed into one with a count.
struct Log {
    start: Instant,
    lines: Vec<String>,
    last: Option<String>,
    repeats: usize,
    /// Set at the first election a follower starts: election timeouts are randomized inside
    /// openraft, so what follows differs from run to run and is summarized instead.
    cut: bool,
}

impl Log {
    fn push(&mut self, line: String) {
        if self.cut {
            return;
        }
        if line.contains(" Vote ") && !line.starts_with("0 -> ") {
            self.flush();
            // Its time varies too (2.5 to 2.8 s): leave it out.
            self.lines.push(
                "  2.5 s+  no RPC in between; then a follower starts an election, and from here on the nodes keep campaigning (the order varies between runs and is not shown)".to_string(),
            );
            self.cut = true;
            return;
        }
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
            self.lines.push(format!("           (same line {} more times)", self.repeats));
            self.repeats = 0;
        }
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let log = Arc::new(Mutex::new(Log { start: Instant::now(), lines: Vec::new(), last: None, repeats: 0, cut: false }));
    let l = log.clone();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // Keep the crate-relative part of the location: no machine paths.
        let at = info
            .location()
            .map(|p| {
                let f = p.file();
                let f = f.rfind("/src/").map(|i| &f[i + 1..]).unwrap_or(f);
                format!("{}:{}", f, p.line())
            })
            .unwrap_or_default();
        if let Ok(mut g) = l.try_lock() {
            g.push(format!("PANIC in a tokio task at openraft {at}: {msg}"));
        }
    }));

    let plan = Plan { voters: 3, max_lag_ms: 8, stall_write: 99, stall_ms: 0, batches: vec![1, 1] };
    let l = log.clone();
    let trace: scenario::Trace = Arc::new(move |line: String| {
        // Heartbeats carry the current prev id; keep them, they show who still hears the leader.
        if let Ok(mut g) = l.try_lock() {
            g.push(line);
        }
    });
    let res = run(&plan, 1, Some(trace)).await;
    let mut g = log.lock().unwrap();
    g.flush();

    println!("# Three voters, lagging log readers: RPCs, empty reads and panics\n");
    println!("Nodes 0, 1, 2 on openraft-memstore wrapped so that log readers see an appended entry 0-8 ms");
    println!("after `append_to_log` returns. `heartbeat_interval = 100`, election timeouts 1000-1400 ms.");
    println!("Node 0 is initialized with all three as voters, then one `client_write` is sent to it (a");
    println!("second follows only if the first commits). Every RPC is logged by the sender's network as");
    println!("`from -> to` with its answer; a run of identical lines is collapsed. Times are milliseconds.\n");
    println!("```text");
    for line in g.lines.iter().take(60) {
        println!("{line}");
    }
    if g.lines.len() > 60 {
        println!("           ({} more lines)", g.lines.len() - 60);
    }
    println!("```\n");
    match res {
        Ok(()) => println!("Result: every write committed."),
        Err(_) => println!("Result: the first `client_write` never succeeded (the run ends after 10 s)."),
    }
}
