//! Produces the timing trace of the context bundle (run against the buggy version).

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
            println!("{:>6} ms  network: RPC to node 1 sent, it will never be answered", ms());
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


static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
fn ms() -> u128 {
    START.get_or_init(Instant::now).elapsed().as_millis()
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    let t = Instant::now();
    println!("{:>6} ms  {what}: called", ms());
    let r = f.await;
    println!("{:>6} ms  {what}: returned after {} ms", ms(), t.elapsed().as_millis());
    r
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let config = Config {
        cluster_name: "trace".to_string(),
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
    ms();
    raft.initialize(BTreeSet::from([0u64])).await.unwrap();
    raft.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "leader").await.unwrap();
    timed("client_write #1", raft.client_write(request(1))).await.unwrap();
    timed("add_learner(1)", raft.add_learner(1, (), false)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = raft.clone();
    let probe = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        timed("ensure_linearizable() from another task", r.ensure_linearizable()).await.ok();
    });
    timed("add_learner(2)", raft.add_learner(2, (), false)).await.unwrap();
    probe.await.unwrap();
    timed("client_write #2", raft.client_write(request(2))).await.unwrap();
    timed("change_membership({0}, retain=false)", raft.change_membership(BTreeSet::from([0u64]), false)).await.unwrap();
    let m = raft.metrics().borrow().clone();
    println!("{:>6} ms  leader: state={:?} last_log_index={:?} last_applied={}", ms(), m.state, m.last_log_index, m.last_applied.unwrap());
    std::process::exit(0);
}
