//! Calls `Raft::shutdown` on async-raft 0.5.2 nodes in different states and reports how long the
//! returned join handle takes to complete (Markdown, on stdout).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};
use tokio::time::Instant;

type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

#[derive(Default)]
struct Net {
    nodes: RwLock<HashMap<NodeId, Arc<Node>>>,
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        let n = self.nodes.read().unwrap().get(&target).cloned().ok_or_else(|| anyhow!("no route to node {}", target))?;
        Ok(n.append_entries(rpc).await?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        let n = self.nodes.read().unwrap().get(&target).cloned().ok_or_else(|| anyhow!("no route to node {}", target))?;
        Ok(n.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        let n = self.nodes.read().unwrap().get(&target).cloned().ok_or_else(|| anyhow!("no route to node {}", target))?;
        Ok(n.vote(rpc).await?)
    }
}

async fn settle(node: &Node, want: State) -> String {
    for _ in 0..100 {
        let m = node.metrics().borrow().clone();
        if m.state == want {
            return format!("{:?}, term {}, last_log_index {}", m.state, m.current_term, m.last_log_index);
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    panic!("node never reached {:?}", want);
}

async fn timed_shutdown(node: Node) -> String {
    let start = Instant::now();
    match tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await {
        Ok(Ok(r)) => format!("completed after {} ms: {:?}", start.elapsed().as_millis(), r),
        Ok(Err(e)) => format!("task failed after {} ms: {}", start.elapsed().as_millis(), e),
        Err(_) => "still pending after 5000 ms".to_string(),
    }
}

#[tokio::main(threaded_scheduler)]
async fn main() {
    let config = Arc::new(Config::build("demo".into()).validate().unwrap());
    let min = config.election_timeout_min;
    let max = config.election_timeout_max;
    let mut rows = Vec::new();

    // A node that was never initialized.
    let net = Arc::new(Net::default());
    let a = Node::new(7, config.clone(), net.clone(), Arc::new(MemStore::new(7)));
    let st = settle(&a, State::NonVoter).await;
    tokio::time::delay_for(Duration::from_millis(200)).await;
    rows.push(("node 7, never initialized", st, timed_shutdown(a).await));

    // A single-node cluster.
    let b = Node::new(0, config.clone(), net.clone(), Arc::new(MemStore::new(0)));
    b.initialize([0u64].iter().cloned().collect::<HashSet<_>>()).await.unwrap();
    let st = settle(&b, State::Leader).await;
    tokio::time::delay_for(Duration::from_millis(200)).await;
    rows.push(("node 0, single-node cluster {0}", st, timed_shutdown(b).await));

    // A follower of a two-node cluster whose leader stays up.
    let net = Arc::new(Net::default());
    for id in [1u64, 2].iter() {
        let n = Node::new(*id, config.clone(), net.clone(), Arc::new(MemStore::new(*id)));
        net.nodes.write().unwrap().insert(*id, Arc::new(n));
    }
    let n1 = net.nodes.read().unwrap()[&1].clone();
    n1.initialize([1u64, 2].iter().cloned().collect::<HashSet<_>>()).await.unwrap();
    let mut follower = None;
    for _ in 0..100 {
        for id in [1u64, 2].iter() {
            let n = net.nodes.read().unwrap()[id].clone();
            if n.metrics().borrow().state == State::Leader {
                follower = Some(if *id == 1 { 2 } else { 1 });
            }
        }
        if follower.is_some() {
            break;
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    let fid = follower.expect("a leader");
    tokio::time::delay_for(Duration::from_millis(200)).await;
    let f = net.nodes.write().unwrap().remove(&fid).unwrap();
    let f = Arc::try_unwrap(f).ok().expect("only handle");
    let st = settle(&f, State::Follower).await;
    let label = if fid == 1 { "node 1, follower in {1, 2}" } else { "node 2, follower in {1, 2}" };
    rows.push((label, st, timed_shutdown(f).await));

    println!("# Shutting down async-raft 0.5.2 nodes\n");
    println!("memstore 0.1.0, default `Config` (heartbeat {} ms, election timeout {}-{} ms), in-process", config.heartbeat_interval, min, max);
    println!("network. Each node had been idle for at least 200 ms before `shutdown()` was called; the");
    println!("returned join handle was awaited for up to 5 s.\n");
    println!("| node | state before shutdown | awaiting the join handle |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {} | {} | {} |", a, b, c);
    }
}
