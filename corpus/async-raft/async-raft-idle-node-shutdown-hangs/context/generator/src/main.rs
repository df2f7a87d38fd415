//! Prints `../shutdown-timings.md`: the oracle's shutdown scenario for three kinds of node (never
//! initialized, single-node leader, follower of a two-node cluster), each idle for 200 ms before
//! `Raft::shutdown()`. Only outcomes are printed (no measured durations), so every run prints
//! the same text.

#[path = "../../../oracle/tests/idle_shutdown.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{shut_down, Kind, Outcome, WAIT};

fn before(o: &Outcome, with_term: bool) -> String {
    if with_term {
        format!("{:?}, term {}, last_log_index {}", o.before.state, o.before.current_term, o.before.last_log_index)
    } else {
        format!("{:?}", o.before.state)
    }
}

fn yes_no(b: bool, yes: &str, no: &str) -> String {
    if b { yes } else { no }.to_string()
}

#[tokio::main(threaded_scheduler)]
async fn main() {
    let rows = [
        ("node 7, never initialized", Kind::Uninitialized(7), true),
        ("node 0, single-node cluster {0}", Kind::SingleLeader(0), true),
        ("the follower of a cluster {1, 2}", Kind::Follower(vec![1, 2]), false),
    ];
    println!("# Shutting down async-raft 0.5.2 nodes\n");
    println!("memstore 0.1.0, default `Config` (heartbeat 50 ms, election timeout 150-300 ms), in-process");
    println!("network, one client write on the leader of each initialized cluster. Each node had been idle");
    println!("for 200 ms before `shutdown()` was called; the returned join handle was awaited for up to");
    println!("{} s, then the node's metrics channel and the `MemStore` handed to it were checked.\n", WAIT.as_secs());
    println!("| node | state before shutdown | awaiting the join handle | metrics channel | MemStore |");
    println!("|---|---|---|---|---|");
    for (label, kind, with_term) in rows.iter() {
        let o = shut_down(kind, 200).await;
        let joined = match &o.joined {
            Some(r) => format!("completed: {}", r),
            None => format!("still pending after {} ms", WAIT.as_millis()),
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            label,
            before(&o, *with_term),
            joined,
            yes_no(o.metrics_closed, "closed", "still open"),
            yes_no(o.storage_released, "released", "still held by the node"),
        );
    }
}
