//! Hidden oracle: with `loosen-follower-log-revert`, a follower or learner that comes back with
//! less log than the leader last saw (storage wiped, or restored from an older copy) is brought
//! back to the leader's log by the leader alone, while the cluster is idle, every time it happens
//! and whichever node it is; the leader's view of its progress ends at its real log, and it keeps
//! replicating later writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{Adaptor, RaftLogReader, RaftStorage};
use openraft::{Config, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

/// One reversion: `node` restarts with only its first `keep` log entries (0: wiped).
#[derive(Clone, Debug)]
pub struct Revert {
    pub node: MemNodeId,
    pub keep: u64,
}

/// The scenario's shape, drawn from a seed.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Client writes before the first reversion.
    pub writes: u64,
    /// The reversions, one after the other, each once the previous one was repaired.
    pub reverts: Vec<Revert>,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn plan(seed: u64) -> Plan {
    let mut s = seed.wrapping_mul(0x1000_0001).wrapping_add(11);
    let writes = 4 + splitmix(&mut s) % 12;
    // Entries 0..=5 are membership and blank entries; the writes follow.
    let last = 5 + writes;
    let first: MemNodeId = 1 + splitmix(&mut s) % 2;
    let other = 3 - first;
    let mut keep = || if splitmix(&mut s) % 3 == 0 { 0 } else { 1 + splitmix(&mut s) % (last - 1) };
    let reverts = vec![
        Revert { node: first, keep: keep() },
        Revert { node: other, keep: keep() },
        Revert { node: first, keep: keep() },
    ];
    Plan { writes, reverts }
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

fn down<E: std::error::Error>() -> RPCError<MemNodeId, (), E> {
    RPCError::Unreachable(Unreachable::new(&Down))
}

/// Followers never need to reach anyone in this scenario.
#[derive(Clone)]
struct Silent;

impl RaftNetwork<TypeConfig> for Silent {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(down())
    }
    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        Err(down())
    }
    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(down())
    }
}

impl RaftNetworkFactory<TypeConfig> for Silent {
    type Network = Silent;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> Silent {
        Silent
    }
}

/// The running followers, by id, with their stores.
type Peers = Arc<Mutex<BTreeMap<MemNodeId, (Raft<TypeConfig>, Arc<MemStore>)>>>;

/// The leader's network: it reaches nodes 1 and 2 in memory.
#[derive(Clone)]
pub struct Link {
    peers: Peers,
    target: MemNodeId,
    /// Sees a one-line description of every RPC and its outcome.
    pub trace: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl Link {
    fn peer(&self) -> Raft<TypeConfig> {
        self.peers.lock().unwrap()[&self.target].0.clone()
    }
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let what = format!(
            "-> node {}: AppendEntries prev={} entries={}",
            self.target,
            rpc.prev_log_id.map(|l| l.to_string()).unwrap_or("None".into()),
            rpc.entries.len()
        );
        let target = self.target;
        let res = self.peer().append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)));
        if let Some(t) = &self.trace {
            t(format!("{what}: {}", match &res {
                Ok(v) => v.to_string(),
                Err(e) => e.to_string(),
            }));
        }
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
        let target = self.target;
        self.peer().install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(down())
    }
}

impl RaftNetworkFactory<TypeConfig> for Link {
    type Network = Link;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Link {
        Link { target, ..self.clone() }
    }
}

pub fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: format!("client-{}", serial % 3), serial, status: format!("status-{serial}") }
}

/// Leader 0, voter 1 and learner 2, all caught up.
pub struct Cluster {
    pub leader: Raft<TypeConfig>,
    pub leader_store: Arc<MemStore>,
    pub peers: Peers,
    config: Arc<Config>,
}

pub fn config() -> Arc<Config> {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 1500,
        election_timeout_max: 1600,
        ..Default::default()
    };
    Arc::new(config.validate().unwrap())
}

impl Cluster {
    pub async fn start(writes: u64, trace: Option<Arc<dyn Fn(String) + Send + Sync>>) -> Cluster {
        let config = config();
        let peers: Peers = Arc::default();
        for id in [1, 2] {
            let store = Arc::new(MemStore::new());
            let (log_store, sm) = Adaptor::new(store.clone());
            let raft = Raft::new(id, config.clone(), Silent, log_store, sm).await.unwrap();
            peers.lock().unwrap().insert(id, (raft, store));
        }
        let leader_store = Arc::new(MemStore::new());
        let (log_store, sm) = Adaptor::new(leader_store.clone());
        let link = Link { peers: peers.clone(), target: 0, trace };
        let leader = Raft::new(0, config.clone(), link, log_store, sm).await.unwrap();
        leader.initialize(BTreeSet::from([0u64])).await.unwrap();
        leader.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "node 0 leads").await.unwrap();
        leader.add_learner(1, (), true).await.unwrap();
        leader.add_learner(2, (), true).await.unwrap();
        leader.change_membership(BTreeSet::from([0u64, 1]), false).await.unwrap();
        for serial in 1..=writes {
            leader.client_write(request(serial)).await.unwrap();
        }
        let c = Cluster { leader, leader_store, peers, config };
        let last = c.leader_last();
        for id in [1, 2] {
            assert!(c.reaches(id, last, 5).await, "node {id} did not catch up during setup");
        }
        c
    }

    pub fn node(&self, id: MemNodeId) -> (Raft<TypeConfig>, Arc<MemStore>) {
        self.peers.lock().unwrap()[&id].clone()
    }

    pub fn leader_last(&self) -> u64 {
        self.leader.metrics().borrow().last_log_index.expect("leader has a log")
    }

    /// Restarts `node` with only its first `keep` log entries (an empty store when 0).
    pub async fn revert(&self, r: &Revert) {
        let (old, old_store) = self.node(r.node);
        old.shutdown().await.unwrap();
        let mut store = Arc::new(MemStore::new());
        if r.keep > 0 {
            let mut reader = old_store.clone();
            let entries = reader.try_get_log_entries(0..r.keep).await.unwrap();
            RaftStorage::append_to_log(&mut store, entries).await.unwrap();
        }
        let (log_store, sm) = Adaptor::new(store.clone());
        let raft = Raft::new(r.node, self.config.clone(), Silent, log_store, sm).await.unwrap();
        self.peers.lock().unwrap().insert(r.node, (raft, store));
    }

    /// Waits up to `secs` for node `id` to hold and apply the leader's log up to `index`.
    pub async fn reaches(&self, id: MemNodeId, index: u64, secs: u64) -> bool {
        for _ in 0..(secs * 20) {
            let m = self.node(id).0.metrics().borrow().clone();
            if m.last_log_index >= Some(index) && m.last_applied.map(|l| l.index) >= Some(index) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// What the leader's metrics say node `id` matched.
    pub fn leader_sees(&self, id: MemNodeId) -> Option<u64> {
        let m = self.leader.metrics().borrow().clone();
        m.replication.as_ref().and_then(|r| r.get(&id).cloned()).flatten().map(|l| l.index)
    }

    pub async fn statuses(store: &Arc<MemStore>) -> HashMap<String, String> {
        store.get_state_machine().await.client_status
    }

    pub async fn shutdown(&self) {
        self.leader.shutdown().await.unwrap();
        for id in [1, 2] {
            self.node(id).0.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverted_follower_is_repaired_while_idle() {
    let plan = plan(seed());
    let c = Cluster::start(plan.writes, None).await;
    let last = c.leader_last();

    for (i, r) in plan.reverts.iter().enumerate() {
        c.revert(r).await;
        // No writes: the leader only sends heartbeats unless it notices the lost log.
        let repaired = c.reaches(r.node, last, 4).await;
        let m = c.node(r.node).0.metrics().borrow().clone();
        assert!(
            repaired,
            "reversion {} of {plan:?}: node {} came back with {} entries and was never repaired while \
             the cluster was idle: its last_log_index is {:?}, the leader's is {last}, and the leader \
             says node {} matched up to {:?}",
            i + 1,
            r.node,
            r.keep,
            m.last_log_index,
            r.node,
            c.leader_sees(r.node)
        );
        assert_eq!(c.leader_sees(r.node), Some(last), "the leader's progress for node {} is not its real log", r.node);
        assert_eq!(
            Cluster::statuses(&c.node(r.node).1).await,
            Cluster::statuses(&c.leader_store).await,
            "node {}'s state differs from the leader's after repair",
            r.node
        );
    }

    // Later writes still reach everybody.
    let w = c.leader.client_write(request(plan.writes + 1)).await.unwrap();
    for id in [1, 2] {
        assert!(c.reaches(id, w.log_id.index, 3).await, "a later write never reached node {id}");
        assert_eq!(Cluster::statuses(&c.node(id).1).await, Cluster::statuses(&c.leader_store).await);
    }
    c.shutdown().await;
}
