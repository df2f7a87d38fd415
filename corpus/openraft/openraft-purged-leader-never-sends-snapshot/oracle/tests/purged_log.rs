//! Hidden oracle: a learner that was unreachable while the leader snapshotted and purged its whole
//! log must be brought up to date through the snapshot once it is reachable again, with no new
//! writes needed; the snapshot is sent once, not again and again to a learner that already has
//! it, the leader's log stays purged as far as it was asked to, and later writes reach the
//! learner as plain entries.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

/// The leader's view of the network: node 1 (the learner) can be cut off and reconnected.
#[derive(Clone)]
pub struct Link {
    up: Arc<AtomicBool>,
    learner: Arc<Mutex<Option<Raft<TypeConfig>>>>,
    /// InstallSnapshot requests delivered to the learner.
    pub snapshots: Arc<AtomicUsize>,
    /// Sees a one-line description of every RPC to the learner and its outcome.
    pub trace: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl Link {
    fn learner(&self) -> Option<Raft<TypeConfig>> {
        if self.up.load(Ordering::SeqCst) {
            self.learner.lock().unwrap().clone()
        } else {
            None
        }
    }
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let what = format!("AppendEntries prev={} entries={}", rpc.prev_log_id.map(|l| l.to_string()).unwrap_or("None".into()), rpc.entries.len());
        let res = match self.learner() {
            Some(r) => r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Down))),
        };
        if let Some(t) = &self.trace {
            t(format!("{what} -> {}", match &res { Ok(v) => v.to_string(), Err(e) => e.to_string() }));
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
        if let Some(t) = &self.trace {
            t(format!("InstallSnapshot offset={} done={}", rpc.offset, rpc.done));
        }
        match self.learner() {
            Some(r) => r.install_snapshot(rpc).await.inspect(|_| {
                self.snapshots.fetch_add(1, Ordering::SeqCst);
            }).map_err(|e| RPCError::RemoteError(RemoteError::new(1, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Down))),
        }
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

pub fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") }
}

/// The two nodes once the leader has snapshotted and purged its whole log behind the
/// unreachable learner's back.
pub struct Purged {
    pub leader: Raft<TypeConfig>,
    pub learner: Raft<TypeConfig>,
    pub link: Link,
    /// The leader's last applied entry, covered by its snapshot and purged.
    pub last: LogId<MemNodeId>,
}

impl Purged {
    /// The learner becomes reachable.
    pub fn reconnect(&self) {
        self.link.up.store(true, Ordering::SeqCst);
    }
}

/// Leader 0 takes three writes and adds learner 1 while it is unreachable, then snapshots and
/// purges everything it has.
pub async fn purge_behind_learner(trace: Option<Arc<dyn Fn(String) + Send + Sync>>) -> Purged {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 1100,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let link = Link { up: Arc::new(AtomicBool::new(false)), learner: Arc::new(Mutex::new(None)), snapshots: Arc::default(), trace };

    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let learner = Raft::new(1, config.clone(), link.clone(), log_store, sm).await.unwrap();
    *link.learner.lock().unwrap() = Some(learner.clone());

    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let leader = Raft::new(0, config, link.clone(), log_store, sm).await.unwrap();
    let wait = |r: &Raft<TypeConfig>, secs| r.wait(Some(Duration::from_secs(secs)));
    leader.initialize(BTreeSet::from([0u64])).await.unwrap();
    wait(&leader, 5).state(ServerState::Leader, "node 0 leads").await.unwrap();
    for serial in 1..=3 {
        leader.client_write(request(serial)).await.unwrap();
    }

    // The learner joins while it cannot be reached.
    leader.add_learner(1, (), false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The leader compacts everything it has.
    let last = leader.metrics().borrow().last_applied.expect("entries applied");
    leader.trigger().snapshot().await.unwrap();
    wait(&leader, 5).snapshot(last, "leader snapshot built").await.unwrap();
    leader.trigger().purge_log(last.index).await.unwrap();
    wait(&leader, 5).purged(Some(last), "leader log purged").await.unwrap();
    Purged { leader, learner, link, last }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_behind_fully_purged_log_gets_snapshot() {
    let nodes = purge_behind_learner(None).await;
    let (leader, learner, link, last) = (&nodes.leader, &nodes.learner, &nodes.link, nodes.last);
    let wait = |r: &Raft<TypeConfig>, secs| r.wait(Some(Duration::from_secs(secs)));

    // The learner comes back; no new writes follow.
    nodes.reconnect();
    let got = wait(learner, 3).snapshot(last, "learner installs the leader's snapshot").await;
    if let Err(e) = got {
        let m = learner.metrics().borrow().clone();
        panic!(
            "learner was never sent the snapshot (last_applied {:?}, snapshot {:?}): {e}",
            m.last_applied, m.snapshot
        );
    }
    wait(learner, 3).applied_index(Some(last.index), "learner applied the snapshot").await.unwrap();

    // A quiet second: the learner has the snapshot, so nothing more needs to be sent.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = link.snapshots.load(Ordering::SeqCst);
    assert!(sent <= 2, "the leader sent its snapshot {sent} times to a learner that already had it");
    assert_eq!(leader.metrics().borrow().purged, Some(last), "the leader's log is no longer purged up to its snapshot");

    // New writes reach the learner as entries.
    let written = leader.client_write(request(4)).await.unwrap();
    wait(learner, 3).applied_index(Some(written.log_id.index), "learner applies a later write").await.unwrap();
    assert!(link.snapshots.load(Ordering::SeqCst) <= 2, "a later write was sent as another snapshot");

    leader.shutdown().await.unwrap();
    learner.shutdown().await.unwrap();
}
