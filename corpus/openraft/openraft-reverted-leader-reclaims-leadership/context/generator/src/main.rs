//! Prints ../restart-trace.md: the oracle's reported run (three nodes; node 0 leads and commits
//! three writes, then restarts on a copy of its storage holding only the membership entry and is
//! asked to campaign), with the vote requests after the restart and each node's state at the end.

#[path = "../../../oracle/tests/reverted_leader.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};

use scenario::Plan;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    let trace: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |l| sink.lock().unwrap().push(l));
    let plan = Plan::reported();
    let report = scenario::run(&plan, Some(trace)).await;

    println!("# Restart of the leader from an old copy of its storage: trace\n");
    println!("openraft 0.9.18 with openraft-memstore, three voters 0, 1, 2 in one process, an in-memory");
    println!("network. heartbeat_interval 100 ms, election timeout 1500-1600 ms.\n");
    println!("1. `initialize({{0, 1, 2}})` on node 0; node 0 leads; `client_write` of client-1, client-2,");
    println!("   client-3 (status \"before\"); all three nodes apply log index 4.");
    println!("2. Node 0 is shut down and started again on a store holding only log index 0 (the");
    println!("   membership entry): no vote, empty state machine. Then `trigger().elect()` on node 0.\n");
    println!("## Vote requests after the restart\n");
    let mut l = lines.lock().unwrap().clone();
    l.retain(|x| x.contains("vote request"));
    l.sort();
    l.dedup();
    for x in l.iter().take(6) {
        println!("- {x}");
    }
    println!();
    println!("## 800 ms after the restart\n");
    for (id, vote) in &report.early_leader {
        println!("- leader: node {id}, vote {vote}");
    }
    println!();
    println!("3. `client_write` of client-100 (status \"after\") to node {}: acknowledged = {}.\n",
        report.write_to.map(|x| x.to_string()).unwrap_or("none".into()), report.write_ok);
    println!("## State machines and logs 3 s later\n");
    for (id, st) in &report.statuses {
        let (last, applied) = report.logs[id];
        println!(
            "- node {id}: last log index {}, applied {}, client statuses {:?}",
            last.map(|x| x.to_string()).unwrap_or("none".into()),
            applied.map(|x| x.to_string()).unwrap_or("none".into()),
            st
        );
    }
}
