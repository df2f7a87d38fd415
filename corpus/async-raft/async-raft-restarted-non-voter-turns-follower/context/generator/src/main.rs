//! Runs a leader plus one non-voter in process, restarts the non-voter on its own storage, and
//! prints every metrics change of both nodes as a Markdown table (written to stdout).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork};
use memstore::{ClientRequest, ClientResponse, MemStore};
use tokio::time::Instant;

type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

#[derive(Default)]
struct Net {
    nodes: RwLock<HashMap<NodeId, Node>>,
    votes: Mutex<Vec<String>>,
    partitioned: AtomicBool,
}

impl Net {
    fn node(&self, id: NodeId) -> Result<Node> {
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(anyhow!("partitioned"));
        }
        self.nodes.read().unwrap().get(&id).cloned().ok_or_else(|| anyhow!("node {} unreachable", id))
    }
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Ok(self.node(target)?.append_entries(rpc).await?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Ok(self.node(target)?.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        let line = format!("RequestVote node {} -> node {}: term {}, last_log_index {}", rpc.candidate_id, target, rpc.term, rpc.last_log_index);
        let res = self.node(target)?.vote(rpc).await?;
        self.votes.lock().unwrap().push(format!("{} => granted {}, term {}", line, res.vote_granted, res.term));
        Ok(res)
    }
}

fn watch(label: &'static str, node: &Node, start: Instant, rows: Arc<Mutex<Vec<String>>>) {
    let mut rx = node.metrics();
    tokio::spawn(async move {
        loop {
            let m = rx.borrow().clone();
            let members: Vec<_> = m.membership_config.members.iter().collect();
            rows.lock().unwrap().push(format!(
                "| {:>6} | {} | {:?} | {} | {} | {} | {:?} | {:?} |",
                start.elapsed().as_millis(), label, m.state, m.current_term, m.last_log_index, m.last_applied, m.current_leader, members
            ));
            if rx.changed().await.is_err() {
                break;
            }
        }
    });
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let start = Instant::now();
    let rows = Arc::new(Mutex::new(Vec::new()));
    let config = Arc::new(
        Config::build("demo".into()).heartbeat_interval(50).election_timeout_min(300).election_timeout_max(600).validate().unwrap(),
    );
    let net = Arc::new(Net::default());
    let store1 = Arc::new(MemStore::new(1));
    let n0 = Node::new(0, config.clone(), net.clone(), Arc::new(MemStore::new(0)));
    let n1 = Node::new(1, config.clone(), net.clone(), store1.clone());
    net.nodes.write().unwrap().insert(0, n0.clone());
    net.nodes.write().unwrap().insert(1, n1.clone());
    watch("node 0", &n0, start, rows.clone());
    watch("node 1", &n1, start, rows.clone());

    let mut events = Vec::new();
    n0.initialize([0u64].iter().cloned().collect::<HashSet<_>>()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    n0.add_non_voter(1).await.unwrap();
    events.push(format!("{} ms: add_non_voter(1) returned Ok", start.elapsed().as_millis()));
    for i in 0..3u64 {
        n0.client_write(ClientWriteRequest::new(ClientRequest { client: "c".into(), serial: i, status: format!("v{}", i) })).await.unwrap();
    }
    events.push(format!("{} ms: 3 client writes committed on node 0", start.elapsed().as_millis()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    net.nodes.write().unwrap().remove(&1);
    n1.shutdown().await.unwrap();
    events.push(format!("{} ms: node 1 shut down; restarting it on the same MemStore", start.elapsed().as_millis()));
    let n1 = Node::new(1, config.clone(), net.clone(), store1);
    net.nodes.write().unwrap().insert(1, n1.clone());
    watch("node 1 (restarted)", &n1, start, rows.clone());

    tokio::time::sleep(Duration::from_secs(2)).await;
    net.partitioned.store(true, Ordering::SeqCst);
    events.push(format!("{} ms: network between node 0 and node 1 cut", start.elapsed().as_millis()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    net.partitioned.store(false, Ordering::SeqCst);
    events.push(format!("{} ms: network healed", start.elapsed().as_millis()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    events.push(format!("{} ms: end of run", start.elapsed().as_millis()));

    println!("# Restarting a non-voter (2 nodes, in-process network)\n");
    println!("Config: heartbeat 50 ms, election timeout 300-600 ms. Node 0 is initialized as the only");
    println!("member; node 1 is added with `add_non_voter(1)` and never promoted.\n");
    for e in events {
        println!("- {}", e);
    }
    println!("\n## Metrics stream (one row per update)\n");
    println!("| t (ms) | node | state | term | last_log_index | last_applied | current_leader | members |");
    println!("|---|---|---|---|---|---|---|---|");
    let rows = rows.lock().unwrap().clone();
    let mut last: HashMap<String, String> = HashMap::new();
    for r in rows {
        // Drop consecutive duplicates per node (heartbeats re-send identical metrics).
        let parts: Vec<&str> = r.split('|').collect();
        let key = parts[2].trim().to_string();
        let body = parts[3..].join("|");
        if last.get(&key) == Some(&body) {
            continue;
        }
        last.insert(key, body);
        println!("{}", r);
    }
    println!("\n## Vote requests seen on the network\n");
    let votes = net.votes.lock().unwrap().clone();
    if votes.is_empty() {
        println!("(none)");
    }
    for v in votes {
        println!("- {}", v);
    }
}
