//! Prints `../removed-node-trace.md`: the oracle's removed-node scenario in the symptom's shape
//! (node 2 removed from {0, 1, 2}, then a RequestVote from node 1, which missed the removal), on
//! tokio's paused clock. Only what does not depend on the random election timeouts is printed.

#[path = "../../../oracle/tests/non_voter_vote.rs"]
#[allow(dead_code)]
mod scenario;

use async_raft::RaftMetrics;
use scenario::{removed_node, Plan, ELECTION_MAX, ELECTION_MIN};

fn row(m: &RaftMetrics) -> String {
    let mut members: Vec<_> = m.membership_config.members.iter().cloned().collect();
    members.sort();
    format!("| {:?} | {} | {} | {:?} | {:?} |", m.state, m.current_term, m.last_log_index, m.current_leader, members)
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let report = removed_node(&Plan::symptom()).await;
    println!("# Node 2 after being removed from the cluster\n");
    println!("Single async-raft 0.6.0 node (id 2, memstore), election timeout {}-{} ms. The RPCs it", ELECTION_MIN, ELECTION_MAX);
    println!("receives are delivered by hand; everything it sends goes to an unreachable network.\n");
    println!("## RPCs delivered to node 2, and its metrics right after each\n");
    println!("| event | state | term | last_log_index | current_leader | members |");
    println!("|---|---|---|---|---|---|");
    for seen in report.steps.iter().take(report.steps.len() - 1) {
        let m = &seen.metrics;
        if seen.label.ends_with("of silence") {
            println!("| {} | {:?} | | | | |", seen.label, m.state);
        } else {
            println!("| {} |{}", seen.label, row(m).trim_start_matches('|'));
        }
    }
    println!("\n## Node 2 metrics stream, up to its first election\n");
    println!("| state | term | last_log_index | current_leader | members |");
    println!("|---|---|---|---|---|");
    let mut last = String::new();
    for m in &report.stream {
        if row(m) != last {
            last = row(m);
            println!("{}", last);
        }
        if m.state == async_raft::State::Candidate {
            break;
        }
    }
    println!("\n## RPCs node 2 tried to send\n");
    let mut terms: Vec<u64> = report.sent_votes.iter().map(|v| v.term).collect();
    terms.dedup();
    match (terms.first(), report.sent_votes.first()) {
        (Some(t), Some(v)) => {
            println!("- RequestVote (term {}, candidate {}, last_log_index {}) to nodes 0 and 1 -> unreachable", t, v.candidate_id, v.last_log_index);
            if terms.len() > 1 {
                println!("- more RequestVotes to nodes 0 and 1 in each following election timeout, with ever higher terms");
            }
        }
        _ => println!("(none)"),
    }
}
