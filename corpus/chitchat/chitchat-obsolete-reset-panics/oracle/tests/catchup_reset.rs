//! Hidden oracle: a catch-up reset is applied only when its (GC horizon, max version) pair is
//! newer than what the node holds about that peer; an obsolete one (such as an older GC horizon
//! with a higher max version) leaves the held state untouched, notifies no subscriber, and never
//! panics. A newer one replaces the held state exactly and notifies the keys it changed.
//!
//! The seeded test builds, per seed, several peers with their own write/delete histories, answers
//! taken from that history at various GC horizons and max versions (one of them always stale in
//! the way of the report), duplicates, and an arrival order, then checks every step.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitchat::{
    Chitchat, ChitchatConfig, ChitchatId, DeletionStatus, FailureDetectorConfig, ListenerHandle,
    VersionedValue,
};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

pub fn addr(host: u8, port: u16) -> SocketAddr {
    ([10, 0, 0, host], port).into()
}

/// The restarting node that applies catch-up answers (`indexer-1` of the report).
pub fn catchup_node() -> Chitchat {
    let chitchat_id = ChitchatId::new("indexer-1", 1717000000, addr(1, 7001));
    let config = ChitchatConfig {
        listen_addr: chitchat_id.gossip_advertise_addr,
        chitchat_id,
        cluster_id: "prod".to_string(),
        gossip_interval: Duration::from_millis(500),
        seed_nodes: vec!["10.0.0.2:7002".to_string()],
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let (_seeds_tx, seeds) = watch::channel(HashSet::new());
    Chitchat::with_chitchat_id_and_seeds(config, seeds, Vec::new())
}

pub fn set(key: &str, value: &str, version: u64) -> (String, VersionedValue) {
    (key.to_string(), VersionedValue { value: value.to_string(), version, status: DeletionStatus::Set })
}

/// One catch-up answer about one peer, as a peer's RPC returns it.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub source: String,
    pub key_values: Vec<(String, VersionedValue)>,
    pub max_version: u64,
    pub last_gc_version: u64,
}

impl Snapshot {
    pub fn apply(&self, chitchat: &mut Chitchat, peer: &ChitchatId) {
        chitchat.reset_node_state_if_update(
            peer,
            self.key_values.clone().into_iter(),
            self.max_version,
            self.last_gc_version,
        );
    }
}

/// The peer of the report, `searcher-3`.
pub fn reported_peer() -> ChitchatId {
    ChitchatId::new("searcher-3", 1717000042, addr(3, 7003))
}

/// The two answers of the report, in the order they were applied: the first has the newer GC
/// horizon (100) but the lower max version (80).
pub fn reported_snapshots() -> [Snapshot; 2] {
    [
        Snapshot {
            source: "via indexer-2".to_string(),
            key_values: vec![set("grpc_addr", "10.0.0.3:7281", 12), set("indexes", "logs,traces", 80)],
            max_version: 80,
            last_gc_version: 100,
        },
        Snapshot {
            source: "via searcher-4".to_string(),
            key_values: vec![set("grpc_addr", "10.0.0.3:7281", 12), set("indexes", "logs", 100)],
            max_version: 100,
            last_gc_version: 50,
        },
    ]
}

/// What the node holds about a peer: max version, GC horizon, and every key with
/// (value, version, tombstone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub max_version: u64,
    pub last_gc_version: u64,
    pub key_values: BTreeMap<String, (String, u64, bool)>,
}

impl Held {
    fn of_snapshot(s: &Snapshot) -> Held {
        Held {
            max_version: s.max_version,
            last_gc_version: s.last_gc_version,
            key_values: s
                .key_values
                .iter()
                .map(|(k, v)| (k.clone(), (v.value.clone(), v.version, v.is_deleted())))
                .collect(),
        }
    }

    fn pair(&self) -> (u64, u64) {
        (self.last_gc_version, self.max_version)
    }
}

/// The held state, or the empty state (0, 0) for a peer the node does not know.
pub fn held(chitchat: &Chitchat, peer: &ChitchatId) -> Held {
    chitchat
        .node_state(peer)
        .map(|s| Held {
            max_version: s.max_version(),
            last_gc_version: s.last_gc_version(),
            key_values: s
                .key_values_including_deleted()
                .map(|(k, v)| (k.to_string(), (v.value.clone(), v.version, v.is_deleted())))
                .collect(),
        })
        .unwrap_or_default()
}

/// Every key change notified to a subscriber: (node id, key, value).
pub type Events = Arc<Mutex<Vec<(String, String, String)>>>;

pub fn subscribe(chitchat: &Chitchat) -> (Events, ListenerHandle) {
    let events: Events = Arc::default();
    let sink = events.clone();
    let handle = chitchat.subscribe_event("", move |e| {
        sink.lock().unwrap().push((e.node.node_id.to_string(), e.key.to_string(), e.value.to_string()));
    });
    (events, handle)
}

/// One write of a peer's history: a value set, or a tombstone.
#[derive(Clone, Debug)]
pub struct Op {
    pub version: u64,
    pub key: String,
    pub value: String,
    pub deleted: bool,
}

pub struct Peer {
    pub id: ChitchatId,
    pub history: Vec<Op>,
    /// The one instant every tombstone of this peer carries, so answers compare equal.
    pub deleted_at: Instant,
}

impl Peer {
    /// The peer's state as a node that saw its history up to `max_version` and garbage-collected
    /// tombstones up to `last_gc_version` answers it (a GC horizon above the max version is a
    /// node that was itself reset and is still catching up).
    pub fn view(&self, source: String, last_gc_version: u64, max_version: u64) -> Snapshot {
        let mut latest: BTreeMap<&str, &Op> = BTreeMap::new();
        for op in self.history.iter().filter(|op| op.version <= max_version) {
            latest.insert(&op.key, op);
        }
        let key_values = latest
            .into_values()
            .filter(|op| !(op.deleted && op.version <= last_gc_version))
            .map(|op| {
                let status = if op.deleted { DeletionStatus::Deleted(self.deleted_at) } else { DeletionStatus::Set };
                (op.key.clone(), VersionedValue { value: op.value.clone(), version: op.version, status })
            })
            .collect();
        Snapshot { source, key_values, max_version, last_gc_version }
    }

    fn set_versions(&self) -> Vec<u64> {
        self.history.iter().filter(|op| !op.deleted).map(|op| op.version).collect()
    }

    fn delete_versions(&self) -> Vec<u64> {
        self.history.iter().filter(|op| op.deleted).map(|op| op.version).collect()
    }
}

/// One catch-up answer about `peers[peer]`.
pub struct Answer {
    pub peer: usize,
    pub snapshot: Snapshot,
}

pub struct Schedule {
    pub peers: Vec<Peer>,
    /// In arrival order.
    pub answers: Vec<Answer>,
}

fn history(rng: &mut Xoshiro256PlusPlus, keys: usize) -> Vec<Op> {
    let len = rng.random_range(8..40);
    let mut version = rng.random_range(0..5u64);
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let mut ops = Vec::new();
    for i in 0..len {
        version += rng.random_range(1..3u64);
        let key = format!("key-{}", rng.random_range(0..keys));
        let deleted = *live.get(&key).unwrap_or(&false) && rng.random_bool(0.35);
        live.insert(key.clone(), !deleted);
        let value = if deleted { String::new() } else { format!("value-{i}") };
        ops.push(Op { version, key, value, deleted });
    }
    ops
}

/// A random arrival order in which, for the same peer, an answer with a higher GC horizon and a
/// lower max version always comes before the other (the order of the report). The opposite order
/// has no single right answer, so it is not generated.
fn arrival_order(rng: &mut Xoshiro256PlusPlus, answers: &[Answer]) -> Vec<usize> {
    let before = |a: &Answer, b: &Answer| {
        a.peer == b.peer
            && a.snapshot.last_gc_version > b.snapshot.last_gc_version
            && a.snapshot.max_version < b.snapshot.max_version
    };
    let mut placed = vec![false; answers.len()];
    let mut order = Vec::new();
    while order.len() < answers.len() {
        let ready: Vec<usize> = (0..answers.len())
            .filter(|&i| !placed[i] && (0..answers.len()).all(|j| placed[j] || !before(&answers[j], &answers[i])))
            .collect();
        let pick = ready[rng.random_range(0..ready.len())];
        placed[pick] = true;
        order.push(pick);
    }
    order
}

/// Whether, replaying the order with "adopt an answer iff its (GC, max) pair is newer", some
/// answer arrives whose GC horizon is older and whose max version is higher than both the held max
/// version and the held GC horizon: the reported race.
fn has_stale_answer(answers: &[Answer], order: &[usize], peers: usize) -> bool {
    let mut pairs = vec![(0u64, 0u64); peers];
    order.iter().any(|&i| {
        let s = &answers[i].snapshot;
        let (gc, max) = pairs[answers[i].peer];
        if (s.last_gc_version, s.max_version) > (gc, max) && s.last_gc_version >= gc && s.max_version >= max {
            pairs[answers[i].peer] = (s.last_gc_version, s.max_version);
        }
        s.last_gc_version < gc && s.max_version > max && s.max_version > gc
    })
}

/// The scenario of one seed: 1 to 4 peers, each with 1 to 6 keys and a history of writes and
/// deletions, 2 to 7 answers per peer at random GC horizons and max versions (every answer's max
/// version is the version of a write it carries), duplicated answers, and an arrival order.
pub fn schedule(seed: u64) -> Schedule {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    loop {
        let peer_count = rng.random_range(1..5);
        let peers: Vec<Peer> = (0..peer_count)
            .map(|p| {
                let keys = rng.random_range(1..7);
                Peer {
                    id: ChitchatId::new(format!("searcher-{}", p + 3), 1717000000 + p as u64, addr(3 + p as u8, 7003)),
                    history: history(&mut rng, keys),
                    deleted_at: Instant::now(),
                }
            })
            .collect();
        let mut answers: Vec<Answer> = Vec::new();
        for (p, peer) in peers.iter().enumerate() {
            let sets = peer.set_versions();
            let deletes = peer.delete_versions();
            for a in 0..rng.random_range(2..8) {
                if a > 0 && rng.random_bool(0.2) {
                    let mut copy = answers[answers.len() - 1].snapshot.clone();
                    copy.source = format!("via node-{}", rng.random_range(0..40));
                    answers.push(Answer { peer: p, snapshot: copy });
                    continue;
                }
                let max = sets[rng.random_range(0..sets.len())];
                let gc = if deletes.is_empty() || rng.random_bool(0.25) {
                    0
                } else {
                    deletes[rng.random_range(0..deletes.len())]
                };
                let source = format!("via node-{}", rng.random_range(0..40));
                answers.push(Answer { peer: p, snapshot: peer.view(source, gc, max) });
            }
        }
        for _ in 0..20 {
            let order = arrival_order(&mut rng, &answers);
            if has_stale_answer(&answers, &order, peers.len()) {
                let mut slots: Vec<Option<Answer>> = answers.into_iter().map(Some).collect();
                let answers = order.iter().map(|&i| slots[i].take().unwrap()).collect();
                return Schedule { peers, answers };
            }
        }
    }
}

/// Applies one answer and checks what a correct node does with it; returns the failure, if any.
fn check_answer(chitchat: &mut Chitchat, events: &Events, peer: &ChitchatId, answer: &Snapshot) -> Result<(), String> {
    let before = held(chitchat, peer);
    let seen = events.lock().unwrap().len();
    let applied = panic::catch_unwind(AssertUnwindSafe(|| answer.apply(chitchat, peer)));
    if applied.is_err() {
        return Err(format!("panicked applying (gc {}, max {}) over held {:?}", answer.last_gc_version, answer.max_version, before.pair()));
    }
    let after = held(chitchat, peer);
    let notified: Vec<(String, String, String)> = events.lock().unwrap()[seen..].to_vec();
    let wanted = Held::of_snapshot(answer);
    let newer = wanted.pair() > before.pair()
        && wanted.last_gc_version >= before.last_gc_version
        && wanted.max_version >= before.max_version;
    if newer {
        if after != wanted {
            return Err(format!("newer answer {wanted:?} over {before:?} left {after:?}"));
        }
        let mut expected: Vec<(String, String, String)> = wanted
            .key_values
            .iter()
            .filter(|(k, (_, version, deleted))| !deleted && before.key_values.get(*k).is_none_or(|old| old.1 < *version))
            .map(|(k, (value, _, _))| (peer.node_id.to_string(), k.clone(), value.clone()))
            .collect();
        let mut got = notified.clone();
        expected.sort();
        got.sort();
        if got != expected {
            return Err(format!("newer answer notified {got:?}, expected {expected:?}"));
        }
    } else {
        if after != before {
            return Err(format!("obsolete answer (gc {}, max {}) changed {before:?} into {after:?}", answer.last_gc_version, answer.max_version));
        }
        if !notified.is_empty() {
            return Err(format!("obsolete answer (gc {}, max {}) notified {notified:?}", answer.last_gc_version, answer.max_version));
        }
    }
    Ok(())
}

/// Runs a seed's schedule, then one answer per peer newer than everything it saw (the node must
/// keep adopting updates afterwards). Returns the first failure.
pub fn run_schedule(schedule: &Schedule) -> Result<(), String> {
    let mut chitchat = catchup_node();
    let (events, _handle) = subscribe(&chitchat);
    for (step, answer) in schedule.answers.iter().enumerate() {
        let peer = &schedule.peers[answer.peer];
        check_answer(&mut chitchat, &events, &peer.id, &answer.snapshot)
            .map_err(|e| format!("answer {step} about {}: {e}", peer.id.node_id))?;
    }
    for peer in &schedule.peers {
        let last = peer.history.last().unwrap();
        let mut extended = Peer { id: peer.id.clone(), history: peer.history.clone(), deleted_at: peer.deleted_at };
        extended.history.push(Op { version: last.version + 1, key: "key-final".to_string(), value: "final".to_string(), deleted: false });
        let gc = peer.delete_versions().last().copied().unwrap_or(0);
        let fresh = extended.view("via a fresh peer".to_string(), gc, last.version + 1);
        check_answer(&mut chitchat, &events, &peer.id, &fresh).map_err(|e| format!("final answer about {}: {e}", peer.id.node_id))?;
    }
    Ok(())
}

#[test]
fn reported_stale_catchup_snapshot_is_ignored() {
    let mut chitchat = catchup_node();
    let (events, _handle) = subscribe(&chitchat);
    let peer = reported_peer();
    let [newer, stale] = reported_snapshots();
    newer.apply(&mut chitchat, &peer);
    let seen = events.lock().unwrap().len();
    stale.apply(&mut chitchat, &peer);

    let state = chitchat.node_state(&peer).expect("peer state");
    assert_eq!(state.last_gc_version(), 100);
    assert_eq!(state.max_version(), 80);
    assert_eq!(state.get("indexes"), Some("logs,traces"));
    assert_eq!(state.get_versioned("indexes").map(|v| v.version), Some(80));
    assert!(events.lock().unwrap()[seen..].is_empty(), "subscribers were told about the obsolete answer");
}

#[test]
fn stale_catchup_snapshot_with_newer_max_version_is_ignored() {
    let mut chitchat = catchup_node();
    let (events, _handle) = subscribe(&chitchat);
    let peer = reported_peer();
    chitchat.reset_node_state_if_update(&peer, vec![set("a", "1", 60)].into_iter(), 60, 40);
    chitchat.reset_node_state_if_update(&peer, vec![set("b", "2", 90)].into_iter(), 90, 30);

    let state = chitchat.node_state(&peer).expect("peer state");
    assert_eq!(state.last_gc_version(), 40);
    assert_eq!(state.max_version(), 60);
    assert_eq!(state.get("a"), Some("1"));
    assert_eq!(state.get("b"), None);
    let keys: Vec<String> = events.lock().unwrap().iter().map(|e| e.1.clone()).collect();
    assert_eq!(keys, ["a"]);
}

#[test]
fn seeded_catchup_answers_in_any_order() {
    let seed = seed();
    let schedule = schedule(seed);
    if let Err(e) = run_schedule(&schedule) {
        panic!("seed {seed}: {} peers, {} answers: {e}", schedule.peers.len(), schedule.answers.len());
    }
}
