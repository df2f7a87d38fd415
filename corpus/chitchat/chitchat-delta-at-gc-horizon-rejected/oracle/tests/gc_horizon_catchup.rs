//! Hidden oracle: a node that already holds every version of a peer's state up to that peer's GC
//! horizon (its max version for the peer equals the peer's last GC version) takes the peer's
//! updates as ordinary updates: whatever order the digests, the answers and the owner's garbage
//! collection interleave in, it never rejects them, never resets what it holds about the peer
//! (no catch-up callback), never crashes, and ends up with exactly the owner's live keys and max
//! version. A node that really is behind the horizon is still reset, once.
//!
//! The nodes are real chitchat servers on an in-memory network; the test decides which message
//! is delivered when. The owner garbage-collects on its own gossip ticks (short grace period); the
//! two readers never do during a test (long grace period), which is the window in which a reader
//! knows a deleted key's tombstone that the owner has already collected.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{Socket, Transport};
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, ChitchatMessage,
    FailureDetectorConfig,
};
use tokio::sync::mpsc;

/// Grace period after which the owner garbage-collects its tombstones.
pub const OWNER_GRACE: Duration = Duration::from_millis(600);

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x6C0F_FEE0_D00D_1234)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    pub fn coin(&mut self) -> bool {
        self.next() % 2 == 0
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

pub fn kind(msg: &ChitchatMessage) -> &'static str {
    match msg {
        ChitchatMessage::Syn { .. } => "Syn",
        ChitchatMessage::SynAck { .. } => "SynAck",
        ChitchatMessage::Ack { .. } => "Ack",
        ChitchatMessage::BadCluster => "BadCluster",
    }
}

/// One message a node handed to its socket.
#[derive(Debug)]
pub struct Sent {
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub kind: &'static str,
    pub msg: ChitchatMessage,
}

#[derive(Default)]
struct NetInner {
    inboxes: HashMap<SocketAddr, mpsc::UnboundedSender<(SocketAddr, ChitchatMessage)>>,
    outbox: VecDeque<Sent>,
    delivered: HashMap<SocketAddr, u64>,
    taken: HashMap<SocketAddr, u64>,
    idle_at: HashMap<SocketAddr, u64>,
}

/// In-memory network: what nodes send is held until the test delivers or drops it.
#[derive(Clone, Default)]
pub struct Net {
    inner: Arc<Mutex<NetInner>>,
}

struct NetSocket {
    addr: SocketAddr,
    net: Net,
    rx: mpsc::UnboundedReceiver<(SocketAddr, ChitchatMessage)>,
}

#[async_trait]
impl Transport for Net {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().unwrap().inboxes.insert(listen_addr, tx);
        Ok(Box::new(NetSocket { addr: listen_addr, net: self.clone(), rx }))
    }
}

#[async_trait]
impl Socket for NetSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let sent = Sent { from: self.addr, to, kind: kind(&msg), msg };
        self.net.inner.lock().unwrap().outbox.push_back(sent);
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        {
            // The server asks for the next message only once it has handled the previous one.
            let mut inner = self.net.inner.lock().unwrap();
            let taken = inner.taken.get(&self.addr).copied().unwrap_or(0);
            inner.idle_at.insert(self.addr, taken);
        }
        let message = self.rx.recv().await.ok_or_else(|| anyhow::anyhow!("network closed"))?;
        *self.net.inner.lock().unwrap().taken.entry(self.addr).or_default() += 1;
        Ok(message)
    }
}

impl Net {
    pub fn clear(&self) {
        self.inner.lock().unwrap().outbox.clear();
    }

    /// Waits for a message of `kind` from `from` to `to` and removes it from the network.
    pub async fn take(&self, from: SocketAddr, to: SocketAddr, kind: &str) -> Option<Sent> {
        for _ in 0..3_000 {
            {
                let mut inner = self.inner.lock().unwrap();
                if let Some(pos) =
                    inner.outbox.iter().position(|s| s.from == from && s.to == to && s.kind == kind)
                {
                    return inner.outbox.remove(pos);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// Hands the message to its destination and waits until that node has handled it; false
    /// when the node stopped handling messages (its server task died).
    pub async fn deliver(&self, sent: Sent) -> bool {
        let expected = {
            let mut inner = self.inner.lock().unwrap();
            let Some(tx) = inner.inboxes.get(&sent.to) else { return false };
            if tx.send((sent.from, sent.msg)).is_err() {
                return false;
            }
            let delivered = inner.delivered.entry(sent.to).or_default();
            *delivered += 1;
            *delivered
        };
        for _ in 0..3_000 {
            if self.inner.lock().unwrap().idle_at.get(&sent.to).copied().unwrap_or(0) >= expected {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        false
    }
}

pub struct Node {
    pub name: String,
    pub id: ChitchatId,
    pub handle: ChitchatHandle,
    /// How many times the catch-up callback ran on this node.
    pub catchups: Arc<AtomicUsize>,
}

/// What a node holds about one node: last GC version, max version, live keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub last_gc_version: u64,
    pub max_version: u64,
    pub live: BTreeMap<String, String>,
}

impl Node {
    pub fn addr(&self) -> SocketAddr {
        self.id.gossip_advertise_addr
    }

    /// What this node holds about `of` (its own state when `of` is itself).
    pub async fn held(&self, of: &ChitchatId) -> Option<Held> {
        let of = of.clone();
        self.handle
            .with_chitchat(move |chitchat| {
                chitchat.node_state(&of).map(|state| Held {
                    last_gc_version: state.last_gc_version(),
                    max_version: state.max_version(),
                    live: state.key_values().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                })
            })
            .await
    }

    pub async fn set(&self, key: &str, value: &str) {
        let (key, value) = (key.to_string(), value.to_string());
        self.handle.with_chitchat(move |c| c.self_node_state().set(&key, &value)).await;
    }

    pub async fn delete(&self, key: &str) {
        let key = key.to_string();
        self.handle.with_chitchat(move |c| c.self_node_state().delete(&key)).await;
    }
}

pub async fn spawn_node(
    net: &Net,
    name: &str,
    index: u8,
    gossip_interval: Duration,
    grace: Duration,
    kvs: Vec<(String, String)>,
) -> Node {
    let addr: SocketAddr = ([10, 2, 0, index], 7280).into();
    let id = ChitchatId::new(name.to_string(), 1_717_000_000 + index as u64, addr);
    let catchups = Arc::new(AtomicUsize::new(0));
    let counter = catchups.clone();
    let config = ChitchatConfig {
        chitchat_id: id.clone(),
        cluster_id: "prod".to_string(),
        gossip_interval,
        listen_addr: addr,
        seed_nodes: Vec::new(),
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: grace,
        catchup_callback: Some(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })),
        extra_liveness_predicate: None,
    };
    let handle = spawn_chitchat(config, kvs, net).await.expect("spawn chitchat");
    Node { name: name.to_string(), id, handle, catchups }
}

/// Something the test saw happen, for the bundle.
#[derive(Debug, Clone)]
pub enum Event {
    Msg { from: String, to: String, kind: &'static str, text: String, delivered: bool },
    Note(String),
    Log(String),
}

pub struct Trace {
    pub events: Vec<Event>,
    pub record_messages: bool,
    /// Log lines the nodes wrote since the last call (the bundle generator installs one).
    pub logs: Option<fn() -> Vec<String>>,
}

impl Trace {
    pub fn quiet() -> Trace {
        Trace { events: Vec::new(), record_messages: false, logs: None }
    }
}

impl Trace {
    pub fn note(&mut self, text: String) {
        self.events.push(Event::Note(text));
    }

    fn msg(&mut self, from: &Node, to: &Node, sent: &Sent, delivered: bool) {
        if self.record_messages {
            self.events.push(Event::Msg {
                from: from.name.clone(),
                to: to.name.clone(),
                kind: sent.kind,
                text: format!("{:?}", sent.msg),
                delivered,
            });
        }
    }
}

/// Takes the next message of `kind` from `from` to `to`.
async fn take(net: &Net, from: &Node, to: &Node, kind: &str) -> Sent {
    match net.take(from.addr(), to.addr(), kind).await {
        Some(sent) => sent,
        None => panic!("{} never sent the {kind} to {}", from.name, to.name),
    }
}

async fn deliver(net: &Net, trace: &mut Trace, from: &Node, to: &Node, sent: Sent) {
    trace.msg(from, to, &sent, true);
    assert!(
        net.deliver(sent).await,
        "{} stopped handling gossip (its server task died) on a message from {}",
        to.name,
        from.name
    );
    if let Some(logs) = trace.logs {
        trace.events.extend(logs().into_iter().map(Event::Log));
    }
}

/// One full Syn / SynAck / Ack exchange opened by `a` with `b`.
pub async fn exchange(net: &Net, trace: &mut Trace, a: &Node, b: &Node) {
    net.clear();
    a.handle.gossip(b.addr()).expect("gossip command");
    let syn = take(net, a, b, "Syn").await;
    deliver(net, trace, a, b, syn).await;
    let syn_ack = take(net, b, a, "SynAck").await;
    deliver(net, trace, b, a, syn_ack).await;
    let ack = take(net, a, b, "Ack").await;
    deliver(net, trace, a, b, ack).await;
}

/// How the reader's view of the owner meets the owner's garbage collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The reader got the owner's last tombstone before the owner collected it, then the owner
    /// publishes new keys and the two gossip (directly or through the relay).
    CaughtUp,
    /// The reader asks the owner with a digest that misses the last tombstone; while the answer
    /// (a reset) is in flight, the reader gets that tombstone from the relay.
    StaleAnswer,
    /// The reader misses the last tombstone and really is behind the owner's horizon: it must be
    /// reset, once.
    Behind,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub shape: Shape,
    /// Keys the owner publishes at start.
    pub keys: usize,
    /// Keys the owner deletes (the last operation before its GC is always a delete).
    pub deletes: usize,
    /// Whether the owner updates a key between two deletes.
    pub update_between: bool,
    /// Keys the owner publishes after its GC.
    pub new_keys: usize,
    /// CaughtUp: the tombstones reach the reader through the relay.
    pub via_relay: bool,
    /// CaughtUp: the reader opens the final exchange (else the owner does).
    pub reader_opens: bool,
}

pub fn reported_plan() -> Plan {
    Plan {
        shape: Shape::CaughtUp,
        keys: 3,
        deletes: 1,
        update_between: false,
        new_keys: 1,
        via_relay: false,
        reader_opens: true,
    }
}

pub fn seeded_plans(seed: u64) -> Vec<Plan> {
    let mut rng = Rng::new(seed);
    let random = |shape: Shape, rng: &mut Rng| {
        let deletes = rng.range(1, 2);
        Plan {
            shape,
            keys: deletes + rng.range(1, 3),
            deletes,
            update_between: deletes > 1 && rng.coin(),
            new_keys: match shape {
                Shape::CaughtUp => rng.range(1, 3),
                _ => rng.range(0, 2),
            },
            via_relay: rng.coin(),
            reader_opens: rng.coin(),
        }
    };
    let mut plans = vec![
        random(Shape::CaughtUp, &mut rng),
        random(Shape::CaughtUp, &mut rng),
        random(Shape::StaleAnswer, &mut rng),
        random(Shape::Behind, &mut rng),
    ];
    // The stale answer must both exist with no new key (its max version is below the reader's)
    // and with new keys, across seeds; pick one per seed.
    if seed % 2 == 0 {
        plans[2].new_keys = 0;
    } else if plans[2].new_keys == 0 {
        plans[2].new_keys = 1;
    }
    rng.shuffle(&mut plans);
    plans
}

pub struct Run {
    pub net: Net,
    pub owner: Node,
    pub reader: Node,
    pub relay: Node,
    pub horizon: u64,
}

async fn wait_for_owner_gc(owner: &Node, horizon: u64) {
    for _ in 0..1_000 {
        if owner.held(&owner.id).await.map(|h| h.last_gc_version) == Some(horizon) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the owner never garbage-collected its tombstones up to version {horizon}");
}

/// Runs one plan; checks what the reader holds about the owner at the end.
pub async fn run_plan(plan: &Plan, trace: &mut Trace) -> Run {
    let net = Net::default();
    let hour = Duration::from_secs(3_600);
    let initial: Vec<(String, String)> =
        (0..plan.keys).map(|k| (format!("pipeline_{k}"), format!("shard-{k}-v1"))).collect();
    // Only the owner gossips (and garbage-collects) on its own, every 25 ms.
    let owner =
        spawn_node(&net, "indexer-1", 1, Duration::from_millis(25), OWNER_GRACE, initial).await;
    let reader = spawn_node(&net, "searcher-1", 2, hour, hour, Vec::new()).await;
    let relay = spawn_node(&net, "searcher-2", 3, hour, hour, Vec::new()).await;

    exchange(&net, trace, &reader, &owner).await;
    exchange(&net, trace, &relay, &owner).await;
    trace.note(format!("{} and {} hold the owner's {} keys", reader.name, relay.name, plan.keys));

    // The owner deletes keys; its last operation before GC is a delete.
    for d in 0..plan.deletes {
        if d > 0 && plan.update_between {
            owner.set(&format!("pipeline_{}", plan.keys - 1), "shard-moved").await;
        }
        owner.delete(&format!("pipeline_{d}")).await;
    }
    let horizon = owner.held(&owner.id).await.unwrap().max_version;
    trace.note(format!(
        "{} deletes {} key(s); its max version is now {horizon}",
        owner.name, plan.deletes
    ));

    // Who learns the tombstones before the owner collects them.
    exchange(&net, trace, &relay, &owner).await;
    if plan.shape == Shape::CaughtUp {
        if plan.via_relay {
            exchange(&net, trace, &reader, &relay).await;
        } else {
            exchange(&net, trace, &reader, &owner).await;
        }
        let held = reader.held(&owner.id).await.unwrap();
        assert_eq!(
            (held.last_gc_version, held.max_version),
            (0, horizon),
            "setup: the reader should hold the owner's state up to the last delete"
        );
    }

    wait_for_owner_gc(&owner, horizon).await;
    trace.note(format!(
        "{} garbage-collects its tombstones: last GC version {horizon}; the readers have not",
        owner.name
    ));
    for k in 0..plan.new_keys {
        owner.set(&format!("split_{k}"), &format!("split-{k}")).await;
    }
    if plan.new_keys > 0 {
        trace.note(format!("{} publishes {} new key(s)", owner.name, plan.new_keys));
    }

    match plan.shape {
        Shape::CaughtUp => {
            if plan.reader_opens {
                exchange(&net, trace, &reader, &owner).await;
            } else {
                exchange(&net, trace, &owner, &reader).await;
            }
        }
        Shape::StaleAnswer => {
            net.clear();
            reader.handle.gossip(owner.addr()).expect("gossip command");
            let syn = take(&net, &reader, &owner, "Syn").await;
            deliver(&net, trace, &reader, &owner, syn).await;
            let syn_ack = take(&net, &owner, &reader, "SynAck").await;
            trace.note(format!("the SynAck from {} is delayed", owner.name));
            // Meanwhile the reader gets the last tombstone from the relay.
            let mut side = Trace::quiet();
            if plan.reader_opens {
                exchange(&net, &mut side, &reader, &relay).await;
            } else {
                exchange(&net, &mut side, &relay, &reader).await;
            }
            let held = reader.held(&owner.id).await.unwrap();
            assert_eq!(held.max_version, horizon, "setup: the relay should bring the last delete");
            trace.note(format!(
                "{} gets the last tombstone from {}: it now holds the owner up to version {horizon}",
                reader.name, relay.name
            ));
            deliver(&net, trace, &owner, &reader, syn_ack).await;
            let ack = take(&net, &reader, &owner, "Ack").await;
            deliver(&net, trace, &reader, &owner, ack).await;
        }
        Shape::Behind => {
            exchange(&net, trace, &reader, &owner).await;
        }
    }
    Run { net, owner, reader, relay, horizon }
}

/// What the reader must hold after the plan, and after one more exchange.
pub async fn check_run(plan: &Plan, run: &Run, trace: &mut Trace) {
    let Run { net, owner, reader, relay, horizon } = run;
    let truth = owner.held(&owner.id).await.unwrap();
    let held = reader.held(&owner.id).await.unwrap();
    assert_eq!(
        held.live, truth.live,
        "{plan:?}: {} holds other keys for {} than the owner publishes \
         (reader holds last GC {} / max {}, owner {} / {})",
        reader.name, owner.name, held.last_gc_version, held.max_version, truth.last_gc_version,
        truth.max_version
    );
    let expected_catchups = if plan.shape == Shape::Behind { 1 } else { 0 };
    assert_eq!(
        reader.catchups.load(Ordering::SeqCst),
        expected_catchups,
        "{plan:?}: {} reset its state of {} (catch-up callback runs) although it held every \
         version up to the owner's GC horizon {horizon}: {expected_catchups} expected",
        reader.name,
        owner.name
    );
    if plan.shape != Shape::Behind {
        assert_eq!(
            held.max_version, truth.max_version,
            "{plan:?}: {} should hold {} up to its max version",
            reader.name, owner.name
        );
    }
    // Gossip keeps working: one more exchange and both readers hold exactly the owner's state.
    let side = &mut Trace::quiet();
    exchange(net, side, reader, owner).await;
    exchange(net, side, relay, owner).await;
    for node in [reader, relay] {
        let held = node.held(&owner.id).await.unwrap();
        assert_eq!(
            (held.max_version, &held.live),
            (truth.max_version, &truth.live),
            "{plan:?}: after one more exchange {} still does not hold {}'s state",
            node.name,
            owner.name
        );
    }
    assert_eq!(relay.catchups.load(Ordering::SeqCst), 0, "{plan:?}: the relay was reset");
    trace.note(format!(
        "{} holds {}'s {} live keys up to version {}",
        reader.name,
        owner.name,
        truth.live.len(),
        truth.max_version
    ));
}

pub async fn check_plan(plan: &Plan) {
    let mut trace = Trace::quiet();
    let run = run_plan(plan, &mut trace).await;
    check_run(plan, &run, &mut trace).await;
}

#[tokio::test]
async fn reader_caught_up_to_gc_horizon_takes_new_keys() {
    check_plan(&reported_plan()).await;
}

#[tokio::test]
async fn seeded_interleavings_of_gossip_and_gc() {
    let base = seed();
    for plan in seeded_plans(base) {
        check_plan(&plan).await;
    }
}


