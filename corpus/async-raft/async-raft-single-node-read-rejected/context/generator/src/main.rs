//! Prints `../read-results.md`: the oracle's connected-cluster scenario on a one-node cluster
//! (one write, then three reads 100 ms apart) and on a three-node cluster (one write, three
//! reads). Election timing varies from run to run, so the three-node table names the leader by
//! its role and shows only what does not depend on which node won.

#[path = "../../../oracle/tests/single_node_read.rs"]
#[allow(dead_code)]
mod scenario;

use std::time::Duration;

use scenario::{connected_cluster, read, Step};

fn print_step(s: &Step, by_role: bool) {
    let node = if by_role && s.call != "crash" && !s.call.starts_with("initialize") { "leader".to_string() } else { format!("node {}", s.node) };
    let result = if s.call == "metrics" {
        s.result.split(',').next().unwrap_or_default().to_string()
    } else if s.result.starts_with("Ok(index") {
        "Ok".to_string()
    } else {
        s.result.clone()
    };
    println!("| {} | {} | {} |", node, s.call, result);
}

#[tokio::main(threaded_scheduler)]
async fn main() {
    println!("# Linearizable reads on the leader\n");
    println!("async-raft 0.5.3 with memstore 0.1.0, default `Config`, in-process network that forwards");
    println!("each RPC to the target node after a delay of 0-3 ms.\n");

    println!("## Cluster [0]\n");
    println!("| node | call | result |");
    println!("|---|---|---|");
    let (net, lid) = connected_cluster(&[0], 1, 0, 1, &mut |s| print_step(&s, false)).await;
    let leader = net.node(lid);
    for _ in 0..3 {
        read(&leader, lid, &mut |s| print_step(&s, false)).await;
        tokio::time::delay_for(Duration::from_millis(100)).await;
    }
    let m = leader.metrics().borrow().clone();
    println!("| node {} | metrics | state {:?}, term {}, last_log_index {}, last_applied {} |", lid, m.state, m.current_term, m.last_log_index, m.last_applied);

    println!("\n## Cluster [0, 1, 2]\n");
    println!("| node | call | result |");
    println!("|---|---|---|");
    connected_cluster(&[0, 1, 2], 1, 3, 2, &mut |s| print_step(&s, true)).await;
}
