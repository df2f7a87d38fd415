//! `Raft::shutdown` stops the Raft core promptly in every state, busy or idle: the join handle
//! completes with `Ok(())`, and by then the core is really gone (its metrics channel is closed
//! and it has let go of the storage it was given).
//!
//! The seed picks node ids, cluster sizes, which member of a cluster is shut down, how long each
//! node idles first, and the order of the scenarios.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftMetrics, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

pub type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

/// How long a shutdown may take before it counts as hung.
pub const WAIT: Duration = Duration::from_secs(5);

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x05_0ff5eed)
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

/// In-process network forwarding each RPC to the registered node.
#[derive(Default)]
pub struct Net {
    nodes: RwLock<HashMap<NodeId, Arc<Node>>>,
}

impl Net {
    fn get(&self, id: NodeId) -> Result<Arc<Node>> {
        self.nodes.read().unwrap().get(&id).cloned().ok_or_else(|| anyhow!("no route to node {}", id))
    }
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        Ok(self.get(target)?.append_entries(rpc).await?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Ok(self.get(target)?.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        Ok(self.get(target)?.vote(rpc).await?)
    }
}

/// Which node is shut down.
#[derive(Clone, Debug)]
pub enum Kind {
    /// A node that was started and never initialized.
    Uninitialized(NodeId),
    /// The node of a one-node cluster.
    SingleLeader(NodeId),
    /// A follower of a cluster of these ids (the first one is initialized).
    Follower(Vec<NodeId>),
    /// The leader of a cluster of these ids.
    Leader(Vec<NodeId>),
}

/// What a shutdown did; the test judges it, the bundle generator prints it.
#[derive(Debug)]
pub struct Outcome {
    pub id: NodeId,
    pub before: RaftMetrics,
    /// `None` when the join handle had not completed after `WAIT`.
    pub joined: Option<String>,
    /// The core's metrics channel closed once the handle completed.
    pub metrics_closed: bool,
    /// Only the test still holds the node's storage once the handle completed.
    pub storage_released: bool,
}

pub fn plan(seed: u64) -> (Vec<Kind>, u64) {
    let mut rng = Rng::new(seed);
    let mut ids = Vec::new();
    while ids.len() < 5 {
        let id = rng.below(50);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut kinds = vec![Kind::Uninitialized(ids[0]), Kind::SingleLeader(ids[1])];
    let size = 2 + rng.below(2) as usize;
    let cluster = ids[2..2 + size].to_vec();
    kinds.push(if rng.below(2) == 0 { Kind::Follower(cluster) } else { Kind::Leader(cluster) });
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (kinds, 100 + rng.below(300))
}

fn config() -> Arc<Config> {
    Arc::new(Config::build("oracle".into()).validate().unwrap())
}

async fn settle(node: &Node, want: State) -> RaftMetrics {
    for _ in 0..250 {
        let m = node.metrics().borrow().clone();
        if m.state == want && m.last_applied == m.last_log_index {
            return m;
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    panic!("node never settled in {:?}: {:?}", want, node.metrics().borrow().clone());
}

/// Takes the only handle of `id` out of the network (an in-flight RPC may hold a clone briefly).
async fn take(net: &Net, id: NodeId) -> Node {
    let mut node = net.nodes.write().unwrap().remove(&id).expect("registered");
    for _ in 0..250 {
        match Arc::try_unwrap(node) {
            Ok(n) => return n,
            Err(n) => node = n,
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    panic!("node {} is still referenced by the network", id);
}

/// Starts the nodes for `kind`, lets them settle, idles `idle_ms`, shuts the chosen one down.
pub async fn shut_down(kind: &Kind, idle_ms: u64) -> Outcome {
    let net = Arc::new(Net::default());
    let mut stores = HashMap::new();
    let ids = match kind {
        Kind::Uninitialized(id) | Kind::SingleLeader(id) => vec![*id],
        Kind::Follower(ids) | Kind::Leader(ids) => ids.clone(),
    };
    for &id in &ids {
        let store = Arc::new(MemStore::new(id));
        stores.insert(id, store.clone());
        net.nodes.write().unwrap().insert(id, Arc::new(Node::new(id, config(), net.clone(), store)));
    }
    if !matches!(kind, Kind::Uninitialized(_)) {
        let members: HashSet<NodeId> = ids.iter().cloned().collect();
        net.get(ids[0]).unwrap().initialize(members).await.expect("initialize");
    }
    let mut leader = None;
    for _ in 0..250 {
        leader = ids.iter().cloned().find(|id| net.get(*id).unwrap().metrics().borrow().state == State::Leader);
        if leader.is_some() || matches!(kind, Kind::Uninitialized(_)) {
            break;
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    let (id, want) = match kind {
        Kind::Uninitialized(id) => (*id, State::NonVoter),
        Kind::SingleLeader(id) => (*id, State::Leader),
        Kind::Leader(_) => (leader.expect("a leader"), State::Leader),
        Kind::Follower(_) => (ids.iter().cloned().find(|id| Some(*id) != leader).unwrap(), State::Follower),
    };
    if let Some(l) = leader {
        let req = ClientRequest { client: "c".into(), serial: 1, status: "x".into() };
        net.get(l).unwrap().client_write(ClientWriteRequest::new(req)).await.expect("write");
    }
    let before = settle(&net.get(id).unwrap(), want).await;
    tokio::time::delay_for(Duration::from_millis(idle_ms)).await;

    let node = take(&net, id).await;
    let mut metrics = node.metrics();
    let store = stores.remove(&id).unwrap();
    let joined = match tokio::time::timeout(WAIT, node.shutdown()).await {
        Ok(Ok(Ok(()))) => Some("Ok(())".to_string()),
        Ok(Ok(Err(e))) => Some(format!("Err({})", e)),
        Ok(Err(e)) => Some(format!("task failed: {}", e)),
        Err(_) => None,
    };
    let metrics_closed = tokio::time::timeout(Duration::from_secs(1), async {
        while metrics.recv().await.is_some() {}
    })
    .await
    .is_ok();
    let mut storage_released = false;
    for _ in 0..50 {
        if Arc::strong_count(&store) == 1 {
            storage_released = true;
            break;
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    for other in ids.iter().filter(|o| **o != id) {
        let _ = take(&net, *other).await.shutdown();
    }
    Outcome { id, before, joined, metrics_closed, storage_released }
}

#[tokio::test(threaded_scheduler)]
async fn shutdown_stops_the_core_in_every_state() {
    let (kinds, idle_ms) = plan(seed());
    for kind in &kinds {
        let o = shut_down(kind, idle_ms).await;
        let what = format!("{:?}, node {} in {:?}", kind, o.id, o.before.state);
        match &o.joined {
            Some(r) => assert_eq!(r, "Ok(())", "{}: the Raft core stopped with an error", what),
            None => panic!("{}: shutdown did not complete within {:?}", what, WAIT),
        }
        assert!(o.metrics_closed, "{}: the join handle completed but the core still publishes metrics", what);
        assert!(o.storage_released, "{}: the join handle completed but the core still holds its storage", what);
    }
}
