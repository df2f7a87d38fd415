//! A node removed from the membership (a non-voter) that answers a RequestVote with a higher
//! term must stay a non-voter.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryConfigChange, EntryPayload,
    InstallSnapshotRequest, InstallSnapshotResponse, MembershipConfig, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftMetrics, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

type Node = Raft<ClientRequest, ClientResponse, DeadNet, MemStore>;

/// The other nodes are unreachable; the test delivers their RPCs by hand. Counts the RPCs the
/// node under test tries to send.
#[derive(Default)]
struct DeadNet {
    vote_requests: AtomicUsize,
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for DeadNet {
    async fn append_entries(&self, target: NodeId, _rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Err(anyhow!("node {} unreachable", target))
    }
    async fn install_snapshot(&self, target: NodeId, _rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Err(anyhow!("node {} unreachable", target))
    }
    async fn vote(&self, target: NodeId, _rpc: VoteRequest) -> Result<VoteResponse> {
        self.vote_requests.fetch_add(1, Ordering::SeqCst);
        Err(anyhow!("node {} unreachable", target))
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

fn config_entry(term: u64, index: u64, members: &[NodeId], after: Option<&[NodeId]>) -> Entry<ClientRequest> {
    Entry {
        term,
        index,
        payload: EntryPayload::ConfigChange(EntryConfigChange {
            membership: MembershipConfig {
                members: members.iter().cloned().collect::<HashSet<_>>(),
                members_after_consensus: after.map(|a| a.iter().cloned().collect::<HashSet<_>>()),
            },
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_node_stays_non_voter_after_higher_term_vote_request() {
    let config = Arc::new(
        Config::build("oracle".into())
            .heartbeat_interval(50)
            .election_timeout_min(1000)
            .election_timeout_max(1500)
            .validate()
            .unwrap(),
    );
    let net = Arc::new(DeadNet::default());
    let node = Node::new(2, config, net.clone(), Arc::new(MemStore::new(2)));
    wait_for(&node, "fresh node starts as a non-voter", |m| m.state == State::NonVoter).await;

    // Node 2 is a voter of {0, 1, 2} under leader 0 ...
    let resp = node
        .append_entries(AppendEntriesRequest {
            term: 1,
            leader_id: 0,
            prev_log_index: 0,
            prev_log_term: 0,
            entries: vec![config_entry(1, 1, &[0, 1, 2], None)],
            leader_commit: 1,
        })
        .await
        .expect("append_entries");
    assert!(resp.success);
    wait_for(&node, "node 2 follows as a voter", |m| m.state == State::Follower && m.last_log_index == 1).await;

    // ... and is then removed: the joint config and the final config {0, 1} reach it.
    let resp = node
        .append_entries(AppendEntriesRequest {
            term: 1,
            leader_id: 0,
            prev_log_index: 1,
            prev_log_term: 1,
            entries: vec![config_entry(1, 2, &[0, 1, 2], Some(&[0, 1])), config_entry(1, 3, &[0, 1], None)],
            leader_commit: 2,
        })
        .await
        .expect("append_entries");
    assert!(resp.success);
    let m = wait_for(&node, "removed node reports the new config", |m| m.last_log_index == 3).await;
    assert_eq!(m.state, State::NonVoter, "a removed node is a non-voter: {:?}", m);
    assert!(!m.membership_config.contains(&2));

    // Leader 0 goes silent. Node 1 missed the removal (its log ends at index 1) and, after an
    // election timeout, campaigns in term 2 with node 2 still in its config.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let _ = node.vote(VoteRequest::new(2, 1, 1, 1)).await.expect("vote RPC answered");

    // Whatever the answer, node 2 is still not a member: it must remain a non-voter (and so
    // never start an election of its own).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = node.metrics().borrow().clone();
    assert_eq!(
        m.state,
        State::NonVoter,
        "a node outside the membership left the non-voter state after a vote request: {:?}",
        m
    );
    assert!(m.current_term <= 2, "the non-voter's term moved on its own: {:?}", m);
    assert_eq!(net.vote_requests.load(Ordering::SeqCst), 0, "the non-voter sent vote requests");
    let _ = node.shutdown().await;
}
