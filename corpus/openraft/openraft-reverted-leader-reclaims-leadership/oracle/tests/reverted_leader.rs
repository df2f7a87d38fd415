//! A node restarted on an older copy of its storage (its vote and the tail of its log gone) must
//! not lead again on the strength of a vote it no longer holds: whether it campaigns at once or
//! when its own timer fires, the group must end with every node holding the same state, every
//! write acknowledged before or after the restart applied everywhere.
//!
//! The seed picks how many writes precede the restart, how much of its log the restarted node
//! keeps, and whether it campaigns through `trigger().elect()` or a shorter election timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::storage::{Adaptor, RaftLogReader, RaftStorage};
use openraft::{Config, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

pub type Node = Raft<TypeConfig>;

/// One run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Client writes while node 0 leads, before its restart.
    pub writes: u64,
    /// Log entries (from index 0) the restarted node keeps; always fewer than it had.
    pub keep: u64,
    /// The restarted node campaigns through `trigger().elect()` (else: its election timer is
    /// shorter than the others').
    pub trigger: bool,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Plan {
    /// The reported run: three writes, node 0 comes back with only the membership entry (a copy
    /// taken right after the cluster was initialized) and is asked to campaign right away.
    pub fn reported() -> Plan {
        Plan { writes: 3, keep: 1, trigger: true }
    }

    /// Run `i` of a seed: run 0 campaigns through the trigger, run 1 through its own timer.
    pub fn seeded(seed: u64, i: u64) -> Plan {
        let mut s = seed.wrapping_mul(0x1000_0001).wrapping_add(17 + i);
        let writes = 1 + splitmix(&mut s) % 6;
        // Index 0 is the membership, 1 the leader's blank entry, then the writes.
        let last = 1 + writes;
        // Run 0 keeps more than the membership entry; run 1 anything short of the whole log.
        let keep = if i == 0 { 2 + splitmix(&mut s) % (last - 1) } else { 1 + splitmix(&mut s) % last };
        Plan { writes, keep, trigger: i == 0 }
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

struct Down;
impl std::fmt::Debug for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node is down")
    }
}
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node is down")
    }
}
impl std::error::Error for Down {}

fn down<E: std::error::Error>() -> RPCError<MemNodeId, (), E> {
    RPCError::Unreachable(Unreachable::new(&Down))
}

/// The running nodes, by id.
pub type Nodes = Arc<Mutex<BTreeMap<MemNodeId, Node>>>;

/// Every node reaches every running node in memory.
#[derive(Clone)]
pub struct Net {
    nodes: Nodes,
    from: MemNodeId,
    target: MemNodeId,
    /// Sees a one-line description of vote RPCs and their outcome.
    pub trace: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl Net {
    fn peer(&self) -> Option<Node> {
        self.nodes.lock().unwrap().get(&self.target).cloned()
    }
}

impl RaftNetwork<TypeConfig> for Net {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let Some(peer) = self.peer() else { return Err(down()) };
        let target = self.target;
        peer.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>>
    {
        let Some(peer) = self.peer() else { return Err(down()) };
        let target = self.target;
        peer.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let Some(peer) = self.peer() else { return Err(down()) };
        let what = format!("{} -> {}: vote request {} last_log_id={}", self.from, self.target, rpc.vote, opt(&rpc.last_log_id));
        let target = self.target;
        let res = peer.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)));
        if let Some(t) = &self.trace {
            t(match &res {
                Ok(r) => format!(
                    "{what}; answer: granted={} vote={} last_log_id={}",
                    r.vote_granted,
                    r.vote,
                    opt(&r.last_log_id)
                ),
                Err(e) => format!("{what}; error: {e}"),
            });
        }
        res
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_else(|| "None".into())
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Net;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Net {
        Net { target, ..self.clone() }
    }
}

pub fn request(serial: u64, status: &str) -> ClientRequest {
    ClientRequest { client: format!("client-{serial}"), serial, status: status.to_string() }
}

pub fn config(fast: bool) -> Arc<Config> {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: if fast { 300 } else { 1500 },
        election_timeout_max: if fast { 400 } else { 1600 },
        ..Default::default()
    };
    Arc::new(config.validate().unwrap())
}

pub struct Cluster {
    pub nodes: Nodes,
    pub stores: BTreeMap<MemNodeId, Arc<MemStore>>,
    pub trace: Option<Arc<dyn Fn(String) + Send + Sync>>,
}

impl Cluster {
    pub fn node(&self, id: MemNodeId) -> Node {
        self.nodes.lock().unwrap()[&id].clone()
    }

    async fn spawn(&mut self, id: MemNodeId, store: Arc<MemStore>, config: Arc<Config>) -> Node {
        let (log_store, sm) = Adaptor::new(store.clone());
        let net = Net { nodes: self.nodes.clone(), from: id, target: id, trace: self.trace.clone() };
        let raft = Raft::new(id, config, net, log_store, sm).await.unwrap();
        self.nodes.lock().unwrap().insert(id, raft.clone());
        self.stores.insert(id, store);
        raft
    }

    /// Nodes 0, 1 and 2; node 0 leads and commits `writes` client writes on all three.
    pub async fn start(writes: u64, trace: Option<Arc<dyn Fn(String) + Send + Sync>>) -> Cluster {
        let mut c = Cluster { nodes: Arc::default(), stores: BTreeMap::new(), trace };
        for id in [0, 1, 2] {
            c.spawn(id, Arc::new(MemStore::new()), config(false)).await;
        }
        let n0 = c.node(0);
        n0.initialize(BTreeSet::from([0u64, 1, 2])).await.unwrap();
        n0.wait(Some(Duration::from_secs(10))).state(ServerState::Leader, "node 0 leads").await.unwrap();
        for serial in 1..=writes {
            n0.client_write(request(serial, "before")).await.unwrap();
        }
        let last = n0.metrics().borrow().last_log_index.unwrap();
        for id in [0, 1, 2] {
            c.node(id).wait(Some(Duration::from_secs(10))).applied_index(Some(last), "caught up").await.unwrap();
        }
        c
    }

    /// Stops node 0 and starts it again on a copy of its storage that holds only its first
    /// `keep` log entries (no vote, an empty state machine).
    pub async fn restart_reverted(&mut self, keep: u64, fast: bool) -> Node {
        let old = self.node(0);
        old.shutdown().await.unwrap();
        self.nodes.lock().unwrap().remove(&0);
        let mut old_store = self.stores[&0].clone();
        let entries = old_store.try_get_log_entries(0..keep).await.unwrap();
        let mut store = Arc::new(MemStore::new());
        RaftStorage::append_to_log(&mut store, entries).await.unwrap();
        self.spawn(0, store, config(fast)).await
    }

    pub fn leaders(&self) -> Vec<MemNodeId> {
        let nodes = self.nodes.lock().unwrap();
        nodes.iter().filter(|(_, n)| n.metrics().borrow().state == ServerState::Leader).map(|(id, _)| *id).collect()
    }

    pub async fn statuses(&self, id: MemNodeId) -> BTreeMap<String, String> {
        self.stores[&id].get_state_machine().await.client_status.into_iter().collect()
    }

    pub async fn shutdown(&self) {
        let nodes: Vec<Node> = self.nodes.lock().unwrap().values().cloned().collect();
        for n in nodes {
            let _ = n.shutdown().await;
        }
    }
}

/// What one run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Who led, and at which vote, shortly after the restart.
    pub early_leader: Vec<(MemNodeId, String)>,
    /// The node the write after the restart went to, and whether it was acknowledged.
    pub write_to: Option<MemNodeId>,
    pub write_ok: bool,
    /// Each node's client statuses at the end.
    pub statuses: BTreeMap<MemNodeId, BTreeMap<String, String>>,
    /// Each node's last log index and applied index at the end.
    pub logs: BTreeMap<MemNodeId, (Option<u64>, Option<u64>)>,
}

pub async fn run(plan: &Plan, trace: Option<Arc<dyn Fn(String) + Send + Sync>>) -> Report {
    let mut c = Cluster::start(plan.writes, None).await;
    c.trace = trace.clone();
    let n0 = c.restart_reverted(plan.keep, !plan.trigger).await;
    if let Some(t) = &trace {
        t(format!("node 0 restarted with log entries 0..{} and no vote", plan.keep));
    }
    if plan.trigger {
        n0.trigger().elect().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut report = Report::default();
    for id in c.leaders() {
        let v = c.node(id).metrics().borrow().vote;
        report.early_leader.push((id, v.to_string()));
    }
    // A client writes once there is a leader.
    let mut leader = None;
    for _ in 0..200 {
        if let Some(&l) = c.leaders().first() {
            leader = Some(l);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(l) = leader {
        report.write_to = Some(l);
        let w = tokio::time::timeout(Duration::from_secs(5), c.node(l).client_write(request(100, "after"))).await;
        report.write_ok = matches!(w, Ok(Ok(_)));
    }
    // Let replication settle.
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut same = true;
        let first = c.statuses(0).await;
        for id in [1, 2] {
            same &= c.statuses(id).await == first;
        }
        if same && first.len() as u64 == plan.writes + 1 {
            break;
        }
    }
    for id in [0, 1, 2] {
        report.statuses.insert(id, c.statuses(id).await);
        let m = c.node(id).metrics().borrow().clone();
        report.logs.insert(id, (m.last_log_index, m.last_applied.map(|l| l.index)));
    }
    c.shutdown().await;
    report
}

pub fn judge(plan: &Plan, r: &Report) -> Result<(), String> {
    if r.write_to.is_none() || !r.write_ok {
        return Err(format!("no leader accepted a write within 10 s of node 0's restart: {:?}", r));
    }
    let mut expected: BTreeMap<String, String> = (1..=plan.writes).map(|s| (format!("client-{s}"), "before".to_string())).collect();
    expected.insert("client-100".into(), "after".into());
    for (id, st) in &r.statuses {
        if *st != expected {
            let missing: Vec<&String> = expected.keys().filter(|k| !st.contains_key(*k)).collect();
            return Err(format!(
                "node {} applied {:?} (missing {:?}); every acknowledged write should be applied on every node \
                 (write after the restart went to node {:?}; leaders shortly after the restart: {:?}; logs: {:?})",
                id, st, missing, r.write_to, r.early_leader, r.logs
            ));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_with_reverted_state_does_not_lead_on_its_old_vote() {
    let seed = seed();
    for i in 0..2 {
        let plan = Plan::seeded(seed, i);
        let report = run(&plan, None).await;
        if let Err(e) = judge(&plan, &report) {
            panic!("seed {seed} run {i} {plan:?}: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_run_keeps_every_write() {
    let plan = Plan::reported();
    let report = run(&plan, None).await;
    if let Err(e) = judge(&plan, &report) {
        panic!("{plan:?}: {e}");
    }
}
