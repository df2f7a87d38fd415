//! Runs async-raft 0.5.3 as a one-node cluster and as a three-node cluster (in-process network),
//! issues a write and a few linearizable reads on the leader, and prints the outcomes as Markdown.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};
use tokio::time::Instant;

type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

#[derive(Default)]
struct Net {
    nodes: RwLock<HashMap<NodeId, Arc<Node>>>,
}

impl Net {
    fn get(&self, id: NodeId) -> Result<Arc<Node>> {
        self.nodes.read().unwrap().get(&id).cloned().ok_or_else(|| anyhow!("no route to node {}", id))
    }
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Ok(self.get(target)?.append_entries(rpc).await?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Ok(self.get(target)?.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        Ok(self.get(target)?.vote(rpc).await?)
    }
}

async fn scenario(ids: &[NodeId]) -> Vec<String> {
    let start = Instant::now();
    let mut out = Vec::new();
    let config = Arc::new(Config::build("demo".into()).validate().unwrap());
    let net = Arc::new(Net::default());
    for &id in ids {
        let node = Node::new(id, config.clone(), net.clone(), Arc::new(MemStore::new(id)));
        net.nodes.write().unwrap().insert(id, Arc::new(node));
    }
    let members: HashSet<NodeId> = ids.iter().cloned().collect();
    let n0 = net.get(0).unwrap();
    let r = n0.initialize(members.clone()).await;
    out.push(format!("{} ms | node 0 | initialize({:?}) | {:?}", start.elapsed().as_millis(), { let mut v: Vec<_> = members.iter().collect(); v.sort(); v }, r));
    let mut leader = None;
    for _ in 0..100 {
        for &id in ids {
            let m = net.get(id).unwrap().metrics().borrow().clone();
            if m.state == State::Leader {
                leader = Some((id, m));
            }
        }
        if leader.is_some() {
            break;
        }
        tokio::time::delay_for(Duration::from_millis(50)).await;
    }
    let (lid, m) = leader.expect("a leader");
    out.push(format!("{} ms | node {} | metrics | state {:?}, term {}, last_log_index {}, current_leader {:?}", start.elapsed().as_millis(), lid, m.state, m.current_term, m.last_log_index, m.current_leader));
    let l = net.get(lid).unwrap();
    let w = l.client_write(ClientWriteRequest::new(ClientRequest { client: "c".into(), serial: 1, status: "x".into() })).await;
    out.push(format!("{} ms | node {} | client_write(serial 1) | {}", start.elapsed().as_millis(), lid, match w { Ok(r) => format!("Ok(index {})", r.index), Err(e) => format!("Err({})", e) }));
    for _ in 0..3 {
        let r = l.client_read().await;
        out.push(format!("{} ms | node {} | client_read() | {}", start.elapsed().as_millis(), lid, match r { Ok(()) => "Ok(())".to_string(), Err(e) => format!("Err(\"{}\")", e) }));
        tokio::time::delay_for(Duration::from_millis(100)).await;
    }
    let m = l.metrics().borrow().clone();
    out.push(format!("{} ms | node {} | metrics | state {:?}, term {}, last_log_index {}, last_applied {}", start.elapsed().as_millis(), lid, m.state, m.current_term, m.last_log_index, m.last_applied));
    out
}

#[tokio::main(threaded_scheduler)]
async fn main() {
    println!("# Linearizable reads on the leader\n");
    println!("async-raft 0.5.3 with memstore 0.1.0, default `Config`, in-process network that forwards");
    println!("each RPC to the target node.\n");
    for ids in [&[0u64][..], &[0, 1, 2][..]].iter() {
        println!("## Cluster {:?}\n", ids);
        println!("| time | node | call | result |");
        println!("|---|---|---|---|");
        for line in scenario(ids).await {
            println!("| {} |", line);
        }
        println!();
    }
}
