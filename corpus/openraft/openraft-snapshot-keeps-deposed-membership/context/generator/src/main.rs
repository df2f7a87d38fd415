//! Prints `../node3-trace.md`: the oracle's reported scenario (a deposed leader's uncommitted
//! change makes learner node 3 a voter, then the next leader's snapshot reaches node 3), as the
//! messages node 3 receives and its metrics after each one.

#[path = "../../../oracle/tests/snapshot_membership.rs"]
#[allow(dead_code)]
mod scenario;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use scenario::{run, Plan, Variant};

/// The draw of the reported run: a short log, a stale change after two uncommitted entries.
const DRAW: u64 = 8;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let plan = Plan::draw(
        Variant::StaleChangePromotes,
        &mut ChaCha8Rng::seed_from_u64(DRAW),
    );
    let mut lines = Vec::new();
    run(&plan, &mut |l| lines.push(l)).await;

    println!("# Node 3's view: messages received and metrics after each\n");
    println!(
        "openraft 0.9.24 with openraft-memstore. Nodes 0, 1 and 2 are the voters, node 3 is a"
    );
    println!(
        "learner (read replica). Leader 0 (term 1) replicated to node 3, including the membership"
    );
    println!(
        "change it had just proposed, and was then cut off; node 1 won term 2. Node 3 was itself"
    );
    println!(
        "unreachable for a while, and node 1 brought it up to date with a snapshot. Below: every"
    );
    println!(
        "message node 3 received, captured at its RPC entry points, in order, each followed by"
    );
    println!(
        "node 3's metrics. Ticks on node 3 are off until the last step, a pause with no leader"
    );
    println!("talking to it (node 1 was restarted for maintenance).\n");
    println!("```text");
    for l in &lines {
        println!("{l}");
    }
    println!("```");
}
