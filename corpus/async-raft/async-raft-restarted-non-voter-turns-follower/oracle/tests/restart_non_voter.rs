//! A node that only ever joined as a non-voter must come back as a non-voter after a restart.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftMetrics, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

/// In-process transport: delivers every RPC to the registered node with that id.
#[derive(Default)]
struct Net {
    nodes: RwLock<HashMap<NodeId, Node>>,
}

impl Net {
    fn node(&self, id: NodeId) -> Result<Node> {
        self.nodes.read().unwrap().get(&id).cloned().ok_or_else(|| anyhow!("node {} is down", id))
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
        Ok(self.node(target)?.vote(rpc).await?)
    }
}

async fn wait_for(node: &Node, what: &str, cond: impl Fn(&RaftMetrics) -> bool) -> RaftMetrics {
    let mut rx = node.metrics();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        {
            let m = rx.borrow().clone();
            if cond(&m) {
                return m;
            }
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            _ => panic!("timed out waiting for: {} (last metrics: {:?})", what, rx.borrow().clone()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_non_voter_stays_non_voter() {
    let config = Arc::new(
        Config::build("oracle".into())
            .heartbeat_interval(50)
            .election_timeout_min(300)
            .election_timeout_max(600)
            .validate()
            .unwrap(),
    );
    let net = Arc::new(Net::default());
    let store0 = Arc::new(MemStore::new(0));
    let store1 = Arc::new(MemStore::new(1));

    let n0 = Node::new(0, config.clone(), net.clone(), store0);
    let n1 = Node::new(1, config.clone(), net.clone(), store1.clone());
    net.nodes.write().unwrap().insert(0, n0.clone());
    net.nodes.write().unwrap().insert(1, n1.clone());

    let mut members = HashSet::new();
    members.insert(0);
    n0.initialize(members.clone()).await.unwrap();
    wait_for(&n0, "node 0 leads", |m| m.state == State::Leader).await;

    n0.add_non_voter(1).await.unwrap();
    for i in 0..3u64 {
        n0.client_write(async_raft::raft::ClientWriteRequest::new(ClientRequest {
            client: "c".into(),
            serial: i,
            status: format!("v{}", i),
        }))
        .await
        .unwrap();
    }
    let leader_last = n0.metrics().borrow().last_log_index;
    let before = wait_for(&n1, "node 1 catches up", |m| m.last_log_index == leader_last && m.membership_config.members == members).await;
    assert_eq!(before.state, State::NonVoter, "before the restart node 1 is a non-voter");

    // Restart node 1 on the same storage.
    net.nodes.write().unwrap().remove(&1);
    n1.shutdown().await.unwrap();
    let n1 = Node::new(1, config.clone(), net.clone(), store1);
    net.nodes.write().unwrap().insert(1, n1.clone());

    // Wait until the restarted core has loaded its persisted state and reported it.
    let after = wait_for(&n1, "restarted node 1 reports its recovered state", |m| {
        m.last_log_index == leader_last && m.membership_config.members == members
    })
    .await;
    assert!(
        !after.membership_config.contains(&1),
        "node 1 is not a member of the configuration it recovered"
    );
    assert_eq!(
        after.state,
        State::NonVoter,
        "a node outside the recovered membership must restart as a non-voter, got {:?}",
        after
    );

    // It must also stay a non-voter while the leader keeps replicating to it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = n1.metrics().borrow().clone();
    assert_eq!(later.state, State::NonVoter, "node 1 left the non-voter state: {:?}", later);

    let _ = n1.shutdown().await;
    let _ = n0.shutdown().await;
}
