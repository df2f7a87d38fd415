//! Prints the bundle: the reported five-peer run from the moment the tree parent of peer-4 crashes,
//! every event that concerns the burst message, then what each peer delivered.

#[path = "../../../oracle/tests/graft_retry.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{reported_plan, run, FAULT_AT_MS};

fn main() {
    let plan = reported_plan();
    let sim = run(&plan, true);
    println!("# Event trace: five peers on one topic, iroh-gossip 0.35.0 protocol state\n");
    println!(
        "One process, simulated network (fixed latency per link, in-order delivery), simulated \
         clock; default topic config. peer-1 broadcasts every message. Latencies (ms): \
         peer-1 to peer-2 9, to peer-3 13, to peer-4 280, to peer-5 12; peer-2 to peer-4 4; \
         peer-5 to peer-4 35; peer-3 to peer-4 320; every other link 30. Three warm-up \
         broadcasts ran before t = {FAULT_AT_MS} ms, and peer-4 received all three. Times are \
         ms since the start; only events that concern the message `burst-0` are shown.\n"
    );
    println!("```text");
    for line in sim.trace.as_ref().expect("traced run") {
        if line.at_ms >= FAULT_AT_MS || line.text.starts_with("--") {
            println!("{:>5}  {}", line.at_ms, line.text);
        }
    }
    println!("```\n");
    println!("Delivered at the end of the run (t = 8000 ms):\n");
    println!("| peer | alive | burst-0 | after |");
    println!("|---|---|---|---|");
    for (&p, node) in &sim.nodes {
        let alive = if node.alive { "yes" } else { "no (crashed)" };
        let (burst, after) = if p == plan.origin {
            ("sender".to_string(), "sender".to_string())
        } else {
            (sim.count(p, "burst-0").to_string(), sim.count(p, "after").to_string())
        };
        println!("| peer-{p} | {alive} | {burst} | {after} |");
    }
}
