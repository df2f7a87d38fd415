//! Hidden oracle: a learner whose RPCs never answer must not stall the leader when the leader
//! rebuilds its replication streams (here: because another learner is added).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
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

/// Node 1 accepts connections but never answers; every other node is unreachable.
struct Peer(MemNodeId);

impl Peer {
    async fn hang_or_fail<T, E>(&self) -> Result<T, RPCError<MemNodeId, (), E>>
    where E: std::error::Error {
        if self.0 == 1 {
            std::future::pending::<()>().await;
        }
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        self.hang_or_fail().await
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        self.hang_or_fail().await
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        self.hang_or_fail().await
    }
}

struct Net;
impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Peer;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Peer {
        Peer(target)
    }
}

fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_learner_does_not_stall_membership_changes() {
    // Every replication RPC may take up to `heartbeat_interval` (4 s) before it times out.
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 4_000,
        election_timeout_min: 8_000,
        election_timeout_max: 9_000,
        enable_heartbeat: false,
        enable_tick: false,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let raft = Raft::new(0, config, Net, log_store, sm).await.unwrap();
    raft.initialize(BTreeSet::from([0u64])).await.unwrap();
    raft.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "node 0 leads").await.unwrap();
    raft.client_write(request(1)).await.unwrap();

    // Learner 1 hangs on everything it is sent.
    raft.add_learner(1, (), false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let limit = Duration::from_secs(1);
    let started = Instant::now();
    let added = tokio::time::timeout(Duration::from_secs(10), raft.add_learner(2, (), false)).await;
    let took = started.elapsed();
    added.expect("add_learner(2) never returned").unwrap();
    assert!(took < limit, "adding learner 2 took {took:?} while learner 1 is hung");

    let started = Instant::now();
    let written = tokio::time::timeout(Duration::from_secs(10), raft.client_write(request(2))).await;
    let took = started.elapsed();
    written.expect("write never returned").unwrap();
    assert!(took < limit, "a write took {took:?} while learner 1 is hung");

    let started = Instant::now();
    let members = tokio::time::timeout(
        Duration::from_secs(10),
        raft.change_membership(BTreeSet::from([0u64]), false),
    )
    .await;
    let took = started.elapsed();
    members.expect("change_membership never returned").unwrap();
    assert!(took < limit, "a membership change took {took:?} while learner 1 is hung");
    assert_eq!(raft.metrics().borrow().state, ServerState::Leader);
}
