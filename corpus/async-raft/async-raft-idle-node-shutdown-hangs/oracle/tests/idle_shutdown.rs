//! `Raft::shutdown` must stop the Raft core promptly even when nothing else is happening.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

type Node = Raft<ClientRequest, ClientResponse, NoPeers, MemStore>;

struct NoPeers;

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for NoPeers {
    async fn append_entries(&self, target: NodeId, _rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Err(anyhow!("no route to node {}", target))
    }
    async fn install_snapshot(&self, target: NodeId, _rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Err(anyhow!("no route to node {}", target))
    }
    async fn vote(&self, target: NodeId, _rpc: VoteRequest) -> Result<VoteResponse> {
        Err(anyhow!("no route to node {}", target))
    }
}

fn new_node(id: NodeId) -> Node {
    let config = Arc::new(Config::build("oracle".into()).validate().unwrap());
    Node::new(id, config, Arc::new(NoPeers), Arc::new(MemStore::new(id)))
}

async fn wait_state(node: &Node, want: State) {
    let mut rx = node.metrics();
    let reached = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if rx.borrow().state == want {
                return;
            }
            if rx.recv().await.is_none() {
                panic!("metrics channel closed");
            }
        }
    })
    .await;
    assert!(reached.is_ok(), "node never reached {:?}: {:?}", want, node.metrics().borrow().clone());
}

async fn assert_stops(node: Node, what: &str) {
    match tokio::time::timeout(Duration::from_secs(3), node.shutdown()).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(err))) => panic!("{}: the Raft core stopped with an error: {}", what, err),
        Ok(Err(join)) => panic!("{}: the Raft core task failed: {}", what, join),
        Err(_) => panic!("{}: shutdown did not complete within 3 s", what),
    }
}

#[tokio::test(threaded_scheduler)]
async fn shutdown_of_idle_single_node_leader_completes() {
    let node = new_node(0);
    let mut members = HashSet::new();
    members.insert(0);
    node.initialize(members).await.expect("initialize");
    wait_state(&node, State::Leader).await;
    // Let the leader settle, so that nothing is in flight when shutdown is requested.
    tokio::time::delay_for(Duration::from_millis(300)).await;
    assert_stops(node, "single-node leader").await;
}

#[tokio::test(threaded_scheduler)]
async fn shutdown_of_uninitialized_node_completes() {
    let node = new_node(7);
    wait_state(&node, State::NonVoter).await;
    tokio::time::delay_for(Duration::from_millis(100)).await;
    assert_stops(node, "uninitialized node").await;
}
