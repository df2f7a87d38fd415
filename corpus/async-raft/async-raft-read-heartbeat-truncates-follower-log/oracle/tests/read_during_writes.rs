//! Hidden oracle: linearizable reads on the leader may run while writes are being replicated,
//! and their leadership-confirming heartbeats may reach a follower after later appends did; no
//! follower may lose entries it acknowledged because of that, every node ends with the leader's
//! log and state, every node keeps running, and a leader cut off from its followers still
//! refuses to confirm a read.
//!
//! The seed picks the follower(s) whose link delivers the read's heartbeat late, how many appends
//! overtake it in each round, and how many rounds run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};
use tokio::sync::oneshot;

pub type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same plan forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x0dd_ba11_5eed)
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

/// What the scenario does, drawn from a seed.
#[derive(Clone, Debug)]
pub struct Plan {
    /// For each round: how many writes (each one append) overtake the read's heartbeat.
    pub rounds: Vec<u64>,
    /// Followers (by rank among the four followers) whose link holds the read's heartbeat back.
    pub slow: Vec<usize>,
}

pub fn plan(seed: u64) -> Plan {
    let mut r = Rng::new(seed);
    let n = 4 + r.below(3) as usize;
    let mut rounds: Vec<u64> = (0..n).map(|_| 1 + r.below(3)).collect();
    // Always some rounds where more than one append overtakes the heartbeat.
    rounds[1] = 2 + r.below(2);
    rounds[n - 1] = 2;
    // One to three of the four followers; the others confirm the reads.
    let mut slow: Vec<usize> = (0..4).filter(|_| r.below(2) == 0).collect();
    if slow.is_empty() {
        slow.push(r.below(4) as usize);
    }
    if slow.len() == 4 {
        slow.remove(r.below(4) as usize);
    }
    Plan { rounds, slow }
}

/// A trap on one follower's link: the next empty AppendEntries (a heartbeat) is held back until
/// `appends` AppendEntries carrying entries have been delivered to that follower after it, then
/// delivered. A held heartbeat that nothing overtakes within 600 ms is let go and the trap stays
/// armed (a periodic heartbeat may have walked into it).
struct Trap {
    appends: u64,
    held: Option<(u64, oneshot::Sender<()>)>,
    sprung: bool,
}

/// In-process network. RPCs are delivered at once, except what a trap holds back.
pub struct Net {
    nodes: RwLock<HashMap<NodeId, Arc<Node>>>,
    cut: RwLock<HashSet<NodeId>>,
    traps: Mutex<HashMap<NodeId, Trap>>,
    /// Sees one line per RPC delivered to a follower and its outcome.
    pub trace: Mutex<Option<Box<dyn FnMut(String) + Send>>>,
}

impl Net {
    pub fn new() -> Arc<Self> {
        Arc::new(Net {
            nodes: RwLock::default(),
            cut: RwLock::default(),
            traps: Mutex::default(),
            trace: Mutex::new(None),
        })
    }
    pub fn add(&self, id: NodeId, node: Node) -> Arc<Node> {
        let node = Arc::new(node);
        self.nodes.write().unwrap().insert(id, node.clone());
        node
    }
    pub fn node(&self, id: NodeId) -> Arc<Node> {
        self.nodes.read().unwrap()[&id].clone()
    }
    pub fn isolate(&self, id: NodeId) {
        self.cut.write().unwrap().insert(id);
    }
    pub fn arm(&self, follower: NodeId, appends: u64) {
        self.traps.lock().unwrap().insert(follower, Trap { appends, held: None, sprung: false });
    }
    /// Whether the trap on `follower` delivered a heartbeat after the planned appends.
    pub fn sprung(&self, follower: NodeId) -> bool {
        self.traps.lock().unwrap().get(&follower).map(|t| t.sprung).unwrap_or(false)
    }
    pub fn disarm(&self, follower: NodeId) {
        if let Some(mut t) = self.traps.lock().unwrap().remove(&follower) {
            if let Some((_, tx)) = t.held.take() {
                let _ = tx.send(());
            }
        }
    }
    fn note(&self, line: String) {
        if let Some(t) = self.trace.lock().unwrap().as_mut() {
            t(line);
        }
    }
    fn target(&self, from: NodeId, to: NodeId) -> Result<Arc<Node>> {
        let cut = self.cut.read().unwrap();
        if cut.contains(&from) || cut.contains(&to) {
            return Err(anyhow!("link {} -> {} is cut", from, to));
        }
        self.nodes.read().unwrap().get(&to).cloned().ok_or_else(|| anyhow!("node {} is down", to))
    }
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        let node = self.target(rpc.leader_id, target)?;
        let what = format!(
            "AppendEntries to node {} prev_log_index={} entries=[{}]",
            target,
            rpc.prev_log_index,
            rpc.entries.iter().map(|e| e.index.to_string()).collect::<Vec<_>>().join(",")
        );
        let mut wait = None;
        {
            let mut traps = self.traps.lock().unwrap();
            if let Some(trap) = traps.get_mut(&target) {
                if rpc.entries.is_empty() && trap.held.is_none() && !trap.sprung {
                    let (tx, rx) = oneshot::channel();
                    trap.held = Some((0, tx));
                    wait = Some(rx);
                } else if !rpc.entries.is_empty() {
                    if let Some((seen, _)) = trap.held.as_mut() {
                        *seen += 1;
                    }
                }
            }
        }
        let late = wait.is_some();
        if let Some(rx) = wait {
            self.note(format!("{}: held back", what));
            let released = tokio::time::timeout(Duration::from_millis(600), rx).await.is_ok();
            let mut traps = self.traps.lock().unwrap();
            if let Some(trap) = traps.get_mut(&target) {
                if !released {
                    trap.held = None;
                }
            }
        }
        let res = node.append_entries(rpc).await;
        self.note(format!("{}{} -> {}", what, if late { " (delivered late)" } else { "" }, match &res {
            Ok(r) => format!("success={} conflict_index={:?}", r.success, r.conflict_opt.as_ref().map(|c| c.index)),
            Err(e) => e.to_string(),
        }));
        // An append delivered: release a held heartbeat once enough appends overtook it.
        {
            let mut traps = self.traps.lock().unwrap();
            if let Some(trap) = traps.get_mut(&target) {
                let ready = matches!(trap.held, Some((seen, _)) if seen >= trap.appends);
                if ready {
                    let (_, tx) = trap.held.take().unwrap();
                    trap.sprung = true;
                    let _ = tx.send(());
                }
            }
        }
        Ok(res?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Ok(self.target(rpc.leader_id, target)?.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        Ok(self.target(rpc.candidate_id, target)?.vote(rpc).await?)
    }
}

pub fn config() -> Arc<Config> {
    Arc::new(
        Config::build("oracle".into())
            .heartbeat_interval(1000)
            .election_timeout_min(2500)
            .election_timeout_max(3000)
            .validate()
            .unwrap(),
    )
}

pub struct Cluster {
    pub net: Arc<Net>,
    pub stores: BTreeMap<NodeId, Arc<MemStore>>,
    pub leader: NodeId,
    pub followers: Vec<NodeId>,
}

pub async fn start() -> Cluster {
    let net = Net::new();
    let mut stores = BTreeMap::new();
    let members: HashSet<NodeId> = (1..=5u64).collect();
    for id in 1..=5u64 {
        let store = Arc::new(MemStore::new(id));
        stores.insert(id, store.clone());
        net.add(id, Raft::new(id, config(), net.clone(), store));
    }
    for id in 1..=5u64 {
        let _ = net.node(id).initialize(members.clone()).await;
    }
    let mut leader = None;
    for _ in 0..500 {
        leader = (1..=5u64).find(|id| net.node(*id).metrics().borrow().state == State::Leader);
        if leader.is_some() {
            break;
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    let leader = leader.expect("a leader within 10 s");
    let followers = (1..=5u64).filter(|id| *id != leader).collect();
    Cluster { net, stores, leader, followers }
}

pub fn request(serial: u64) -> ClientWriteRequest<ClientRequest> {
    ClientWriteRequest::new(ClientRequest { client: format!("c{}", serial), serial, status: format!("v{}", serial) })
}

/// One round: a read on the leader whose heartbeat to each slow follower arrives after `n`
/// writes were appended there.
pub async fn round(c: &Cluster, plan: &Plan, n: u64, serial: &mut u64) -> Vec<bool> {
    let slow: Vec<NodeId> = plan.slow.iter().map(|i| c.followers[*i]).collect();
    for f in &slow {
        c.net.arm(*f, n);
    }
    let leader = c.net.node(c.leader);
    tokio::time::timeout(Duration::from_secs(5), leader.client_read())
        .await
        .expect("read answered")
        .expect("the leader confirms its leadership for a read");
    for _ in 0..n {
        *serial += 1;
        tokio::time::timeout(Duration::from_secs(5), leader.client_write(request(*serial)))
            .await
            .expect("write answered")
            .unwrap_or_else(|e| panic!("write {} failed: {:?}", serial, e));
    }
    // Let the held heartbeat go out and be handled.
    for _ in 0..80 {
        if slow.iter().all(|f| c.net.sprung(*f)) {
            break;
        }
        tokio::time::delay_for(Duration::from_millis(10)).await;
    }
    tokio::time::delay_for(Duration::from_millis(30)).await;
    let sprung = slow.iter().map(|f| c.net.sprung(*f)).collect();
    for f in &slow {
        c.net.disarm(*f);
    }
    sprung
}

/// The log of a node as (index, term) pairs.
pub async fn log_of(store: &MemStore) -> Vec<(u64, u64)> {
    store.get_log().await.values().map(|e| (e.index, e.term)).collect()
}

pub async fn statuses(store: &MemStore) -> HashMap<String, String> {
    store.get_state_machine().await.client_status.clone()
}

#[tokio::test(threaded_scheduler)]
async fn reads_racing_writes_keep_follower_logs() {
    let plan = plan(seed());
    let c = start().await;
    let mut serial = 0;
    let mut sprung_any = false;
    for n in plan.rounds.clone() {
        let s = round(&c, &plan, n, &mut serial).await;
        sprung_any |= s.iter().any(|x| *x);
    }

    // Quiet: the leader's periodic heartbeats carry its commit index to everyone.
    let leader_store = c.stores[&c.leader].clone();
    let mut settled = false;
    for _ in 0..100 {
        let want = statuses(&leader_store).await;
        let mut all = want.len() as u64 == serial;
        for f in &c.followers {
            all &= statuses(&c.stores[f]).await == want;
        }
        if all {
            settled = true;
            break;
        }
        tokio::time::delay_for(Duration::from_millis(50)).await;
    }
    for id in 1..=5u64 {
        let state = c.net.node(id).metrics().borrow().state;
        assert_ne!(state, State::Shutdown, "node {} shut down ({:?})", id, plan);
    }
    let leader_log = log_of(&leader_store).await;
    for f in &c.followers {
        let log = log_of(&c.stores[f]).await;
        assert_eq!(
            log, leader_log,
            "follower {}'s log (index, term) differs from leader {}'s after reads raced writes ({:?})",
            f, c.leader, plan
        );
    }
    assert!(settled, "not every node applied all {} writes within 5 s of the last one ({:?})", serial, plan);

    // A leader cut off from every follower must not confirm a read.
    c.net.isolate(c.leader);
    let read = tokio::time::timeout(Duration::from_secs(5), c.net.node(c.leader).client_read()).await;
    assert!(matches!(read, Ok(Err(_))), "a leader cut off from every follower confirmed a read: {:?}", read.map(|r| r.is_ok()));

    // The scenario itself: some read heartbeat reached a follower after appends did.
    assert!(sprung_any, "scenario did not run: no read heartbeat was overtaken by appends ({:?})", plan);
}
