//! Hidden oracle: a learner that restarts in the middle of a chunked snapshot transfer still gets
//! the whole snapshot. After each restart the leader starts the transfer over from the first
//! byte, and completes it; a chunk lost to a transient network error is resent from where it
//! stopped, not from the start; no chunk is larger than the configured chunk size; and once the
//! learner has the snapshot, later writes reach it as plain entries.
//!
//! Runs on tokio's paused clock, so the schedule is a pure function of the seed. The seed picks
//! the number of writes (the snapshot's size), the chunk size, the number of learners, at which
//! chunks each learner restarts (once or twice), and which chunks are lost in transit.

use std::collections::{BTreeMap, BTreeSet};
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

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5ca1_ab1e_c4a7)
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

/// Receives one line per RPC to a learner, and per restart.
pub type Trace = Arc<dyn Fn(String) + Send + Sync>;

#[derive(Debug)]
struct Lost;
impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection reset")
    }
}
impl std::error::Error for Lost {}

/// What happens to one learner during the transfer.
#[derive(Debug, Clone)]
pub struct Fate {
    /// The learner restarts just before the chunk with this ordinal (1-based, counted from the
    /// start of the current pass) would be delivered; one entry per restart, in order.
    pub restart_before_chunk: Vec<u64>,
    /// InstallSnapshot requests (counted over the whole run, 1-based) lost in transit.
    pub lost_requests: BTreeSet<u64>,
}

/// Per-learner bookkeeping kept by the network.
#[derive(Default, Debug, Clone)]
pub struct Seen {
    pub requests: u64,
    pub bytes: u64,
    pub largest_chunk: usize,
    pub lost: u64,
    pub restarts: u64,
    pub full_passes_started: u64,
    /// Bytes that a correct sender has to send again: lost chunks, and the part of a transfer
    /// that a restart cut off (up to and including the chunk the restarted node refused).
    pub wasted: u64,
    pending_restarts: Vec<u64>,
}

struct Node {
    raft: Raft<TypeConfig>,
    store: Arc<MemStore>,
}

#[derive(Clone)]
pub struct Net {
    nodes: Arc<Mutex<BTreeMap<MemNodeId, Node>>>,
    seen: Arc<Mutex<BTreeMap<MemNodeId, (Seen, BTreeSet<u64>)>>>,
    config: Arc<Config>,
    chunk: u64,
    trace: Option<Trace>,
}

impl Net {
    fn log(&self, line: String) {
        if let Some(t) = &self.trace {
            t(line);
        }
    }

    fn raft(&self, id: MemNodeId) -> Option<Raft<TypeConfig>> {
        self.nodes.lock().unwrap().get(&id).map(|n| n.raft.clone())
    }

    /// Stops the learner's Raft and starts a new one on the same store, as a process restart
    /// with persistent storage does: whatever was held only in memory is gone.
    async fn restart(&self, id: MemNodeId) {
        let (old, store) = {
            let g = self.nodes.lock().unwrap();
            let n = &g[&id];
            (n.raft.clone(), n.store.clone())
        };
        let _ = old.shutdown().await;
        let (log_store, sm) = Adaptor::new(store.clone());
        let raft = Raft::new(id, self.config.clone(), self.clone(), log_store, sm).await.unwrap();
        self.nodes.lock().unwrap().insert(id, Node { raft, store });
        self.log(format!("node {id} restarted (storage kept)"));
    }
}

pub struct Conn {
    to: MemNodeId,
    net: Net,
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let what = format!(
            "0 -> {} AppendEntries prev={} entries={}",
            self.to,
            rpc.prev_log_id.map(|l| l.to_string()).unwrap_or("None".into()),
            rpc.entries.len()
        );
        let res = match self.net.raft(self.to) {
            Some(r) => r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Lost))),
        };
        self.net.log(format!("{what}: {}", match &res { Ok(v) => v.to_string(), Err(e) => e.to_string() }));
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
        let to = self.to;
        let chunk = self.net.chunk;
        let (n, lose, restart) = {
            let mut g = self.net.seen.lock().unwrap();
            let (seen, lost) = g.get_mut(&to).expect("a learner");
            seen.requests += 1;
            seen.bytes += rpc.data.len() as u64;
            seen.largest_chunk = seen.largest_chunk.max(rpc.data.len());
            if rpc.offset == 0 {
                seen.full_passes_started += 1;
            }
            let n = seen.requests;
            let lose = lost.contains(&n);
            let ordinal = rpc.offset / chunk.max(1) + 1;
            let restart = !lose && seen.pending_restarts.first() == Some(&ordinal) && rpc.offset > 0;
            if restart {
                seen.pending_restarts.remove(0);
                seen.restarts += 1;
                seen.wasted += rpc.offset + rpc.data.len() as u64;
            }
            if lose {
                seen.lost += 1;
                seen.wasted += rpc.data.len() as u64;
            }
            (n, lose, restart)
        };
        let what = format!("0 -> {to} InstallSnapshot #{n} offset={} len={} done={}", rpc.offset, rpc.data.len(), rpc.done);
        if lose {
            self.net.log(format!("{what}: lost in transit"));
            return Err(RPCError::Unreachable(Unreachable::new(&Lost)));
        }
        if restart {
            self.net.restart(to).await;
        }
        let res = match self.net.raft(to) {
            Some(r) => r.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(to, e))),
            None => Err(RPCError::Unreachable(Unreachable::new(&Lost))),
        };
        self.net.log(format!("{what}: {}", match &res { Ok(_) => "ok".to_string(), Err(e) => e.to_string() }));
        res
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Lost)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Conn;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Conn {
        Conn { to: target, net: self.clone() }
    }
}

/// One seeded schedule.
#[derive(Debug, Clone)]
pub struct Plan {
    pub writes: u64,
    pub chunk: u64,
    /// One fate per learner; learners are nodes 1, 2, ...
    pub fates: Vec<Fate>,
}

impl Plan {
    pub fn from_seed(seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let writes = 8 + rng.below(13);
        let chunk = 16 + rng.below(33);
        let learners = 1 + rng.below(2) as usize;
        let mut fates = Vec::new();
        for l in 0..learners {
            // The first learner always restarts twice; the others once or twice.
            let restarts = if l == 0 { 2 } else { 1 + rng.below(2) };
            let restart_before_chunk = (0..restarts).map(|_| 2 + rng.below(5)).collect();
            // One lost request past the first chunk, sometimes two.
            let mut lost_requests = BTreeSet::new();
            lost_requests.insert(2 + rng.below(3));
            if rng.below(2) == 0 {
                lost_requests.insert(6 + rng.below(10));
            }
            fates.push(Fate { restart_before_chunk, lost_requests });
        }
        Plan { writes, chunk, fates }
    }
}

pub fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: format!("c{serial}"), serial, status: format!("s{serial}") }
}

pub struct Outcome {
    pub seen: BTreeMap<MemNodeId, Seen>,
    pub snapshot_len: u64,
}

/// Runs the seeded schedule; returns the first violation of the property, and what the network
/// saw either way.
pub async fn run(plan: &Plan, trace: Option<Trace>) -> (Result<(), String>, Outcome) {
    let config = Config {
        cluster_name: "chunked-restart".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 1400,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        snapshot_max_chunk_size: plan.chunk,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let net = Net {
        nodes: Arc::new(Mutex::new(BTreeMap::new())),
        seen: Arc::new(Mutex::new(BTreeMap::new())),
        config: config.clone(),
        chunk: plan.chunk,
        trace,
    };
    for id in 0..=plan.fates.len() as u64 {
        let store = Arc::new(MemStore::new());
        let (log_store, sm) = Adaptor::new(store.clone());
        let raft = Raft::new(id, config.clone(), net.clone(), log_store, sm).await.unwrap();
        net.nodes.lock().unwrap().insert(id, Node { raft, store });
        if id > 0 {
            let fate = &plan.fates[id as usize - 1];
            let seen = Seen { pending_restarts: fate.restart_before_chunk.clone(), ..Default::default() };
            net.seen.lock().unwrap().insert(id, (seen, fate.lost_requests.clone()));
        }
    }
    let mut snapshot_len = 0;
    let res = drive(&net, plan, &mut snapshot_len).await;
    let ids: Vec<_> = net.nodes.lock().unwrap().keys().cloned().collect();
    for id in ids {
        if let Some(r) = net.raft(id) {
            let _ = r.shutdown().await;
        }
    }
    let seen = net.seen.lock().unwrap().iter().map(|(k, (s, _))| (*k, s.clone())).collect();
    (res, Outcome { seen, snapshot_len })
}

async fn drive(net: &Net, plan: &Plan, snapshot_len: &mut u64) -> Result<(), String> {
    let leader = net.raft(0).unwrap();
    let wait = |r: &Raft<TypeConfig>, ms: u64| r.wait(Some(Duration::from_millis(ms)));
    leader.initialize(BTreeSet::from([0u64])).await.map_err(|e| format!("initialize: {e}"))?;
    wait(&leader, 5000).state(ServerState::Leader, "node 0 leads").await.map_err(|e| format!("no leader: {e}"))?;
    for serial in 1..=plan.writes {
        leader.client_write(request(serial)).await.map_err(|e| format!("write {serial}: {e}"))?;
    }

    // The leader compacts everything before any learner joins, so learners need the snapshot.
    let last: LogId<MemNodeId> = leader.metrics().borrow().last_applied.expect("applied");
    leader.trigger().snapshot().await.map_err(|e| e.to_string())?;
    wait(&leader, 5000).snapshot(last, "snapshot built").await.map_err(|e| format!("snapshot not built: {e}"))?;
    leader.trigger().purge_log(last.index).await.map_err(|e| e.to_string())?;
    wait(&leader, 5000).purged(Some(last), "log purged").await.map_err(|e| format!("log not purged: {e}"))?;
    *snapshot_len = {
        use openraft::RaftStorage;
        let mut store = net.nodes.lock().unwrap()[&0].store.clone();
        store.get_current_snapshot().await.unwrap().map(|s| s.snapshot.get_ref().len() as u64).unwrap_or(0)
    };

    let learners: Vec<MemNodeId> = (1..=plan.fates.len() as u64).collect();
    for &l in &learners {
        leader.add_learner(l, (), false).await.map_err(|e| format!("add_learner({l}): {e}"))?;
    }

    // Every learner gets the whole snapshot, however often it restarted during the transfer.
    for &l in &learners {
        // A restart replaces the handle; poll whichever instance is current.
        let mut got = Err(String::new());
        for _ in 0..100 {
            let r2 = net.raft(l).unwrap();
            if r2.metrics().borrow().snapshot == Some(last) {
                got = Ok(());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if got.is_err() {
            let s = net.seen.lock().unwrap()[&l].0.clone();
            let m = net.raft(l).unwrap().metrics().borrow().clone();
            return Err(format!(
                "learner {l} has no snapshot 10 s after joining (its snapshot {:?}, applied {:?}); the leader sent it {} InstallSnapshot requests, {} bytes, {} restarts so far, {} transfers started from offset 0",
                m.snapshot, m.last_applied, s.requests, s.bytes, s.restarts, s.full_passes_started
            ));
        }
        let r = net.raft(l).unwrap();
        wait(&r, 3000)
            .applied_index(Some(last.index), "snapshot applied")
            .await
            .map_err(|e| format!("learner {l} never applied the snapshot: {e}"))?;
    }

    // What each learner's state machine holds equals the leader's.
    let leader_store = net.nodes.lock().unwrap()[&0].store.clone();
    let expect = leader_store.get_state_machine().await.client_status;
    for &l in &learners {
        let store = net.nodes.lock().unwrap()[&l].store.clone();
        let got = store.get_state_machine().await.client_status;
        if got != expect {
            return Err(format!("learner {l} holds {} of the {} written keys", got.len(), expect.len()));
        }
    }

    // Chunks respect the configured size; a lost chunk is resent from where it stopped, and a
    // restart costs at most one more full transfer.
    for &l in &learners {
        let s = net.seen.lock().unwrap()[&l].0.clone();
        if s.largest_chunk as u64 > plan.chunk {
            return Err(format!(
                "learner {l} was sent a {}-byte chunk; snapshot_max_chunk_size is {}",
                s.largest_chunk, plan.chunk
            ));
        }
        let budget = *snapshot_len + s.wasted;
        if s.bytes > budget {
            return Err(format!(
                "learner {l} was sent {} snapshot bytes for a {}-byte snapshot with {} restarts and {} lost chunks (a sender that resumes after a lost chunk and starts over only after a restart sends {budget})",
                s.bytes, snapshot_len, s.restarts, s.lost
            ));
        }
        if !s.pending_restarts.is_empty() {
            return Err(format!("learner {l} restarted {} times, fewer than the schedule asks", s.restarts));
        }
    }

    // Later writes reach the learners as entries, with no further snapshot.
    let before: BTreeMap<_, _> = net.seen.lock().unwrap().iter().map(|(k, (s, _))| (*k, s.requests)).collect();
    let w = leader.client_write(request(plan.writes + 1)).await.map_err(|e| format!("later write: {e}"))?;
    for &l in &learners {
        let r = net.raft(l).unwrap();
        wait(&r, 3000)
            .applied_index(Some(w.log_id.index), "later write applied")
            .await
            .map_err(|e| format!("learner {l} never applied a later write: {e}"))?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for &l in &learners {
        let now = net.seen.lock().unwrap()[&l].0.requests;
        if now != before[&l] {
            return Err(format!("learner {l} was sent {} more snapshot chunks after it had the snapshot", now - before[&l]));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn restarted_learner_gets_the_whole_snapshot() {
    let seed = seed();
    let plan = Plan::from_seed(seed);
    let (res, _) = run(&plan, None).await;
    if let Err(e) = res {
        panic!("seed {seed}, {plan:?}: {e}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn restarted_learners_get_the_whole_snapshot_another_schedule() {
    let seed = seed().wrapping_mul(6151).wrapping_add(29);
    let plan = Plan::from_seed(seed);
    let (res, _) = run(&plan, None).await;
    if let Err(e) = res {
        panic!("seed {seed}, {plan:?}: {e}");
    }
}
