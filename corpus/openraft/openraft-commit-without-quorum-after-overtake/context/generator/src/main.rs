//! Prints `../leader-commits.md`: one 7-voter run of the oracle's scenario, each follower
//! acknowledgement step with the leader's committed index right after it and the voters that
//! hold that index.

#[path = "../../../oracle/tests/quorum_commit.rs"]
#[allow(dead_code)]
mod scenario;

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use scenario::{quorum, run, Plan};

/// The draw of the reported run.
const DRAW: u64 = 3;
const VOTERS: u64 = 7;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let plan = Plan::draw(&mut ChaCha8Rng::seed_from_u64(DRAW), VOTERS);
    let last = 1 + plan.writes;
    let mut held: BTreeMap<u64, u64> = (1..VOTERS).map(|id| (id, 0)).collect();
    let mut rows = Vec::new();
    run(&plan, &mut |s| {
        held.insert(s.follower, s.index);
        if s.index == 0 {
            return;
        }
        let committed = s
            .committed
            .map(|c| c.to_string())
            .unwrap_or("none".to_string());
        let holders: Vec<String> = std::iter::once((0, last))
            .chain(held.iter().map(|(id, h)| (*id, *h)))
            .filter(|(_, h)| Some(*h) >= s.committed)
            .map(|(id, _)| id.to_string())
            .collect();
        let holding = if s.committed.is_some() {
            format!("{} ({})", holders.len(), holders.join(", "))
        } else {
            "-".to_string()
        };
        rows.push(format!(
            "| node {} now holds up to {} | {} | {} |",
            s.follower, s.index, committed, holding
        ));
    })
    .await;

    println!("# Leader 0: acknowledgements and commits\n");
    println!(
        "openraft 0.9.24 with openraft-memstore, {VOTERS} voters (nodes 0-6, quorum {}), leader 0,",
        quorum(VOTERS)
    );
    println!("`max_payload_entries = 1`. The leader holds indexes 0 (membership), 1 (its blank entry) and");
    println!("2..={last} ({} client writes). Every follower first took index 0, in node order. Each row below", plan.writes);
    println!(
        "is one follower moving forward (one AppendEntries per index), then the leader's committed"
    );
    println!("index read right after the leader recorded that progress, and which voters hold that index");
    println!("according to the leader's replication metrics (node 0 holds everything).\n");
    println!("| step | leader committed | voters holding the committed index |");
    println!("|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
}
