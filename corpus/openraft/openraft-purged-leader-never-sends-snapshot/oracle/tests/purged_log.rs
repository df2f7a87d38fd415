//! Hidden oracle: a learner that was unreachable while the leader snapshotted and purged its whole
//! log must be brought up to date through the snapshot once it is reachable again, with no new
//! writes needed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft, ServerState};
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
struct Link {
    up: Arc<AtomicBool>,
    learner: Arc<Mutex<Option<Raft<TypeConfig>>>>,
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
        match self.learner() {
            Some(r) => r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Down))),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        match self.learner() {
            Some(r) => r.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e))),
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

fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_behind_fully_purged_log_gets_snapshot() {
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
    let link = Link { up: Arc::new(AtomicBool::new(false)), learner: Arc::new(Mutex::new(None)) };

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

    // The learner comes back; no new writes follow.
    link.up.store(true, Ordering::SeqCst);
    let got = wait(&learner, 3).snapshot(last, "learner installs the leader's snapshot").await;
    if let Err(e) = got {
        let m = learner.metrics().borrow().clone();
        panic!(
            "learner was never sent the snapshot (last_applied {:?}, snapshot {:?}): {e}",
            m.last_applied, m.snapshot
        );
    }
    wait(&learner, 3).applied_index(Some(last.index), "learner applied the snapshot").await.unwrap();

    leader.shutdown().await.unwrap();
    learner.shutdown().await.unwrap();
}
