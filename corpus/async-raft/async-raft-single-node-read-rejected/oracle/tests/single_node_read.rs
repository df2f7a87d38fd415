//! On a single-node cluster the leader is its own majority: a linearizable read must succeed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

type Node = Raft<ClientRequest, ClientResponse, NoPeers, MemStore>;

/// A single-node cluster has nobody to talk to.
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

#[tokio::test(threaded_scheduler)]
async fn single_node_leader_serves_linearizable_reads() {
    let config = Arc::new(Config::build("oracle".into()).validate().unwrap());
    let node = Node::new(0, config, Arc::new(NoPeers), Arc::new(MemStore::new(0)));

    let mut members = HashSet::new();
    members.insert(0);
    node.initialize(members).await.expect("initialize");

    let mut rx = node.metrics();
    let became_leader = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if rx.borrow().state == State::Leader {
                return;
            }
            if rx.recv().await.is_none() {
                panic!("metrics channel closed");
            }
        }
    })
    .await;
    assert!(became_leader.is_ok(), "node 0 never became leader: {:?}", node.metrics().borrow().clone());

    let write = node
        .client_write(ClientWriteRequest::new(ClientRequest { client: "c".into(), serial: 1, status: "x".into() }))
        .await;
    assert!(write.is_ok(), "write on the single-node leader failed: {:?}", write.err());

    for attempt in 0..3 {
        let read = tokio::time::timeout(Duration::from_secs(3), node.client_read()).await;
        match read {
            Ok(Ok(())) => {}
            Ok(Err(err)) => panic!("read {} on the single-node leader failed: {}", attempt, err),
            Err(_) => panic!("read {} on the single-node leader did not answer", attempt),
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(3), node.shutdown()).await;
}
