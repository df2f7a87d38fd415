//! Prints the bundle: the message sizes of a new node's gossip with the seed node of the
//! reported 33-node cluster, on an in-memory network that loses datagrams over the UDP limit.

#[path = "../../../oracle/tests/join_big_cluster.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{build_cluster, exchange, missing, reported_spec, spawn_node, Step, UDP_PAYLOAD_LIMIT};

fn bytes(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out} B")
}

fn cell(steps: &[Step], kind: &str) -> String {
    match steps.iter().find(|s| s.kind == kind) {
        None => "not sent".to_string(),
        Some(s) if s.delivered => bytes(s.len),
        Some(s) => format!("{} **lost**", bytes(s.len)),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let spec = reported_spec();
    let cluster = build_cluster(&spec).await;
    let total_keys: usize = cluster.truth.values().map(|kvs| kvs.len()).sum();

    println!("# Gossip trace: a new node joins through the seed node\n");
    println!(
        "chitchat 0.10.0, 1 seed node + {} searchers, node ids of {} characters, each searcher \
         publishes {} keys of {} random characters and a `load` key ({} keys in all). The \
         in-memory transport logs every datagram a node hands to its socket and, like the \
         kernel, loses any payload over {}.\n",
        spec.members,
        spec.id_len,
        spec.keys_per_member,
        spec.value_len,
        total_keys,
        bytes(UDP_PAYLOAD_LIMIT)
    );

    println!("## 1. The seed node opens one exchange with each searcher\n");
    println!("| exchange | Syn | SynAck | Ack |");
    println!("|---|---|---|---|");
    let per_exchange: Vec<&[Step]> = cluster.bootstrap.chunks(3).collect();
    for (n, steps) in per_exchange.iter().enumerate() {
        if n < 3 || n + 2 >= per_exchange.len() {
            println!(
                "| {} -> {} | {} | {} | {} |",
                steps[0].from,
                steps[0].to,
                cell(steps, "Syn"),
                cell(steps, "SynAck"),
                cell(steps, "Ack")
            );
        } else if n == 3 {
            println!("| ... | | | |");
        }
    }
    let seed_view = cluster.seed_node.view().await;
    println!(
        "\nThe seed node now holds {} node states and misses {} of the {} keys.\n",
        seed_view.len(),
        missing(&cluster.truth, &seed_view),
        total_keys
    );

    println!("## 2. The new node `joiner` (seed list: the seed node) opens exchanges\n");
    let joiner = spawn_node(
        &cluster.net,
        "joiner",
        "searcher-new".to_string(),
        spec.members + 1,
        vec![("grpc_addr".to_string(), "10.4.9.9:7281".to_string())],
    )
    .await;
    println!("| round | Syn joiner -> seed | SynAck seed -> joiner | Ack | keys joiner misses after |");
    println!("|---|---|---|---|---|");
    for round in 1..=5 {
        let steps = exchange(&cluster.net, &joiner, &cluster.seed_node).await;
        let view = joiner.view().await;
        println!(
            "| {round} | {} | {} | {} | {} of {} |",
            cell(&steps, "Syn"),
            cell(&steps, "SynAck"),
            cell(&steps, "Ack"),
            missing(&cluster.truth, &view),
            total_keys
        );
    }
    let seed_view = cluster.seed_node.view().await;
    let joiner_known = seed_view
        .get("searcher-new")
        .map(|kvs| kvs.len())
        .unwrap_or(0);
    println!(
        "\nAfter 5 rounds the joiner holds {} node state(s); the seed node holds {} key(s) of the \
         joiner.",
        joiner.view().await.len(),
        joiner_known
    );
}
