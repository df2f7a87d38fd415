//! Prints `../node-trace.md`: the oracle's one-voter scenario in the symptom's shape (one write,
//! a snapshot request, a pause, a second request with nothing applied since, one more write) on tokio's paused
//! clock, with the node's metrics after every step, the panic reported by the Raft core's task
//! and the core's own info-level log from the first snapshot request on.
//! The log drops the state-machine worker's scheduling lines (`worker_loop`, `build_snapshot`
//! spans) and has no timestamps; the panic location is cut to the path inside the crate (`src/...`).

#[path = "../../../oracle/tests/repeated_snapshot.rs"]
#[allow(dead_code)]
mod scenario;

use std::io::Write;
use std::sync::{Arc, Mutex};

use openraft::RaftMetrics;
use openraft_memstore::MemNodeId;
use scenario::{run, symptom_plan, Step};

/// Collects formatted log lines in memory.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);
impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn row(step: &str, m: &RaftMetrics<MemNodeId, ()>) -> String {
    let show = |l: Option<openraft::LogId<MemNodeId>>| l.map(|l| l.to_string()).unwrap_or("-".into());
    format!(
        "| {step} | {:?} | {} | {} | {} | {} |",
        m.state,
        m.current_term,
        m.last_log_index.map(|i| i.to_string()).unwrap_or("-".into()),
        show(m.last_applied),
        show(m.snapshot),
    )
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let sink = Sink::default();
    let writer = sink.clone();
    tracing_subscriber::fmt()
        .with_env_filter("openraft=info")
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(move || writer.clone())
        .init();
    let panics = Arc::new(Mutex::new(Vec::<String>::new()));
    let p = panics.clone();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        // The crate's location differs between machines; keep the path inside the crate.
        let at = info.location().map(|l| {
            let file = l.file();
            let file = file.rfind("/src/").map(|i| &file[i + 1..]).unwrap_or(file);
            format!("{file}:{}:{}", l.line(), l.column())
        });
        let message = info.payload_as_str().unwrap_or_default();
        p.lock().unwrap().push(format!("thread '{thread}' panicked at {}:\n{message}", at.unwrap_or_default()));
    }));

    let steps = symptom_plan();
    let seen = run(&steps).await;
    let (mut writes, mut snapshots) = (0, 0);
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    for s in &seen {
        let label = match s.step {
            Step::Write => {
                writes += 1;
                format!("client_write #{writes}")
            }
            Step::Snapshot => {
                snapshots += 1;
                format!("trigger().snapshot() #{snapshots}")
            }
            Step::Idle(ms) => format!("pause {ms} ms"),
        };
        rows.push(row(&label, &s.metrics));
        if !matches!(s.step, Step::Idle(_)) {
            outcomes.push(format!("{label} -> {}", s.result));
        }
    }

    println!("# Node trace\n");
    println!("Single voter, node 1, openraft-memstore via `Adaptor`, heartbeats and ticks off, default snapshot policy.");
    println!("`initialize({{1}})` first; each write waits until it is applied, each snapshot request until the");
    println!("snapshot covers the applied entries (or 300 ms when there is nothing new to cover).\n");
    println!("## Metrics after each step\n");
    println!("| step | state | term | last_log_index | last_applied | snapshot |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!("\n## Call results\n");
    println!("```text");
    for o in &outcomes {
        println!("{o}");
    }
    println!("```\n");
    println!("## Panics captured\n");
    println!("```text");
    for p in panics.lock().unwrap().iter() {
        println!("{p}");
    }
    println!("```\n");
    println!("## Log (openraft=info, from the first snapshot request on)\n");
    println!("```text");
    let log = sink.0.lock().unwrap();
    let text = String::from_utf8_lossy(&log);
    let mut started = false;
    for line in text.lines() {
        started |= line.contains("cmd=Snapshot");
        if !started || line.contains("worker_loop") || line.contains("build_snapshot:") {
            continue;
        }
        println!("{line}");
    }
    println!("```");
}
