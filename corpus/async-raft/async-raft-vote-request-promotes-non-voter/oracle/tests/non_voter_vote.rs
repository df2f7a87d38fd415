//! A node outside the membership stays a non-voter whatever RPCs reach it: it adopts a higher
//! term from a RequestVote, answers it (granting or refusing), never turns Follower or Candidate,
//! never campaigns, and keeps replicating from the new leader. A member still becomes a Follower
//! on such a request and campaigns when no leader follows.
//!
//! The seed picks the cluster's ids and size, how many entries precede the removal, and the
//! sequence of stray RequestVotes (candidates, terms, up-to-date or stale logs).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryConfigChange, EntryNormal, EntryPayload,
    InstallSnapshotRequest, InstallSnapshotResponse, MembershipConfig, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftMetrics, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

pub type Node = Raft<ClientRequest, ClientResponse, DeadNet, MemStore>;

pub const ELECTION_MIN: u64 = 1000;
pub const ELECTION_MAX: u64 = 1500;

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x0007_e5eed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// The other nodes are unreachable; the scenario delivers their RPCs by hand. Records the
/// RequestVotes the node under test sends.
#[derive(Default)]
pub struct DeadNet {
    pub sent_votes: Mutex<Vec<VoteRequest>>,
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for DeadNet {
    async fn append_entries(&self, target: NodeId, _rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Err(anyhow!("node {} unreachable", target))
    }
    async fn install_snapshot(&self, target: NodeId, _rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Err(anyhow!("node {} unreachable", target))
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        self.sent_votes.lock().unwrap().push(rpc);
        Err(anyhow!("node {} unreachable", target))
    }
}

/// A RequestVote delivered by hand: from `candidate` in `term`, with a log that is either as
/// long as the receiver's (`up_to_date`) or still ends at index 1.
#[derive(Clone, Debug)]
pub struct Stray {
    pub candidate: NodeId,
    pub term: u64,
    pub up_to_date: bool,
}

/// Everything one run of the removed-node scenario is made of.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The node under test, removed from `cluster`.
    pub removed: NodeId,
    /// Every member before the removal (includes `removed`); the first one leads term 1.
    pub cluster: Vec<NodeId>,
    /// Normal entries replicated before the membership change.
    pub normal_entries: u64,
    pub strays: Vec<Stray>,
}

impl Plan {
    /// The symptom's run: node 2 removed from {0, 1, 2}, then node 1, which missed the removal,
    /// asks for its vote in term 2.
    pub fn symptom() -> Plan {
        Plan { removed: 2, cluster: vec![0, 1, 2], normal_entries: 0, strays: vec![Stray { candidate: 1, term: 2, up_to_date: false }] }
    }

    pub fn seeded(seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let size = if rng.below(2) == 0 { 3 } else { 5 };
        let mut cluster = Vec::new();
        while cluster.len() < size {
            let id = rng.below(30);
            if !cluster.contains(&id) {
                cluster.push(id);
            }
        }
        let removed = cluster[1 + rng.below(size as u64 - 1) as usize];
        let others: Vec<NodeId> = cluster.iter().cloned().filter(|id| *id != removed).collect();
        let count = 2 + rng.below(3);
        let granted_at = rng.below(count);
        let mut term = 1;
        let mut strays = Vec::new();
        for i in 0..count {
            term += 1 + rng.below(2);
            let candidate = others[rng.below(others.len() as u64) as usize];
            strays.push(Stray { candidate, term, up_to_date: i == granted_at || rng.below(2) == 0 });
        }
        Plan { removed, cluster, normal_entries: rng.below(4), strays }
    }
}

/// What the node under test looked like at one point of the scenario.
#[derive(Clone, Debug)]
pub struct Seen {
    pub label: String,
    pub metrics: RaftMetrics,
    /// The term the node put in its answer, for the RPCs delivered to it.
    pub answer_term: Option<u64>,
}

/// What a run observed; the test judges it, the bundle generator prints it.
#[derive(Debug, Default)]
pub struct Report {
    pub steps: Vec<Seen>,
    /// Every distinct metrics value the node published, in order.
    pub stream: Vec<RaftMetrics>,
    pub sent_votes: Vec<VoteRequest>,
}

fn config() -> Arc<Config> {
    Arc::new(
        Config::build("oracle".into())
            .heartbeat_interval(50)
            .election_timeout_min(ELECTION_MIN)
            .election_timeout_max(ELECTION_MAX)
            .validate()
            .unwrap(),
    )
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

fn normal_entry(term: u64, index: u64) -> Entry<ClientRequest> {
    let data = ClientRequest { client: "c".into(), serial: index, status: format!("v{}", index) };
    Entry { term, index, payload: EntryPayload::Normal(EntryNormal { data }) }
}

/// Records every distinct metrics value the node publishes until it stops.
fn watch_stream(node: &Node) -> Arc<Mutex<Vec<RaftMetrics>>> {
    let stream = Arc::new(Mutex::new(Vec::<RaftMetrics>::new()));
    let mut rx = node.metrics();
    let out = stream.clone();
    tokio::spawn(async move {
        loop {
            let m = rx.borrow().clone();
            {
                let mut s = out.lock().unwrap();
                if s.last() != Some(&m) {
                    s.push(m);
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    stream
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

async fn snapshot(node: &Node, report: &mut Report, label: String, answer_term: Option<u64>) {
    settle().await;
    report.steps.push(Seen { label, metrics: node.metrics().borrow().clone(), answer_term });
}

/// Node `plan.removed` follows leader `plan.cluster[0]` as a voter, is removed through a joint
/// configuration, receives the stray RequestVotes after a silence longer than an election
/// timeout, idles for three more election timeouts, and finally gets new entries from a leader
/// of the smaller cluster.
pub async fn removed_node(plan: &Plan) -> Report {
    let net = Arc::new(DeadNet::default());
    let node = Node::new(plan.removed, config(), net.clone(), Arc::new(MemStore::new(plan.removed)));
    let stream = watch_stream(&node);
    let mut report = Report::default();
    let leader = plan.cluster[0];
    let after: Vec<NodeId> = plan.cluster.iter().cloned().filter(|id| *id != plan.removed).collect();
    snapshot(&node, &mut report, "started".into(), None).await;

    let mut entries = vec![config_entry(1, 1, &plan.cluster, None)];
    for i in 0..plan.normal_entries {
        entries.push(normal_entry(1, 2 + i));
    }
    let last = entries.len() as u64;
    let resp = node
        .append_entries(AppendEntriesRequest { term: 1, leader_id: leader, prev_log_index: 0, prev_log_term: 0, entries, leader_commit: last })
        .await
        .expect("append_entries");
    snapshot(&node, &mut report, format!("AppendEntries from leader {} (term 1): config {:?} up to index {} -> success={}", leader, plan.cluster, last, resp.success), None).await;

    let entries = vec![config_entry(1, last + 1, &plan.cluster, Some(&after)), config_entry(1, last + 2, &after, None)];
    let resp = node
        .append_entries(AppendEntriesRequest { term: 1, leader_id: leader, prev_log_index: last, prev_log_term: 1, entries, leader_commit: last + 1 })
        .await
        .expect("append_entries");
    let last = last + 2;
    snapshot(&node, &mut report, format!("AppendEntries from leader {} (term 1): joint config at index {}, config {:?} at index {} -> success={}", leader, last - 1, after, last, resp.success), None).await;

    // The leader goes silent; the stray requests come later than an election timeout.
    tokio::time::sleep(Duration::from_millis(ELECTION_MAX + 100)).await;
    for s in &plan.strays {
        let (index, term) = if s.up_to_date { (last, 1) } else { (1, 1) };
        let r = node.vote(VoteRequest::new(s.term, s.candidate, index, term)).await.expect("vote RPC answered");
        snapshot(
            &node,
            &mut report,
            format!("RequestVote from node {} (term {}, last_log_index {}) -> granted={}, term={}", s.candidate, s.term, index, r.vote_granted, r.term),
            Some(r.term),
        )
        .await;
    }

    tokio::time::sleep(Duration::from_millis(3 * ELECTION_MAX)).await;
    snapshot(&node, &mut report, format!("{} ms of silence", 3 * ELECTION_MAX), None).await;

    // A leader of the remaining members, in the latest term, replicates two more entries.
    let term = plan.strays.iter().map(|s| s.term).max().unwrap_or(1);
    let new_leader = after[after.len() - 1];
    let entries = vec![normal_entry(term, last + 1), normal_entry(term, last + 2)];
    let resp = node
        .append_entries(AppendEntriesRequest { term, leader_id: new_leader, prev_log_index: last, prev_log_term: 1, entries, leader_commit: last + 2 })
        .await
        .expect("append_entries");
    snapshot(&node, &mut report, format!("AppendEntries from leader {} (term {}): 2 entries after index {} -> success={}", new_leader, term, last, resp.success), Some(resp.term)).await;

    report.sent_votes = std::mem::take(&mut *net.sent_votes.lock().unwrap());
    let _ = node.shutdown().await;
    report.stream = stream.lock().unwrap().clone();
    report
}

/// A member of {100, member, candidate} that follows leader 100 gets an up-to-date RequestVote in
/// term 20 and then hears nothing more. Returns its metrics right after the request, the term of
/// its answer and the RequestVotes it sent afterwards.
pub async fn member_node(member: NodeId, candidate: NodeId) -> (RaftMetrics, u64, Vec<VoteRequest>) {
    let net = Arc::new(DeadNet::default());
    let node = Node::new(member, config(), net.clone(), Arc::new(MemStore::new(member)));
    let members = [100, member, candidate];
    node.append_entries(AppendEntriesRequest { term: 1, leader_id: 100, prev_log_index: 0, prev_log_term: 0, entries: vec![config_entry(1, 1, &members, None)], leader_commit: 1 })
        .await
        .expect("append_entries");
    tokio::time::sleep(Duration::from_millis(ELECTION_MIN + 10)).await;
    let answer = node.vote(VoteRequest::new(20, candidate, 1, 1)).await.expect("vote RPC answered");
    settle().await;
    let after = node.metrics().borrow().clone();
    tokio::time::sleep(Duration::from_millis(3 * ELECTION_MAX)).await;
    let sent = std::mem::take(&mut *net.sent_votes.lock().unwrap());
    let _ = node.shutdown().await;
    (after, answer.term, sent)
}

fn check_removed(plan: &Plan, report: &Report) {
    let mut term = 1;
    let mut strays = plan.strays.iter();
    for seen in &report.steps[3..] {
        let m = &seen.metrics;
        if seen.label.starts_with("RequestVote") {
            term = strays.next().unwrap().term;
            assert_eq!(seen.answer_term, Some(term), "the removed node did not adopt the higher term of a RequestVote: {} / {:?}", seen.label, m);
        }
        assert!(!m.membership_config.contains(&plan.removed), "membership changed under the removed node: {:?}", m);
        assert_eq!(m.state, State::NonVoter, "a node outside the membership left the non-voter state after: {} / {:?}", seen.label, m);
    }
    for m in &report.stream {
        assert!(
            m.state == State::NonVoter || m.state == State::Shutdown || m.membership_config.contains(&plan.removed),
            "the removed node published state {:?} while outside the membership: {:?}",
            m.state,
            m
        );
    }
    assert!(report.sent_votes.is_empty(), "the removed node campaigned: {:?}", report.sent_votes);
    let end = &report.steps[report.steps.len() - 1];
    assert!(end.label.ends_with("success=true"), "the removed node refused the new leader's entries: {}", end.label);
    assert_eq!(end.answer_term, Some(term), "term moved on its own: {} / {:?}", end.label, end.metrics);
    assert!(end.metrics.last_log_index >= plan.normal_entries + 5, "the removed node stopped replicating: {:?}", end.metrics);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn removed_node_stays_non_voter_whatever_vote_requests_reach_it() {
    let plan = Plan::seeded(seed());
    let report = removed_node(&plan).await;
    check_removed(&plan, &report);

    let (after, term, sent) = member_node(plan.removed, plan.strays[0].candidate).await;
    assert_eq!(after.state, State::Follower, "a member did not follow a higher-term candidate: {:?}", after);
    assert_eq!(term, 20, "a member did not adopt a candidate's higher term");
    assert!(!sent.is_empty(), "a member with no leader never campaigned");
}
