//! Hidden oracle: a follower that installs a snapshot takes the snapshot's membership whenever
//! the snapshot covers the log entry its own membership came from, and keeps a membership whose
//! entry is still in its log. A deposed leader's uncommitted membership change that the snapshot
//! overwrites must not stay in force: the node's voter status, its reported membership and its
//! campaigning follow the cluster's configuration.
//!
//! One real node, node 3, on openraft-memstore, is driven through its public RPC handlers with
//! the messages two leaders would send it. Each seed draws the sizes and the variant details.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{
    CommittedLeaderId, Config, Entry, EntryPayload, LogId, Membership, Raft, ServerState,
    SnapshotMeta, StoredMembership, Vote,
};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, MemStoreStateMachine, TypeConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The node under test.
pub const NODE: MemNodeId = 3;

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

/// Node 3's outgoing network: nothing is reachable; vote requests are counted and the first
/// one is kept.
#[derive(Clone, Default)]
pub struct Net {
    pub votes: Arc<AtomicUsize>,
    pub first_vote: Arc<Mutex<Option<VoteRequest<MemNodeId>>>>,
}

impl RaftNetwork<TypeConfig> for Net {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>>
    {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        if self.votes.fetch_add(1, Ordering::SeqCst) == 0 {
            *self.first_vote.lock().unwrap() = Some(rpc);
        }
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Net;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> Net {
        self.clone()
    }
}

pub fn log_id(term: u64, leader: MemNodeId, index: u64) -> LogId<MemNodeId> {
    LogId::new(CommittedLeaderId::new(term, leader), index)
}

fn set(ids: &[MemNodeId]) -> BTreeSet<MemNodeId> {
    ids.iter().copied().collect()
}

/// A membership of the given voter configs; every other node of 0..=4 is a learner.
pub fn membership(configs: &[&[MemNodeId]]) -> Membership<MemNodeId, ()> {
    Membership::new(
        configs.iter().map(|c| set(c)).collect(),
        set(&[0, 1, 2, 3, 4]),
    )
}

fn normal(id: LogId<MemNodeId>) -> Entry<TypeConfig> {
    let req = ClientRequest {
        client: "c".to_string(),
        serial: id.index,
        status: format!("v{}", id.index),
    };
    Entry {
        log_id: id,
        payload: EntryPayload::Normal(req),
    }
}

fn member_entry(id: LogId<MemNodeId>, m: &Membership<MemNodeId, ()>) -> Entry<TypeConfig> {
    Entry {
        log_id: id,
        payload: EntryPayload::Membership(m.clone()),
    }
}

/// One leader's batch of entries for node 3.
#[derive(Clone, Debug)]
pub struct Append {
    pub leader: MemNodeId,
    pub term: u64,
    pub prev: Option<LogId<MemNodeId>>,
    pub entries: Vec<(LogId<MemNodeId>, Option<Membership<MemNodeId, ()>>)>,
    pub commit: Option<LogId<MemNodeId>>,
}

/// A snapshot a leader sends node 3, in chunks of `chunk` bytes.
#[derive(Clone, Debug)]
pub struct Snap {
    pub leader: MemNodeId,
    pub term: u64,
    pub last: LogId<MemNodeId>,
    pub membership: StoredMembership<MemNodeId, ()>,
    pub chunk: usize,
}

/// What node 3 must report after the snapshot is installed.
#[derive(Clone, Debug)]
pub struct Expect {
    pub membership: StoredMembership<MemNodeId, ()>,
    pub state: ServerState,
}

/// The variants a seed draws parameters for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// A deposed leader's uncommitted change makes node 3, a learner, a voter; the next
    /// leader's snapshot covers that entry's index.
    StaleChangePromotes,
    /// A deposed leader's uncommitted change reshapes the voters without changing whether node 3
    /// is one; the next leader's snapshot covers it.
    StaleChangeReshapes,
    /// Node 3 already holds the snapshot leader's own later membership entry when a delayed
    /// snapshot that does not reach that entry arrives.
    DelayedSnapshotBehindLog,
}

/// One scenario: appends, then the snapshot, then what must hold, then later appends.
#[derive(Clone, Debug)]
pub struct Plan {
    pub variant: Variant,
    pub before: Vec<Append>,
    pub snapshot: Snap,
    pub expect: Expect,
    pub after: Vec<Append>,
    /// Node 3's membership once `after` is applied.
    pub expect_after: StoredMembership<MemNodeId, ()>,
}

fn entries_of(
    term: u64,
    leader: MemNodeId,
    range: std::ops::RangeInclusive<u64>,
) -> Vec<(LogId<MemNodeId>, Option<Membership<MemNodeId, ()>>)> {
    range.map(|i| (log_id(term, leader, i), None)).collect()
}

impl Plan {
    /// Draws one scenario of `variant` from `rng`.
    pub fn draw(variant: Variant, rng: &mut ChaCha8Rng) -> Plan {
        // Leader 0, term 1: the initial membership at index 0, then k committed entries.
        let k: u64 = rng.gen_range(2..=6);
        let node3_votes = variant == Variant::StaleChangeReshapes && rng.gen_bool(0.5);
        let mut first_voters = vec![0, 1, 2];
        if node3_votes {
            first_voters.push(NODE);
        }
        let m0 = membership(&[&first_voters]);
        let m0_id = log_id(1, 0, 0);
        let mut first = vec![(m0_id, Some(m0.clone()))];
        first.extend(entries_of(1, 0, 1..=k));
        let initial = Append {
            leader: 0,
            term: 1,
            prev: None,
            entries: first,
            commit: Some(log_id(1, 0, k)),
        };
        let chunk = rng.gen_range(16..=400);
        let tail: u64 = rng.gen_range(1..=4);

        match variant {
            Variant::StaleChangePromotes | Variant::StaleChangeReshapes => {
                // The change leader 0 proposed last, as the first (joint) step.
                let mut grown = first_voters.clone();
                if variant == Variant::StaleChangePromotes {
                    grown.push(NODE);
                } else if rng.gen_bool(0.5) {
                    grown.push(4);
                } else {
                    grown.retain(|&v| v != 2);
                }
                let stale = membership(&[&first_voters, &grown]);
                // Leader 0 appends it at s, after `pad` more uncommitted entries, and is deposed
                // before anyone else stores them.
                let pad: u64 = rng.gen_range(0..=2);
                let s = k + 1 + pad;
                let mut es = entries_of(1, 0, k + 1..=k + pad);
                es.push((log_id(1, 0, s), Some(stale)));
                let stale_append = Append {
                    leader: 0,
                    term: 1,
                    prev: Some(log_id(1, 0, k)),
                    entries: es,
                    commit: Some(log_id(1, 0, k)),
                };
                // Leader 1, term 2, writes past s and snapshots up to n without node 3.
                let n = s + rng.gen_range(1..=3);
                let snap_membership = if pad > 0 && rng.gen_bool(0.5) {
                    // Its last membership is one it committed itself below s, adding node 4 as
                    // a voter.
                    let at = rng.gen_range(k + 1..s);
                    let mut own = first_voters.clone();
                    own.push(4);
                    StoredMembership::new(Some(log_id(2, 1, at)), membership(&[&own]))
                } else {
                    StoredMembership::new(Some(m0_id), m0.clone())
                };
                let last = log_id(2, 1, n);
                let snapshot = Snap {
                    leader: 1,
                    term: 2,
                    last,
                    membership: snap_membership.clone(),
                    chunk,
                };
                // Afterwards leader 1 starts adding node 3 as a voter (or, if it is one, node 4).
                let cur: Vec<MemNodeId> = snap_membership.voter_ids().collect();
                let mut next = cur.clone();
                next.push(if node3_votes { 4 } else { NODE });
                let after_change = membership(&[&cur, &next]);
                let after_id = log_id(2, 1, n + tail + 1);
                let mut es = entries_of(2, 1, n + 1..=n + tail);
                es.push((after_id, Some(after_change.clone())));
                let after = vec![Append {
                    leader: 1,
                    term: 2,
                    prev: Some(last),
                    entries: es,
                    commit: Some(after_id),
                }];
                let state = if node3_votes {
                    ServerState::Follower
                } else {
                    ServerState::Learner
                };
                Plan {
                    variant,
                    before: vec![initial, stale_append],
                    snapshot,
                    expect: Expect {
                        membership: snap_membership,
                        state,
                    },
                    after,
                    expect_after: StoredMembership::new(Some(after_id), after_change),
                }
            }
            Variant::DelayedSnapshotBehindLog => {
                // Leader 1, term 2, sends entries up to m with its own membership change at j,
                // which makes node 3 a voter; only up to c is committed. A snapshot up to n,
                // n < j, sent earlier, arrives late.
                let n = k + rng.gen_range(1..=3);
                let j = n + rng.gen_range(1..=2);
                let m = j + rng.gen_range(0..=2);
                let change = membership(&[&[0, 1, 2], &[0, 1, 2, NODE]]);
                let mut es = entries_of(2, 1, k + 1..=m);
                es[(j - k - 1) as usize].1 = Some(change.clone());
                let c = rng.gen_range(k..n);
                let ahead = Append {
                    leader: 1,
                    term: 2,
                    prev: Some(log_id(1, 0, k)),
                    entries: es,
                    commit: Some(log_id_at(c, k)),
                };
                let snap_membership = StoredMembership::new(Some(m0_id), m0.clone());
                let last = log_id(2, 1, n);
                let snapshot = Snap {
                    leader: 1,
                    term: 2,
                    last,
                    membership: snap_membership,
                    chunk,
                };
                let kept = StoredMembership::new(Some(log_id(2, 1, j)), change);
                let after = vec![Append {
                    leader: 1,
                    term: 2,
                    prev: Some(log_id(2, 1, m)),
                    entries: entries_of(2, 1, m + 1..=m + tail),
                    commit: Some(log_id(2, 1, m + tail)),
                }];
                Plan {
                    variant,
                    before: vec![initial, ahead],
                    snapshot,
                    expect: Expect {
                        membership: kept.clone(),
                        state: ServerState::Follower,
                    },
                    after,
                    expect_after: kept,
                }
            }
        }
    }
}

/// The log id at index `c` of a log whose entries up to `k` are leader 0's of term 1 and the
/// rest leader 1's of term 2.
fn log_id_at(c: u64, k: u64) -> LogId<MemNodeId> {
    if c <= k {
        log_id(1, 0, c)
    } else {
        log_id(2, 1, c)
    }
}

/// What node 3 reported at each step.
#[derive(Clone, Debug)]
pub struct Observed {
    pub after_snapshot: StoredMembership<MemNodeId, ()>,
    pub state_after_snapshot: ServerState,
    /// Vote requests node 3 sent while its timers ran with no leader talking to it.
    pub votes_while_idle: usize,
    pub after_appends: StoredMembership<MemNodeId, ()>,
}

fn to_request(a: &Append) -> AppendEntriesRequest<TypeConfig> {
    let entries = a
        .entries
        .iter()
        .map(|(id, m)| match m {
            Some(m) => member_entry(*id, m),
            None => normal(*id),
        })
        .collect();
    AppendEntriesRequest {
        vote: Vote::new_committed(a.term, a.leader),
        prev_log_id: a.prev,
        entries,
        leader_commit: a.commit,
    }
}

/// The election timeouts node 3 runs with, in milliseconds.
pub const ELECTION_TIMEOUT: (u64, u64) = (100, 150);

fn describe(a: &Append) -> String {
    let first = a.entries.first().map(|e| e.0.index).unwrap_or(0);
    let last = a.entries.last().map(|e| e.0.index).unwrap_or(0);
    let members: Vec<String> = a
        .entries
        .iter()
        .filter_map(|(id, m)| m.as_ref().map(|m| format!("membership entry {id}: {m}")))
        .collect();
    let show =
        |l: &Option<LogId<MemNodeId>>| l.map(|l| l.to_string()).unwrap_or("none".to_string());
    let mut line = format!(
        "node {} (term {}) -> node {NODE}: AppendEntries prev={} entries {first}..={last} leader_commit={}",
        a.leader,
        a.term,
        show(&a.prev),
        show(&a.commit)
    );
    for m in members {
        line.push_str(&format!("\n    {m}"));
    }
    line
}

fn metrics_line(raft: &Raft<TypeConfig>) -> String {
    let m = raft.metrics().borrow().clone();
    let show = |l: Option<LogId<MemNodeId>>| l.map(|l| l.to_string()).unwrap_or("none".to_string());
    format!(
        "node {NODE} metrics: state={:?} current_term={} last_log_index={} last_applied={} snapshot={} purged={}\n    membership_config: {}",
        m.state,
        m.current_term,
        m.last_log_index.map(|i| i.to_string()).unwrap_or("none".to_string()),
        show(m.last_applied),
        show(m.snapshot),
        show(m.purged),
        m.membership_config
    )
}

async fn deliver(raft: &Raft<TypeConfig>, a: &Append, note: &mut dyn FnMut(String)) {
    let last = a.entries.last().map(|e| e.0.index);
    let resp = raft.append_entries(to_request(a)).await.unwrap();
    note(format!("{}\n    response: {resp}", describe(a)));
    let applied = a.commit.map(|c| c.index).min(last);
    raft.wait(Some(Duration::from_secs(5)))
        .metrics(
            |m| m.last_log_index == last && m.last_applied.map(|l| l.index) >= applied,
            "entries stored and the committed ones applied",
        )
        .await
        .unwrap();
    note(metrics_line(raft));
}

/// Runs `plan` against a fresh node 3; `note` sees each message node 3 gets and its metrics
/// after it.
pub async fn run(plan: &Plan, note: &mut dyn FnMut(String)) -> Observed {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 30,
        election_timeout_min: ELECTION_TIMEOUT.0,
        election_timeout_max: ELECTION_TIMEOUT.1,
        enable_tick: false,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let net = Net::default();
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let raft = Raft::new(NODE, config, net.clone(), log_store, sm)
        .await
        .unwrap();

    for a in &plan.before {
        deliver(&raft, a, note).await;
    }

    let s = &plan.snapshot;
    let sm = MemStoreStateMachine {
        last_applied_log: Some(s.last),
        last_membership: s.membership.clone(),
        client_serial_responses: HashMap::new(),
        client_status: HashMap::new(),
    };
    let data = serde_json::to_vec(&sm).unwrap();
    let meta = SnapshotMeta {
        last_log_id: Some(s.last),
        last_membership: s.membership.clone(),
        snapshot_id: format!("{}-{}", s.leader, s.last.index),
    };
    let mut offset = 0;
    let mut chunks = 0;
    while offset < data.len() {
        let end = (offset + s.chunk).min(data.len());
        let req = InstallSnapshotRequest {
            vote: Vote::new_committed(s.term, s.leader),
            meta: meta.clone(),
            offset: offset as u64,
            data: data[offset..end].to_vec(),
            done: end == data.len(),
        };
        raft.install_snapshot(req).await.unwrap();
        offset = end;
        chunks += 1;
    }
    note(format!(
        "node {} (term {}) -> node {NODE}: InstallSnapshot last_log_id={} in {chunks} chunk(s) of at most {} bytes\n    last_membership: {}",
        s.leader, s.term, s.last, s.chunk, s.membership
    ));
    raft.wait(Some(Duration::from_secs(5)))
        .snapshot(s.last, "snapshot installed")
        .await
        .unwrap();
    note(metrics_line(&raft));
    let m = raft.metrics().borrow().clone();
    let after_snapshot = (*m.membership_config).clone();
    let state_after_snapshot = m.state;

    // A node that must be a learner is left alone with its timers running: it must not campaign.
    if plan.expect.state == ServerState::Learner {
        raft.runtime_config().tick(true);
        tokio::time::sleep(Duration::from_millis(ELECTION_TIMEOUT.1 * 4)).await;
        raft.runtime_config().tick(false);
        let first = net.first_vote.lock().unwrap().clone();
        note(match first {
            None => format!("no message from any leader for {} ms: node {NODE} sent no vote request", ELECTION_TIMEOUT.1 * 4),
            Some(v) => format!(
                "no message from any leader for {} ms: node {NODE} sent vote requests, the first: vote={} last_log_id={}",
                ELECTION_TIMEOUT.1 * 4,
                v.vote,
                v.last_log_id.map(|l| l.to_string()).unwrap_or("none".to_string())
            ),
        });
    }
    let votes_while_idle = net.votes.load(Ordering::SeqCst);

    // A node that campaigned has moved to a term of its own; later entries would be refused.
    if votes_while_idle == 0 {
        for a in &plan.after {
            deliver(&raft, a, note).await;
        }
    }
    let after_appends = (*raft.metrics().borrow().membership_config).clone();
    raft.shutdown().await.unwrap();
    Observed {
        after_snapshot,
        state_after_snapshot,
        votes_while_idle,
        after_appends,
    }
}

fn check(plan: &Plan, seen: &Observed) {
    assert_eq!(
        seen.after_snapshot, plan.expect.membership,
        "{:?}: membership after installing the snapshot (plan {:?})",
        plan.variant, plan
    );
    assert_eq!(
        seen.state_after_snapshot, plan.expect.state,
        "{:?}: server state after the snapshot",
        plan.variant
    );
    if plan.expect.state == ServerState::Learner {
        assert_eq!(
            seen.votes_while_idle, 0,
            "{:?}: a learner sent vote requests",
            plan.variant
        );
    }
    assert_eq!(
        seen.after_appends, plan.expect_after,
        "{:?}: membership after later entries",
        plan.variant
    );
}

async fn check_variant(variant: Variant) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed());
    // Two scenarios per seed, each with its own sizes.
    for _ in 0..2 {
        let plan = Plan::draw(variant, &mut rng);
        let seen = run(&plan, &mut |_| {}).await;
        check(&plan, &seen);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_drops_stale_promotion() {
    check_variant(Variant::StaleChangePromotes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_drops_stale_reshape() {
    check_variant(Variant::StaleChangeReshapes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_snapshot_keeps_newer_membership() {
    check_variant(Variant::DelayedSnapshotBehindLog).await;
}
