//! Produces the RPC trace of the context bundle (run against the buggy version).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
        let what = format!("AppendEntries prev={} entries={}", rpc.prev_log_id.map(|l| l.to_string()).unwrap_or("None".into()), rpc.entries.len());
        let r = match self.learner() {
            Some(r) => r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(1, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Down))),
        };
        log(format!("{what} -> {}", match &r { Ok(v) => format!("{v}"), Err(e) => format!("{e}") }));
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        log(format!("InstallSnapshot offset={} done={}", rpc.offset, rpc.done));
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


static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
static LAST: Mutex<Option<String>> = Mutex::new(None);
static REPEAT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
fn log(line: String) {
    let t = START.get_or_init(Instant::now).elapsed().as_millis();
    let mut last = LAST.lock().unwrap();
    if last.as_deref() == Some(line.as_str()) {
        REPEAT.fetch_add(1, Ordering::SeqCst);
        return;
    }
    let n = REPEAT.swap(0, Ordering::SeqCst);
    if n > 0 {
        println!("          (same line {n} more times)");
    }
    println!("{t:>6} ms  {line}");
    *last = Some(line);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let config = Config {
        cluster_name: "trace".to_string(),
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
    log("leader 0 created; node 1 unreachable".into());
    leader.initialize(BTreeSet::from([0u64])).await.unwrap();
    wait(&leader, 5).state(ServerState::Leader, "leader").await.unwrap();
    for serial in 1..=3 {
        leader.client_write(request(serial)).await.unwrap();
    }
    log("3 client writes done; add_learner(1)".into());
    leader.add_learner(1, (), false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = leader.metrics().borrow().last_applied.unwrap();
    leader.trigger().snapshot().await.unwrap();
    wait(&leader, 5).snapshot(last, "snapshot").await.unwrap();
    leader.trigger().purge_log(last.index).await.unwrap();
    wait(&leader, 5).purged(Some(last), "purged").await.unwrap();
    let m = leader.metrics().borrow().clone();
    log(format!("leader: last_log_index={:?} snapshot={} purged={}", m.last_log_index, m.snapshot.unwrap(), m.purged.unwrap()));
    link.up.store(true, Ordering::SeqCst);
    log("node 1 reachable again (no more client writes)".into());
    tokio::time::sleep(Duration::from_secs(3)).await;
    log("3 s later".into());
    let m = learner.metrics().borrow().clone();
    log(format!("learner 1: last_log={:?} last_applied={:?} snapshot={:?}", m.last_log_index, m.last_applied, m.snapshot));
    let m = leader.metrics().borrow().clone();
    log(format!("leader 0: replication={:?}", m.replication));
    log("one more client write".into());
    leader.client_write(request(4)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m = learner.metrics().borrow().clone();
    log(format!("1 s later, learner 1: last_log={:?} last_applied={:?} snapshot={:?}", m.last_log_index, m.last_applied.map(|l| l.to_string()), m.snapshot.map(|l| l.to_string())));
    std::process::exit(0);
}
