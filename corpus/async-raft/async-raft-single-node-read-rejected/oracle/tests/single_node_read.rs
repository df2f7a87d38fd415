//! A leader answers a linearizable read once a majority of its voters (itself included) confirm
//! its leadership: at once when it is the only voter, whatever its id and whatever non-voters
//! hang off it; never when it is cut off from the majority of a larger cluster.
//!
//! The seed picks node ids, cluster sizes, how many writes come before the reads, which
//! non-voters crash and the per-RPC delays of the in-process network.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

pub type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5eed_0f_c0ffee)
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
    /// `count` distinct ids from `1..=max`.
    pub fn ids(&mut self, count: usize, max: u64) -> Vec<NodeId> {
        let mut out = Vec::new();
        while out.len() < count {
            let id = 1 + self.below(max);
            if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// In-process network: forwards each RPC to the target node after a small seeded delay,
/// unless either end is down or cut off.
pub struct Net {
    nodes: RwLock<HashMap<NodeId, Arc<Node>>>,
    cut: RwLock<HashSet<NodeId>>,
    delay_seed: u64,
    sent: AtomicU64,
}

impl Net {
    pub fn new(delay_seed: u64) -> Arc<Self> {
        Arc::new(Net { nodes: RwLock::default(), cut: RwLock::default(), delay_seed, sent: AtomicU64::new(0) })
    }
    pub fn add(&self, id: NodeId, node: Node) -> Arc<Node> {
        let node = Arc::new(node);
        self.nodes.write().unwrap().insert(id, node.clone());
        node
    }
    /// The handle of a registered node.
    pub fn node(&self, id: NodeId) -> Arc<Node> {
        self.nodes.read().unwrap()[&id].clone()
    }
    /// Takes a node off the network for good (its process is gone).
    pub fn crash(&self, id: NodeId) {
        self.nodes.write().unwrap().remove(&id);
    }
    /// Cuts every link of `id`.
    pub fn isolate(&self, id: NodeId) {
        self.cut.write().unwrap().insert(id);
    }
    async fn route(&self, from: NodeId, to: NodeId) -> Result<Arc<Node>> {
        let n = self.sent.fetch_add(1, Ordering::SeqCst);
        let mut r = Rng::new(self.delay_seed.wrapping_add(n));
        tokio::time::delay_for(Duration::from_millis(r.below(4))).await;
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
        Ok(self.route(rpc.leader_id, target).await?.append_entries(rpc).await?)
    }
    async fn install_snapshot(&self, target: NodeId, rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Ok(self.route(rpc.leader_id, target).await?.install_snapshot(rpc).await?)
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        Ok(self.route(rpc.candidate_id, target).await?.vote(rpc).await?)
    }
}

/// One call made on a node and what it returned, as the scenarios report it to their observer.
pub struct Step {
    pub node: NodeId,
    pub call: String,
    pub result: String,
}

fn config() -> Arc<Config> {
    Arc::new(Config::build("oracle".into()).validate().unwrap())
}

async fn leader_of(net: &Net, ids: &[NodeId]) -> NodeId {
    for _ in 0..250 {
        for id in ids {
            if let Some(n) = net.nodes.read().unwrap().get(id) {
                if n.metrics().borrow().state == State::Leader {
                    return *id;
                }
            }
        }
        tokio::time::delay_for(Duration::from_millis(20)).await;
    }
    panic!("no leader among {:?} within 5 s", ids);
}

async fn write(node: &Node, id: NodeId, serial: u64, obs: &mut dyn FnMut(Step)) {
    let req = ClientRequest { client: "c".into(), serial, status: format!("v{}", serial) };
    let res = tokio::time::timeout(Duration::from_secs(5), node.client_write(ClientWriteRequest::new(req))).await;
    let result = match res {
        Ok(Ok(r)) => format!("Ok(index {})", r.index),
        Ok(Err(e)) => panic!("write {} on leader {} failed: {}", serial, id, e),
        Err(_) => panic!("write {} on leader {} did not answer", serial, id),
    };
    obs(Step { node: id, call: format!("client_write(serial {})", serial), result });
}

/// Reads on `node` and returns whether it confirmed its leadership.
pub async fn read(node: &Node, id: NodeId, obs: &mut dyn FnMut(Step)) -> bool {
    let res = tokio::time::timeout(Duration::from_secs(3), node.client_read()).await;
    let (ok, result) = match res {
        Ok(Ok(())) => (true, "Ok(())".to_string()),
        Ok(Err(e)) => (false, format!("Err(\"{}\")", e)),
        Err(_) => panic!("read on node {} did not answer within 3 s", id),
    };
    obs(Step { node: id, call: "client_read()".into(), result });
    ok
}

fn members(ids: &[NodeId]) -> HashSet<NodeId> {
    ids.iter().cloned().collect()
}

/// A connected cluster of `ids`, initialized through `ids[0]`: `writes` writes on the leader,
/// then `reads` reads, each of which must succeed. Returns the network and the leader's id.
pub async fn connected_cluster(ids: &[NodeId], writes: u64, reads: u64, delay_seed: u64, obs: &mut dyn FnMut(Step)) -> (Arc<Net>, NodeId) {
    let net = Net::new(delay_seed);
    for &id in ids {
        net.add(id, Node::new(id, config(), net.clone(), Arc::new(MemStore::new(id))));
    }
    let first = net.nodes.read().unwrap()[&ids[0]].clone();
    let mut sorted = ids.to_vec();
    sorted.sort();
    let init = first.initialize(members(ids)).await;
    obs(Step { node: ids[0], call: format!("initialize({:?})", sorted), result: format!("{:?}", init) });
    init.expect("initialize");
    let lid = leader_of(&net, ids).await;
    let leader = net.nodes.read().unwrap()[&lid].clone();
    let m = leader.metrics().borrow().clone();
    obs(Step { node: lid, call: "metrics".into(), result: format!("state {:?}, term {}, current_leader {:?}", m.state, m.current_term, m.current_leader) });
    for serial in 1..=writes {
        write(&leader, lid, serial, obs).await;
    }
    for attempt in 0..reads {
        assert!(read(&leader, lid, obs).await, "read {} on leader {} of the connected cluster {:?} failed", attempt, lid, sorted);
    }
    (net, lid)
}

/// A single voter `voter` with `non_voters` attached; the non-voters in `crashed` then go away.
/// Every read on the voter must succeed, and the voter keeps taking writes.
pub async fn voter_with_non_voters(voter: NodeId, non_voters: &[NodeId], crashed: &[NodeId], writes: u64, delay_seed: u64, obs: &mut dyn FnMut(Step)) {
    let (net, lid) = connected_cluster(&[voter], writes, 1, delay_seed, obs).await;
    assert_eq!(lid, voter);
    let leader = net.nodes.read().unwrap()[&voter].clone();
    for &id in non_voters {
        net.add(id, Node::new(id, config(), net.clone(), Arc::new(MemStore::new(id))));
        let res = tokio::time::timeout(Duration::from_secs(5), leader.add_non_voter(id)).await;
        let res = res.expect("add_non_voter answers").map_err(|e| e.to_string());
        obs(Step { node: voter, call: format!("add_non_voter({})", id), result: format!("{:?}", res) });
        res.expect("add_non_voter");
    }
    for &id in crashed {
        net.crash(id);
        obs(Step { node: id, call: "crash".into(), result: "gone".into() });
    }
    for attempt in 0..2 {
        assert!(read(&leader, voter, obs).await, "read {} on the only voter {} failed (non-voters {:?}, crashed {:?})", attempt, voter, non_voters, crashed);
    }
    write(&leader, voter, writes + 1, obs).await;
    assert_eq!(leader.metrics().borrow().state, State::Leader);
}

/// The leader of `ids` is cut off from every peer: it must refuse linearizable reads.
pub async fn isolated_leader(ids: &[NodeId], delay_seed: u64, obs: &mut dyn FnMut(Step)) {
    let (net, lid) = connected_cluster(ids, 1, 1, delay_seed, obs).await;
    net.isolate(lid);
    obs(Step { node: lid, call: "cut off from every peer".into(), result: String::new() });
    let leader = net.nodes.read().unwrap()[&lid].clone();
    assert!(!read(&leader, lid, obs).await, "leader {} of {:?} confirmed a read while cut off from all {} peers", lid, ids, ids.len() - 1);
}

#[tokio::test(threaded_scheduler)]
async fn leader_serves_reads_exactly_when_a_majority_confirms() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut quiet = |_: Step| {};

    // A one-node cluster, whatever its id and however many writes came first.
    let lone = rng.ids(1, 40)[0];
    let writes = rng.below(4);
    let reads = 1 + rng.below(3);
    connected_cluster(&[lone], writes, reads, rng.next(), &mut quiet).await;

    // One voter with non-voters attached, all of which are gone by the time of the read.
    let ids = rng.ids(3, 40);
    let non_voters = &ids[1..2 + rng.below(2) as usize];
    voter_with_non_voters(ids[0], non_voters, non_voters, rng.below(3), rng.next(), &mut quiet).await;

    // A larger cluster whose leader loses every peer.
    let size = if rng.below(2) == 0 { 5 } else { 7 };
    let ids = rng.ids(size, 40);
    isolated_leader(&ids, rng.next(), &mut quiet).await;
}
