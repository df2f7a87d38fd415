//! Prints `../restart-metrics.md`: the oracle's restart scenario in the symptom's shape (voter 0,
//! non-voter 1, three writes, node 1 restarted on its own storage, one more write, then node 1
//! cut off for 1.8 s) on
//! tokio's paused clock. Election timeouts are random, so a term that moved is shown as moved
//! rather than by its value.

#[path = "../../../oracle/tests/restart_non_voter.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};

use async_raft::RaftMetrics;
use scenario::{run, Plan, ELECTION_MAX, ELECTION_MIN};

fn row(what: &str, m: &RaftMetrics) -> String {
    let term = if m.current_term == 1 { "1".to_string() } else { "moved past 1".to_string() };
    let mut members: Vec<_> = m.membership_config.members.iter().cloned().collect();
    members.sort();
    format!("| {} | {:?} | {} | {} | {} | {:?} | {:?} |", what, m.state, term, m.last_log_index, m.last_applied, m.current_leader, members)
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let rows = Arc::new(Mutex::new(Vec::new()));
    let out = rows.clone();
    // The scenario's observer is not `Send`, so the run is a local task; a panic ends only it.
    let local = tokio::task::LocalSet::new();
    let task = local.spawn_local(async move {
        let mut obs = |what: &str, m: &RaftMetrics| out.lock().unwrap().push(row(what, m));
        run(&Plan::symptom(), &mut obs).await
    });
    let end = match local.run_until(task).await {
        Ok(report) => {
            let votes = match report.votes_by_non_voter.first() {
                None => "Node 1 sent no RequestVote.".to_string(),
                Some((_, term)) => format!("Node 1 sent RequestVotes to node 0 from the cut on, the first in term {}, then one more in each election timeout with ever higher terms.", term),
            };
            let moved = report.leader_after.map(|m| m.current_term != 1).unwrap_or_default();
            format!("{}\n\nAfter the heal, node 0's term {}.", votes, if moved { "moved past 1 as well" } else { "stayed 1" })
        }
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            let text = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            format!("After the heal, `client_write` on node 0 failed: `{}`.", text.trim_start_matches("client write on the leader: "))
        }
        Err(e) => format!("The run was cancelled: {}", e),
    };

    println!("# Restarting a non-voter (2 nodes, in-process network)\n");
    println!("Config: heartbeat 50 ms, election timeout {}-{} ms. Node 0 is initialized as the only", ELECTION_MIN, ELECTION_MAX);
    println!("member; node 1 is added with `add_non_voter(1)` and never promoted. Three client writes go");
    println!("to node 0, then node 1 is shut down and restarted on the same `MemStore`, and one more write");
    println!("goes to node 0. Then node 1 is cut off from node 0, the link is healed, and one more write goes");
    println!("to node 0.\n");
    println!("## Node 1 metrics after each step\n");
    println!("| step | state | term | last_log_index | last_applied | current_leader | members |");
    println!("|---|---|---|---|---|---|---|");
    // After the heal the two nodes' elections race, so the table stops at the cut.
    for r in rows.lock().unwrap().iter().take(4) {
        println!("{}", r);
    }
    println!("\n{}", end);
}
