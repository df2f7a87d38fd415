//! Hidden oracle: peers that never answer their RPCs slow down only their own replication. While
//! any number of them hang (learners or voters), every membership change, learner addition and
//! write on the leader completes without waiting for a hung RPC to time out, and the cluster ends
//! up with exactly the voters it was asked for.
//!
//! Runs on tokio's paused clock, so durations are virtual and exact: a call that waits for one
//! hung RPC to time out takes the whole `heartbeat_interval` (4 s); the others take no time.
//! The seed picks node ids, how many learners hang, which one is promoted to voter, and the
//! order of the operations in between.

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
use openraft::{Config, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};
use tokio::time::Instant;

/// What a call may cost, in virtual time, while peers hang.
pub const LIMIT: Duration = Duration::from_millis(100);

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x0a_119e5eed)
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

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

/// The network: RPCs to a `hung` node never get an answer, RPCs to a `live` node are delivered
/// in process, every other node is unreachable.
#[derive(Clone, Default)]
pub struct Net {
    hung: Arc<Mutex<BTreeSet<MemNodeId>>>,
    live: Arc<Mutex<BTreeMap<MemNodeId, Raft<TypeConfig>>>>,
    /// Called with the target of every RPC that will never be answered.
    pub on_hang: Option<Arc<dyn Fn(MemNodeId) + Send + Sync>>,
}

pub struct Peer {
    target: MemNodeId,
    net: Net,
}

impl Peer {
    async fn route(&self) -> Result<Raft<TypeConfig>, Unreachable> {
        if self.net.hung.lock().unwrap().contains(&self.target) {
            if let Some(f) = &self.net.on_hang {
                f(self.target);
            }
            std::future::pending::<()>().await;
        }
        let live = self.net.live.lock().unwrap().get(&self.target).cloned();
        live.ok_or_else(|| Unreachable::new(&Down))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let r = self.route().await.map_err(RPCError::Unreachable)?;
        r.append_entries(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        let r = self.route().await.map_err(RPCError::Unreachable)?;
        r.install_snapshot(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        let r = self.route().await.map_err(RPCError::Unreachable)?;
        r.vote(rpc).await.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Peer;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Peer {
        Peer { target, net: self.clone() }
    }
}

/// One call on the leader.
#[derive(Clone, Debug)]
pub enum Op {
    /// `add_learner(id, blocking = false)`; `hung` says whether its RPCs hang or fail at once.
    AddLearner { id: MemNodeId, hung: bool },
    Write,
    /// `change_membership(voters, retain = false)`.
    Voters(BTreeSet<MemNodeId>),
}

/// The leader is node 0; `follower` is a live voter beside it.
#[derive(Clone, Debug)]
pub struct Plan {
    pub follower: Option<MemNodeId>,
    pub ops: Vec<Op>,
}

impl Plan {
    /// The symptom's run: one voter, learner 1 hangs, learner 2 is unreachable, then the
    /// membership drops every learner.
    pub fn symptom() -> Plan {
        Plan {
            follower: None,
            ops: vec![
                Op::Write,
                Op::AddLearner { id: 1, hung: true },
                Op::AddLearner { id: 2, hung: false },
                Op::Write,
                Op::Voters(BTreeSet::from([0])),
            ],
        }
    }

    pub fn seeded(seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let mut ids = Vec::new();
        while ids.len() < 5 {
            let id = 1 + rng.below(40);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let follower = ids[0];
        let hung: Vec<MemNodeId> = ids[1..2 + rng.below(2) as usize].to_vec();
        let down = ids[4];
        let promoted = hung[rng.below(hung.len() as u64) as usize];
        let mut ops = vec![Op::AddLearner { id: follower, hung: false }, Op::Voters(BTreeSet::from([0, follower]))];
        for &h in &hung {
            ops.push(Op::AddLearner { id: h, hung: true });
        }
        let mut middle = vec![Op::Write, Op::AddLearner { id: down, hung: false }, Op::Voters(BTreeSet::from([0, follower, promoted]))];
        for i in (1..middle.len()).rev() {
            middle.swap(i, rng.below(i as u64 + 1) as usize);
        }
        ops.extend(middle);
        ops.push(Op::Write);
        ops.push(Op::Voters(BTreeSet::from([0, follower])));
        ops.push(Op::Write);
        Plan { follower: Some(follower), ops }
    }
}

/// How one call went.
#[derive(Clone, Debug)]
pub struct Timed {
    pub op: Op,
    pub took: Duration,
    pub result: String,
    pub ok: bool,
}

fn config() -> Arc<Config> {
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
    Arc::new(config.validate().unwrap())
}

async fn timed<T, E: std::fmt::Debug>(op: &Op, f: impl std::future::Future<Output = Result<T, E>>) -> Timed {
    let started = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(60), f).await;
    let took = started.elapsed();
    let (result, ok) = match res {
        Ok(Ok(_)) => ("Ok".to_string(), true),
        Ok(Err(e)) => (format!("Err({e:?})"), false),
        Err(_) => ("no answer after 60 s".to_string(), false),
    };
    Timed { op: op.clone(), took, result, ok }
}

/// Runs the plan's calls on leader 0, one after the other, and times each. Returns the calls
/// and the leader's final metrics.
pub async fn run(plan: &Plan, net: Net, obs: &mut dyn FnMut(&Timed)) -> (Vec<Timed>, openraft::RaftMetrics<MemNodeId, ()>) {
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let leader = Raft::new(0, config(), net.clone(), log_store, sm).await.unwrap();
    if let Some(f) = plan.follower {
        let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
        let r = Raft::new(f, config(), net.clone(), log_store, sm).await.unwrap();
        net.live.lock().unwrap().insert(f, r);
    }
    leader.initialize(BTreeSet::from([0u64])).await.unwrap();
    leader.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "node 0 leads").await.unwrap();
    let mut out = Vec::new();
    let mut serial = 0;
    for op in &plan.ops {
        let t = match op {
            Op::AddLearner { id, hung } => {
                if *hung {
                    net.hung.lock().unwrap().insert(*id);
                }
                timed(op, leader.add_learner(*id, (), false)).await
            }
            Op::Write => {
                serial += 1;
                let req = ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") };
                timed(op, leader.client_write(req)).await
            }
            Op::Voters(v) => timed(op, leader.change_membership(v.clone(), false)).await,
        };
        obs(&t);
        out.push(t);
    }
    let metrics = leader.metrics().borrow().clone();
    (out, metrics)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn hung_peers_do_not_stall_the_leader() {
    let plan = Plan::seeded(seed());
    let (calls, m) = run(&plan, Net::default(), &mut |_| {}).await;
    for t in &calls {
        assert!(t.ok, "{:?} failed: {}", t.op, t.result);
        assert!(t.took < LIMIT, "{:?} took {:?} while peers hang (plan {:?})", t.op, t.took, plan.ops);
    }
    assert_eq!(m.state, ServerState::Leader);
    let want = plan.ops.iter().rev().find_map(|o| match o {
        Op::Voters(v) => Some(v.clone()),
        _ => None,
    });
    let want = want.expect("the plan changes the membership");
    let voters: BTreeSet<MemNodeId> = m.membership_config.membership().voter_ids().collect();
    assert_eq!(voters, want, "final membership: {:?}", m.membership_config);
}
