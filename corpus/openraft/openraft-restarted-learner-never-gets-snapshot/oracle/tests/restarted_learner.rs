//! Hidden oracle: a learner that restarts while the leader streams a snapshot to it in chunks
//! must still receive the snapshot and catch up, however many times it restarts during the
//! transfer, after whichever chunk, with its storage kept or wiped; every chunk respects the
//! configured chunk size, the learner ends with the leader's state, nothing is resent once it has
//! the snapshot, and later writes reach it as entries.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, LogId, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

/// The scenario's shape, drawn from a seed.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Client writes before the leader snapshots and purges its log.
    pub writes: u64,
    /// Length of each written status string.
    pub status_len: usize,
    /// `snapshot_max_chunk_size`, in bytes.
    pub chunk: u64,
    /// The learner restarts after this many chunks of a transfer were accepted; one entry per
    /// restart, each counted from the start of the transfer the learner then sees.
    pub restart_after: Vec<usize>,
    /// Whether the restarted learner keeps its storage (true) or comes back empty (false).
    pub keep_store: bool,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn plan(seed: u64) -> Plan {
    let mut s = seed.wrapping_mul(0x1000_0001).wrapping_add(7);
    let writes = 12 + splitmix(&mut s) % 20;
    let status_len = 8 + (splitmix(&mut s) % 24) as usize;
    let chunk = 96 + (splitmix(&mut s) % 5) * 32;
    let first = 1 + (splitmix(&mut s) % 3) as usize;
    let second = 2 + (splitmix(&mut s) % 2) as usize;
    let keep_store = splitmix(&mut s) % 2 == 0;
    Plan { writes, status_len, chunk, restart_after: vec![first, second], keep_store }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

/// The learner's own network: it never needs to send anything.
#[derive(Clone)]
struct Silent;

impl RaftNetwork<TypeConfig> for Silent {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
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
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Silent {
    type Network = Silent;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> Silent {
        Silent
    }
}

struct Node1 {
    raft: Option<Raft<TypeConfig>>,
    store: Arc<MemStore>,
    /// Chunks accepted by the current incarnation since it last started a transfer.
    accepted: usize,
}

/// The leader's view of the network: its only peer is learner 1, which it reaches in memory.
/// The link restarts the learner as the plan says, right after it accepted a chunk.
#[derive(Clone)]
pub struct Link {
    config: Arc<Config>,
    plan: Plan,
    node1: Arc<Mutex<Node1>>,
    restarts_done: Arc<AtomicUsize>,
    /// InstallSnapshot requests sent to the learner.
    pub chunks_sent: Arc<AtomicUsize>,
    /// The largest chunk payload sent, in bytes.
    pub largest_chunk: Arc<AtomicUsize>,
    /// Sees a one-line description of every RPC to the learner and its outcome.
    pub trace: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl Link {
    pub fn learner(&self) -> Raft<TypeConfig> {
        self.node1.lock().unwrap().raft.clone().expect("learner running")
    }

    pub fn learner_store(&self) -> Arc<MemStore> {
        self.node1.lock().unwrap().store.clone()
    }

    pub fn restarts_done(&self) -> usize {
        self.restarts_done.load(Ordering::SeqCst)
    }

    fn note(&self, line: String) {
        if let Some(t) = &self.trace {
            t(line);
        }
    }

    async fn restart_learner(&self) {
        let old = self.node1.lock().unwrap().raft.take();
        if let Some(old) = old {
            old.shutdown().await.unwrap();
        }
        let store = if self.plan.keep_store {
            self.node1.lock().unwrap().store.clone()
        } else {
            Arc::new(MemStore::new())
        };
        let (log_store, sm) = Adaptor::new(store.clone());
        let raft = Raft::new(1, self.config.clone(), Silent, log_store, sm).await.unwrap();
        let mut n = self.node1.lock().unwrap();
        n.raft = Some(raft);
        n.store = store;
        n.accepted = 0;
        let done = self.restarts_done.fetch_add(1, Ordering::SeqCst) + 1;
        drop(n);
        self.note(format!(
            "-- node 1 restarted ({} storage), restart {done}",
            if self.plan.keep_store { "same" } else { "empty" }
        ));
    }
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let what = format!(
            "AppendEntries prev={} entries={}",
            rpc.prev_log_id.map(|l| l.to_string()).unwrap_or("None".into()),
            rpc.entries.len()
        );
        let res = self.learner().append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e)));
        self.note(format!("{what} -> {}", match &res {
            Ok(v) => v.to_string(),
            Err(e) => e.to_string(),
        }));
        res
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        self.chunks_sent.fetch_add(1, Ordering::SeqCst);
        self.largest_chunk.fetch_max(rpc.data.len(), Ordering::SeqCst);
        let what = format!("InstallSnapshot offset={} len={} done={}", rpc.offset, rpc.data.len(), rpc.done);
        let (offset, done) = (rpc.offset, rpc.done);
        let res = self.learner().install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e)));
        self.note(format!("{what} -> {}", match &res {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        }));
        if res.is_ok() && !done {
            let restart = {
                let mut n = self.node1.lock().unwrap();
                if offset == 0 {
                    n.accepted = 0;
                }
                n.accepted += 1;
                let i = self.restarts_done.load(Ordering::SeqCst);
                self.plan.restart_after.get(i) == Some(&n.accepted)
            };
            if restart {
                self.restart_learner().await;
            }
        }
        res
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Link {
    type Network = Link;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> Link {
        self.clone()
    }
}

pub fn request(plan: &Plan, serial: u64) -> ClientRequest {
    let client = format!("client-{}", serial % 7);
    let fill: String = std::iter::repeat((b'a' + (serial % 26) as u8) as char).take(plan.status_len).collect();
    ClientRequest { client, serial, status: format!("{serial}-{fill}") }
}

/// Two nodes after leader 0 has snapshotted and purged its log and added learner 1, which it
/// can only bring up to date with that snapshot.
pub struct Cluster {
    pub plan: Plan,
    pub leader: Raft<TypeConfig>,
    pub leader_store: Arc<MemStore>,
    pub link: Link,
    /// The last entry the leader's snapshot covers.
    pub snapshot_last: LogId<MemNodeId>,
}

pub async fn start(plan: Plan, trace: Option<Arc<dyn Fn(String) + Send + Sync>>) -> Cluster {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 1100,
        install_snapshot_timeout: 500,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        snapshot_max_chunk_size: plan.chunk,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());

    let learner_store = Arc::new(MemStore::new());
    let (log_store, sm) = Adaptor::new(learner_store.clone());
    let learner = Raft::new(1, config.clone(), Silent, log_store, sm).await.unwrap();
    let link = Link {
        config: config.clone(),
        plan: plan.clone(),
        node1: Arc::new(Mutex::new(Node1 { raft: Some(learner), store: learner_store, accepted: 0 })),
        restarts_done: Arc::default(),
        chunks_sent: Arc::default(),
        largest_chunk: Arc::default(),
        trace,
    };

    let leader_store = Arc::new(MemStore::new());
    let (log_store, sm) = Adaptor::new(leader_store.clone());
    let leader = Raft::new(0, config, link.clone(), log_store, sm).await.unwrap();
    leader.initialize(BTreeSet::from([0u64])).await.unwrap();
    leader
        .wait(Some(Duration::from_secs(5)))
        .state(ServerState::Leader, "node 0 leads")
        .await
        .unwrap();
    let mut snapshot_last = None;
    for serial in 1..=plan.writes {
        snapshot_last = Some(leader.client_write(request(&plan, serial)).await.unwrap().log_id);
    }
    let snapshot_last = snapshot_last.expect("at least one write");
    leader
        .wait(Some(Duration::from_secs(5)))
        .applied_index(Some(snapshot_last.index), "writes applied")
        .await
        .unwrap();

    // The leader compacts everything it has, then the learner joins.
    leader.trigger().snapshot().await.unwrap();
    leader.wait(Some(Duration::from_secs(5))).snapshot(snapshot_last, "leader snapshot built").await.unwrap();
    leader.trigger().purge_log(snapshot_last.index).await.unwrap();
    leader.wait(Some(Duration::from_secs(5))).purged(Some(snapshot_last), "leader log purged").await.unwrap();
    leader.add_learner(1, (), false).await.unwrap();
    Cluster { plan, leader, leader_store, link, snapshot_last }
}

/// Waits up to `secs` (tokio time) for the current learner to have applied `index`.
pub async fn learner_reaches(link: &Link, index: u64, secs: u64) -> bool {
    for _ in 0..(secs * 20) {
        let m = link.learner().metrics().borrow().clone();
        if m.last_applied.map(|l| l.index) >= Some(index) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn statuses(sm: &openraft_memstore::MemStoreStateMachine) -> HashMap<String, String> {
    sm.client_status.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_restarted_during_snapshot_transfer_catches_up() {
    let plan = plan(seed());
    let c = start(plan.clone(), None).await;
    let target = c.leader.metrics().borrow().last_log_index.expect("leader has a log");

    let caught_up = learner_reaches(&c.link, target, 8).await;
    let m = c.link.learner().metrics().borrow().clone();
    assert!(
        caught_up,
        "learner 1 never caught up after restarting during the snapshot transfer ({plan:?}): \
         leader last log index {target}, learner last_applied {:?}, snapshot {:?}, {} restarts, \
         {} InstallSnapshot requests sent",
        m.last_applied,
        m.snapshot,
        c.link.restarts_done(),
        c.link.chunks_sent.load(Ordering::SeqCst)
    );
    let largest = c.link.largest_chunk.load(Ordering::SeqCst) as u64;
    assert!(largest <= plan.chunk, "a snapshot chunk of {largest} bytes exceeds snapshot_max_chunk_size {}", plan.chunk);
    assert_eq!(
        c.link.restarts_done(),
        plan.restart_after.len(),
        "the learner was restarted fewer times than the scenario plans ({plan:?})"
    );
    assert_eq!(m.snapshot, Some(c.snapshot_last), "learner 1 holds a different snapshot than the leader built");


    let leader_sm = c.leader_store.get_state_machine().await;
    let learner_sm = c.link.learner_store().get_state_machine().await;
    assert_eq!(statuses(&learner_sm), statuses(&leader_sm), "learner 1's state differs from the leader's");

    // A quiet while: the learner has the snapshot, nothing more should be streamed.
    let sent = c.link.chunks_sent.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = c.link.chunks_sent.load(Ordering::SeqCst);
    assert_eq!(after, sent, "the leader kept streaming snapshot chunks to a learner that has the snapshot");

    // Later writes reach the learner as entries.
    let w = c.leader.client_write(request(&plan, plan.writes + 1)).await.unwrap();
    assert!(learner_reaches(&c.link, w.log_id.index, 3).await, "a later write never reached learner 1");
    assert_eq!(c.link.chunks_sent.load(Ordering::SeqCst), after, "a later write was sent as another snapshot");
    let leader_sm = c.leader_store.get_state_machine().await;
    let learner_sm = c.link.learner_store().get_state_machine().await;
    assert_eq!(statuses(&learner_sm), statuses(&leader_sm), "learner 1's state differs from the leader's after a later write");

    c.leader.shutdown().await.unwrap();
    c.link.learner().shutdown().await.unwrap();
}
