//! Hidden oracle: a leader commits a log index only once a quorum of voters holds it, and as
//! soon as one does, whatever order the followers' acknowledgements arrive in, for clusters of
//! six to nine voters, with followers that tie and overtake each other.
//!
//! One real node, leader 0 on openraft-memstore, sends one entry per AppendEntries. Its
//! followers are simulated by its network: each holds a prefix of the leader's log and takes
//! the next entry only while it is below a target the test raises step by step, so the order of
//! acknowledgements is the test's. After each step the test waits until the leader has recorded
//! that follower's progress, then reads the leader's committed log id and compares it with the
//! highest index a quorum of voters holds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::Notify;

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

/// One simulated follower: the last index of the leader's log it holds, and how far it may go
/// (nothing at all until the test first lets it).
#[derive(Clone, Copy, Debug, Default)]
struct Follower {
    held: Option<u64>,
    target: Option<u64>,
}

/// The leader's network: every follower is simulated here.
#[derive(Clone, Default)]
pub struct Followers {
    state: Arc<Mutex<BTreeMap<MemNodeId, Follower>>>,
    raised: Arc<Notify>,
    /// (follower, last index taken) for each AppendEntries answered with entries taken.
    pub acks: Arc<Mutex<Vec<(MemNodeId, u64)>>>,
}

impl Followers {
    /// Lets follower `id` take entries up to `index`.
    pub fn raise(&self, id: MemNodeId, index: u64) {
        self.state.lock().unwrap().entry(id).or_default().target = Some(index);
        self.raised.notify_waiters();
    }
}

/// The leader's connection to one simulated follower.
pub struct ToFollower {
    id: MemNodeId,
    all: Followers,
}

impl RaftNetwork<TypeConfig> for ToFollower {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>>
    {
        let prev = rpc.prev_log_id.map(|l| l.index);
        loop {
            let raised = self.all.raised.notified();
            {
                let mut state = self.all.state.lock().unwrap();
                let f = state.entry(self.id).or_default();
                if prev > f.held {
                    return Ok(AppendEntriesResponse::Conflict);
                }
                let Some(last) = rpc.entries.last().map(|e| e.log_id) else {
                    return Ok(AppendEntriesResponse::Success);
                };
                if f.target >= Some(last.index) {
                    f.held = f.held.max(Some(last.index));
                    self.all.acks.lock().unwrap().push((self.id, last.index));
                    return Ok(AppendEntriesResponse::Success);
                }
            }
            raised.await;
        }
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Ok(VoteResponse {
            vote: rpc.vote,
            vote_granted: true,
            last_log_id: None,
        })
    }
}

impl RaftNetworkFactory<TypeConfig> for Followers {
    type Network = ToFollower;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> ToFollower {
        ToFollower {
            id: target,
            all: self.clone(),
        }
    }
}

/// One scenario: the cluster size, the writes, and the acknowledgement steps.
#[derive(Clone, Debug)]
pub struct Plan {
    pub voters: u64,
    pub writes: u64,
    /// (follower, index it may now hold), in order.
    pub steps: Vec<(MemNodeId, u64)>,
}

/// The quorum of `voters` voters.
pub fn quorum(voters: u64) -> usize {
    voters as usize / 2 + 1
}

/// The highest index held by a quorum, given every voter's last held index.
pub fn quorum_index(held: &[u64], voters: u64) -> u64 {
    let mut v = held.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v[quorum(voters) - 1]
}

impl Plan {
    /// Draws a scenario for a cluster of `voters`: the followers first take entries in a random
    /// order, then one of the followers ahead of the quorum moves past the others ahead of it,
    /// then a follower behind catches up to between them. Noise steps are mixed in.
    pub fn draw(rng: &mut ChaCha8Rng, voters: u64) -> Plan {
        if voters >= 8 {
            return Plan::draw_ties(rng, voters);
        }
        let q = quorum(voters);
        let ahead = q - 2; // followers strictly ahead of the quorum index, besides the leader
        let writes: u64 = rng.gen_range(14..=20);
        // Indices 0 (membership) and 1 (the leader's blank entry) come first; writes follow.
        let last = 1 + writes;
        let mut ids: Vec<MemNodeId> = (1..voters).collect();
        ids.shuffle(rng);
        let (front, rest) = ids.split_at(ahead);
        let at_quorum = rest[0];
        let catcher = rest[1];
        let second = rest[2];
        let others = &rest[3..];
        // The quorum index g, then distinct values above it for the followers in front.
        let g: u64 = rng.gen_range(2..=4);
        let mut front_values: Vec<u64> = (0..ahead)
            .map(|i| g + 1 + i as u64 * 2 + rng.gen_range(0..=1))
            .collect();
        front_values.sort_unstable_by(|a, b| b.cmp(a));
        let mut steps: Vec<(MemNodeId, u64)> = Vec::new();
        let mut first: Vec<(MemNodeId, u64)> = front
            .iter()
            .copied()
            .zip(front_values.iter().copied())
            .collect();
        first.push((at_quorum, g));
        for &o in others {
            if rng.gen_bool(0.5) {
                first.push((o, rng.gen_range(2..=g)));
            }
        }
        first.shuffle(rng);
        steps.extend(first);
        // The last follower in front (the lowest) moves past all the others in front.
        let top = front_values[0];
        let jumper = *front.last().unwrap();
        let jump = top + rng.gen_range(2..=4);
        steps.push((jumper, jump));
        // A follower behind catches up to a value above the second-highest front value and
        // at most the jumper's.
        let floor = front_values[0];
        let c1 = rng.gen_range(floor + 1..=jump);
        steps.push((catcher, c1));
        // A second one behind catches up to between the highest front value and the first.
        steps.push((second, rng.gen_range(floor + 1..=c1)));
        // Everyone catches up at the end, in a random order.
        let mut end: Vec<MemNodeId> = (1..voters).collect();
        end.shuffle(rng);
        steps.extend(end.into_iter().map(|id| (id, last)));
        Plan {
            voters,
            writes,
            steps,
        }
    }
}

impl Plan {
    /// Draws a scenario for 8 or 9 voters in which followers tie: three take index 1 one after
    /// the other, the last of them goes on to index 2, then two more followers take index 1
    /// and then index 2 in turn. The rest catch up at the end, in a random order.
    pub fn draw_ties(rng: &mut ChaCha8Rng, voters: u64) -> Plan {
        let writes: u64 = rng.gen_range(14..=20);
        let last = 1 + writes;
        let mut ids: Vec<MemNodeId> = (1..voters).collect();
        ids.shuffle(rng);
        let (a1, a2, j, b, c) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
        let mut steps = vec![
            (a1, 1),
            (a2, 1),
            (j, 1),
            (j, 2),
            (b, 1),
            (c, 1),
            (b, 2),
            (c, 2),
        ];
        let mut end: Vec<MemNodeId> = (1..voters).collect();
        end.shuffle(rng);
        steps.extend(end.into_iter().map(|id| (id, last)));
        Plan {
            voters,
            writes,
            steps,
        }
    }
}

/// What the leader had committed after each step, against what a quorum held.
#[derive(Clone, Debug)]
pub struct Step {
    pub follower: MemNodeId,
    pub index: u64,
    pub committed: Option<u64>,
    pub quorum_holds: u64,
}

pub async fn run(plan: &Plan, note: &mut dyn FnMut(&Step)) -> Vec<Step> {
    let config = Config {
        cluster_name: "oracle".to_string(),
        heartbeat_interval: 5000,
        election_timeout_min: 10000,
        election_timeout_max: 12000,
        enable_tick: false,
        enable_heartbeat: false,
        // One entry per AppendEntries: each acknowledgement moves a follower by one index, in
        // an order the steps alone decide.
        max_payload_entries: 1,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let net = Followers::default();
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let leader = Raft::new(0, config, net.clone(), log_store, sm)
        .await
        .unwrap();
    let voters: BTreeSet<MemNodeId> = (0..plan.voters).collect();
    leader.initialize(voters).await.unwrap();
    let wait = |secs| leader.wait(Some(Duration::from_secs(secs)));
    wait(5)
        .state(ServerState::Leader, "node 0 leads")
        .await
        .unwrap();
    for serial in 1..=plan.writes {
        let req = ClientRequest {
            client: "c".to_string(),
            serial,
            status: format!("v{serial}"),
        };
        // Answers are not awaited: the writes wait for commits the steps bring.
        let _pending = leader.client_write_ff(req).await.unwrap();
    }
    let last = 1 + plan.writes;
    wait(5)
        .log_index(Some(last), "writes appended")
        .await
        .unwrap();

    let mut held: BTreeMap<MemNodeId, u64> = (1..plan.voters).map(|id| (id, 0)).collect();
    let mut out = Vec::new();
    // Every follower first takes the initial membership entry, in id order.
    let initial = (1..plan.voters).map(|id| (id, 0));
    for (follower, index) in initial.chain(plan.steps.iter().copied()) {
        net.raise(follower, index);
        wait(5)
            .metrics(
                |m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&follower).cloned())
                        .flatten()
                        .map(|l| l.index)
                        >= Some(index)
                },
                format!("node {follower} holds {index}"),
            )
            .await
            .unwrap();
        held.insert(follower, index);
        let committed = leader
            .with_raft_state(|st| st.committed.map(|l| l.index))
            .await
            .unwrap();
        let mut all: Vec<u64> = held.values().copied().collect();
        all.push(last);
        let step = Step {
            follower,
            index,
            committed,
            quorum_holds: quorum_index(&all, plan.voters),
        };
        note(&step);
        out.push(step);
    }
    leader.shutdown().await.unwrap();
    out
}

fn check(plan: &Plan, steps: &[Step]) {
    for s in steps {
        // Index 0 is the initial membership, from no leader's term: nothing commits before the
        // leader's own first entry, index 1, is held by a quorum.
        if s.quorum_holds < 1 {
            assert!(
                s.committed <= Some(0),
                "committed {:?} with nothing held by a quorum",
                s.committed
            );
            continue;
        }
        assert!(
            s.committed <= Some(s.quorum_holds),
            "{}-voter cluster: after node {} took entries up to {}, the leader committed {:?} while a quorum held only up to {}; steps {:?}",
            plan.voters,
            s.follower,
            s.index,
            s.committed,
            s.quorum_holds,
            steps
        );
        assert_eq!(
            s.committed,
            Some(s.quorum_holds),
            "{}-voter cluster: after node {} took entries up to {}, a quorum held up to {} but the leader committed {:?}",
            plan.voters,
            s.follower,
            s.index,
            s.quorum_holds,
            s.committed
        );
    }
}

/// Plans run per cluster size and seed.
pub const PLANS: u64 = 3;

async fn check_size(voters: u64) {
    for k in 0..PLANS {
        let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ (voters << 8) ^ k);
        let plan = Plan::draw(&mut rng, voters);
        let steps = run(&plan, &mut |_| {}).await;
        check(&plan, &steps);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_needs_a_quorum_six_or_seven_voters() {
    let voters = if seed() % 2 == 0 { 6 } else { 7 };
    check_size(voters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_needs_a_quorum_eight_or_nine_voters() {
    let voters = if seed() % 2 == 0 { 8 } else { 9 };
    check_size(voters).await;
}
