//! Hidden oracle: snapshot requests, repeated or not, with or without writes in between, never
//! stop the node. Each request that finds new applied entries moves the snapshot up to them, one
//! that finds none changes nothing, the snapshot never goes back, and the node keeps serving
//! writes.
//!
//! The seed picks how many writes come first, how many rounds follow, how many writes and
//! snapshot requests each round makes and how long it idles afterwards; at least one round asks
//! again with nothing applied since the last snapshot, and new writes and a request follow it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, LogId, Raft, RaftMetrics, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

/// No peer is ever reachable; a one-voter cluster never needs one.
pub struct NoPeers;

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, openraft::error::InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> NoPeers {
        NoPeers
    }
}

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule forever.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x005e_ed5a_a95)
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

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    Write,
    Snapshot,
    Idle(u64),
}

/// The symptom's run: one write, a snapshot request, a pause, a second request with nothing
/// applied since the first snapshot, one more write.
pub fn symptom_plan() -> Vec<Step> {
    vec![Step::Write, Step::Snapshot, Step::Idle(100), Step::Snapshot, Step::Write]
}

pub fn seeded_plan(seed: u64) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut steps = vec![Step::Write; 1 + rng.below(4) as usize];
    let rounds = 3 + rng.below(3);
    let repeat = 1 + rng.below(rounds - 1);
    for round in 0..rounds {
        let writes = if round == 0 || round == repeat { 0 } else { rng.below(3) };
        steps.extend(std::iter::repeat(Step::Write).take(writes as usize));
        steps.extend(std::iter::repeat(Step::Snapshot).take(1 + rng.below(2) as usize));
        steps.push(Step::Idle([0, 50, 400, 2000][rng.below(4) as usize]));
    }
    // New entries after the repeated request must still make it into a snapshot.
    steps.extend(std::iter::repeat(Step::Write).take(1 + rng.below(2) as usize));
    steps.push(Step::Snapshot);
    steps.push(Step::Write);
    steps
}

/// One step as the node answered it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub step: Step,
    /// The call's result, `Debug`-formatted (empty for idling).
    pub result: String,
    pub ok: bool,
    pub metrics: RaftMetrics<MemNodeId, ()>,
}

/// Runs `steps` on a fresh one-voter cluster (node 1). A snapshot request is followed by a wait
/// for the snapshot to reach `last_applied` when there is something new to cover, else by
/// 300 ms, so that the state machine's answer has been handled before the next step.
pub async fn run(steps: &[Step]) -> Vec<Seen> {
    let config = Config { cluster_name: "oracle".to_string(), enable_heartbeat: false, enable_tick: false, ..Default::default() };
    let config = Arc::new(config.validate().unwrap());
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let raft = Raft::new(1, config, NoPeers, log_store, sm).await.unwrap();
    raft.initialize(BTreeSet::from([1u64])).await.unwrap();
    raft.wait(Some(Duration::from_secs(5))).state(ServerState::Leader, "node 1 leads").await.unwrap();
    let mut seen = Vec::new();
    let mut serial = 0;
    for (i, step) in steps.iter().enumerate() {
        let (result, ok) = match step {
            Step::Write => {
                serial += 1;
                let req = ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") };
                match tokio::time::timeout(Duration::from_secs(5), raft.client_write(req)).await {
                    Ok(Ok(resp)) => {
                        let applied = raft.wait(Some(Duration::from_secs(5))).applied_index(Some(resp.log_id.index), "applied").await;
                        (format!("Ok(log_id {})", resp.log_id), applied.is_ok())
                    }
                    Ok(Err(e)) => (format!("Err({e:?})"), false),
                    Err(_) => ("timed out after 5 s".to_string(), false),
                }
            }
            Step::Snapshot => {
                let res = raft.trigger().snapshot().await;
                let ok = res.is_ok();
                if steps.get(i + 1) != Some(&Step::Snapshot) {
                    let m = raft.metrics().borrow().clone();
                    match m.last_applied {
                        Some(applied) if m.snapshot < Some(applied) => {
                            let _ = raft.wait(Some(Duration::from_secs(5))).snapshot(applied, "snapshot").await;
                        }
                        _ => tokio::time::sleep(Duration::from_millis(300)).await,
                    }
                }
                (format!("{res:?}"), ok)
            }
            Step::Idle(ms) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                (String::new(), true)
            }
        };
        seen.push(Seen { step: *step, result, ok, metrics: raft.metrics().borrow().clone() });
    }
    seen
}

fn judge(steps: &[Step], seen: &[Seen]) {
    let mut snapshot: Option<LogId<MemNodeId>> = None;
    for (i, s) in seen.iter().enumerate() {
        let at = format!("step {i} {:?} of {steps:?}", s.step);
        assert!(s.ok, "{at} failed: {}", s.result);
        let m = &s.metrics;
        assert_eq!(m.state, ServerState::Leader, "{at}: node left the leader state: {m:?}");
        assert!(m.snapshot >= snapshot, "{at}: snapshot went back from {snapshot:?} to {:?}", m.snapshot);
        snapshot = m.snapshot;
        if s.step == Step::Snapshot && steps.get(i + 1) != Some(&Step::Snapshot) {
            assert_eq!(m.snapshot, m.last_applied, "{at}: the snapshot request did not cover the applied entries: {m:?}");
        }
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn repeated_snapshot_requests_keep_the_node_serving() {
    let steps = seeded_plan(seed());
    let seen = run(&steps).await;
    judge(&steps, &seen);
}
