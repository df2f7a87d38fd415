//! A node restarted on its own storage takes the role its recovered membership gives it: a
//! non-voter (outside the configuration) comes back as a non-voter, keeps replicating, and never
//! campaigns, even when cut off from the leader for several election timeouts; a voter comes back
//! as a follower.
//!
//! The seed picks the ids of three voters and one or two non-voters, how many writes come before
//! and after the restart, which non-voter and which follower restart and in which order, how long
//! the partition lasts. (The in-process network delivers at once: async-raft 0.6's replication
//! to a fresh non-voter can stall when responses are delayed, in both versions.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteRequest, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftMetrics, RaftNetwork, State};
use memstore::{ClientRequest, ClientResponse, MemStore};

pub type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

pub const ELECTION_MIN: u64 = 300;
pub const ELECTION_MAX: u64 = 600;

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x0a5e_ed11)
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

/// In-process transport: delivers every RPC to the registered node with that id, unless either
/// end is cut off. Records who sent RequestVotes.
#[derive(Default)]
pub struct Net {
    nodes: RwLock<HashMap<NodeId, Node>>,
    cut: RwLock<HashSet<NodeId>>,
    pub votes_from: Mutex<Vec<(NodeId, u64)>>,
}

impl Net {
    async fn route(&self, from: NodeId, to: NodeId) -> Result<Node> {
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
        self.votes_from.lock().unwrap().push((rpc.candidate_id, rpc.term));
        Ok(self.route(rpc.candidate_id, target).await?.vote(rpc).await?)
    }
}

/// One run of the scenario.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Three voters; the first is initialized and leads.
    pub voters: Vec<NodeId>,
    pub non_voters: Vec<NodeId>,
    pub writes_before: u64,
    pub writes_after: u64,
    /// The non-voter that restarts.
    pub restart_non_voter: NodeId,
    /// The follower that restarts too, if any, and whether it restarts before the non-voter.
    pub restart_voter: Option<(NodeId, bool)>,
    /// How long the restarted non-voter is cut off from everyone, in election timeouts.
    pub partition_timeouts: u64,
}

impl Plan {
    /// The symptom's run: one voter 0, non-voter 1, three writes before the restart of node 1
    /// and one after it, then a partition of 1.8 s.
    pub fn symptom() -> Plan {
        Plan {
            voters: vec![0],
            non_voters: vec![1],
            writes_before: 3,
            writes_after: 1,
            restart_non_voter: 1,
            restart_voter: None,
            partition_timeouts: 3,
        }
    }

    pub fn seeded(seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let mut ids = Vec::new();
        let count = 4 + rng.below(2) as usize;
        while ids.len() < count {
            let id = rng.below(40);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let voters = ids[..3].to_vec();
        let non_voters = ids[3..].to_vec();
        let restart_non_voter = non_voters[rng.below(non_voters.len() as u64) as usize];
        let restart_voter = Some((voters[1 + rng.below(2) as usize], rng.below(2) == 0));
        Plan {
            voters,
            non_voters,
            writes_before: 1 + rng.below(4),
            writes_after: 1 + rng.below(3),
            restart_non_voter,
            restart_voter,
            partition_timeouts: 3 + rng.below(3),
        }
    }
}

/// What the scenario saw; the test judges it, the bundle generator prints it.
#[derive(Debug, Default)]
pub struct Report {
    /// (what just happened, metrics of the restarted non-voter at that point)
    pub steps: Vec<(String, RaftMetrics)>,
    /// Metrics of the restarted voter once it has recovered its log.
    pub restarted_voter: Option<RaftMetrics>,
    /// RequestVotes the restarted non-voter sent, as (candidate, term).
    pub votes_by_non_voter: Vec<(NodeId, u64)>,
    pub leader_before: Option<RaftMetrics>,
    pub leader_after: Option<RaftMetrics>,
}

fn config() -> Arc<Config> {
    Arc::new(
        Config::build("oracle".into())
            .heartbeat_interval(50)
            .election_timeout_min(ELECTION_MIN)
            .election_timeout_max(ELECTION_MAX)
            .validate()
            .unwrap(),
    )
}

/// Waits (virtual time) until `cond` holds; returns the last metrics either way.
async fn wait_for(node: &Node, cond: impl Fn(&RaftMetrics) -> bool) -> RaftMetrics {
    let mut rx = node.metrics();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = rx.borrow().clone();
        if cond(&m) {
            return m;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            _ => return rx.borrow().clone(),
        }
    }
}

async fn write(leader: &Node, serial: u64) {
    let req = ClientRequest { client: "c".into(), serial, status: format!("v{}", serial) };
    leader.client_write(ClientWriteRequest::new(req)).await.expect("client write on the leader");
}

async fn restart(net: &Arc<Net>, id: NodeId, stores: &HashMap<NodeId, Arc<MemStore>>) -> Node {
    let old = net.nodes.write().unwrap().remove(&id).expect("node is registered");
    old.shutdown().await.expect("shutdown");
    let node = Node::new(id, config(), net.clone(), stores[&id].clone());
    net.nodes.write().unwrap().insert(id, node.clone());
    node
}

/// Records a step of the restarted non-voter and shows it to the observer.
fn step(report: &mut Report, obs: &mut dyn FnMut(&str, &RaftMetrics), what: String, m: RaftMetrics) {
    obs(&what, &m);
    report.steps.push((what, m));
}

/// Runs the plan; `obs` sees each step of the restarted non-voter as it is recorded.
pub async fn run(plan: &Plan, obs: &mut dyn FnMut(&str, &RaftMetrics)) -> Report {
    let net = Arc::new(Net::default());
    let mut stores = HashMap::new();
    for &id in plan.voters.iter().chain(plan.non_voters.iter()) {
        let store = Arc::new(MemStore::new(id));
        stores.insert(id, store.clone());
        net.nodes.write().unwrap().insert(id, Node::new(id, config(), net.clone(), store));
    }
    let node = |id: NodeId| net.nodes.read().unwrap()[&id].clone();
    let leader_id = plan.voters[0];
    let leader = node(leader_id);
    let members: HashSet<NodeId> = plan.voters.iter().cloned().collect();
    leader.initialize(members.clone()).await.expect("initialize");
    wait_for(&leader, |m| m.state == State::Leader).await;
    for &id in &plan.non_voters {
        leader.add_non_voter(id).await.expect("add_non_voter");
    }
    let mut serial = 0;
    for _ in 0..plan.writes_before {
        serial += 1;
        write(&leader, serial).await;
    }
    let last = leader.metrics().borrow().last_log_index;
    let mut report = Report::default();
    let nv = plan.restart_non_voter;
    let before = wait_for(&node(nv), |m| m.last_log_index == last && m.last_applied == last).await;
    step(&mut report, obs, format!("before the restart, node {} has replicated up to index {}", nv, last), before);
    report.leader_before = Some(leader.metrics().borrow().clone());

    let mut restarted_voter = None;
    if let Some((v, true)) = plan.restart_voter {
        restarted_voter = Some(restart(&net, v, &stores).await);
    }
    let n1 = restart(&net, nv, &stores).await;
    if let Some((v, false)) = plan.restart_voter {
        restarted_voter = Some(restart(&net, v, &stores).await);
    }
    let recovered = wait_for(&n1, |m| m.last_log_index == last && m.membership_config.members == members).await;
    step(&mut report, obs, format!("node {} restarted on the same MemStore and recovered its log", nv), recovered);
    if let Some(v) = restarted_voter {
        report.restarted_voter = Some(wait_for(&v, |m| m.last_log_index >= last && m.membership_config.members == members).await);
    }

    for _ in 0..plan.writes_after {
        serial += 1;
        write(&leader, serial).await;
    }
    let last = leader.metrics().borrow().last_log_index;
    let synced = wait_for(&n1, |m| m.last_applied == last).await;
    step(&mut report, obs, format!("{} more writes on leader {}", plan.writes_after, leader_id), synced);

    let votes_before = net.votes_from.lock().unwrap().len();
    net.cut.write().unwrap().insert(nv);
    tokio::time::sleep(Duration::from_millis(plan.partition_timeouts * ELECTION_MAX)).await;
    let cut = n1.metrics().borrow().clone();
    step(&mut report, obs, format!("node {} cut off from every node for {} ms", nv, plan.partition_timeouts * ELECTION_MAX), cut);
    net.cut.write().unwrap().remove(&nv);

    serial += 1;
    write(&leader, serial).await;
    let last = leader.metrics().borrow().last_log_index;
    let healed = wait_for(&n1, |m| m.last_applied == last).await;
    step(&mut report, obs, format!("network healed, one more write on leader {}", leader_id), healed);
    report.votes_by_non_voter = net.votes_from.lock().unwrap()[votes_before..].iter().filter(|(c, _)| *c == nv).cloned().collect();
    report.leader_after = Some(leader.metrics().borrow().clone());
    for id in plan.voters.iter().chain(plan.non_voters.iter()) {
        let _ = node(*id).shutdown().await;
    }
    report
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn restarted_nodes_take_the_role_of_their_recovered_membership() {
    let plan = Plan::seeded(seed());
    let report = run(&plan, &mut |_, _| {}).await;
    let nv = plan.restart_non_voter;
    let (before, after) = (report.leader_before.as_ref().unwrap(), report.leader_after.as_ref().unwrap());
    let last_step = report.steps.len() - 1;
    for (i, (what, m)) in report.steps.iter().enumerate() {
        assert!(!m.membership_config.contains(&nv), "node {} is not a member: {:?}", nv, m);
        assert_eq!(m.state, State::NonVoter, "node {} outside the membership is not a non-voter after: {} ({:?})", nv, what, m);
        if i > 1 && i != 3 {
            assert_eq!(m.last_applied, m.last_log_index, "node {} stopped replicating: {} ({:?})", nv, what, m);
        }
        assert_eq!(m.current_term, before.current_term, "node {} changed term: {} ({:?})", nv, what, m);
    }
    assert!(report.steps[last_step].1.last_applied > report.steps[1].1.last_applied, "node {} stopped replicating", nv);
    assert!(report.votes_by_non_voter.is_empty(), "non-voter {} campaigned: {:?}", nv, report.votes_by_non_voter);
    if let Some(v) = &report.restarted_voter {
        assert_eq!(v.state, State::Follower, "a restarted voter did not come back as a follower: {:?}", v);
    }
    assert_eq!(after.state, State::Leader, "leader {} was deposed: {:?}", plan.voters[0], after);
    assert_eq!(after.current_term, before.current_term, "the cluster's term moved: {:?}", after);
}
