//! Hidden oracle: every gossip message a node sends fits in one UDP datagram (65,507 bytes of
//! payload), whatever the number of nodes, the length of their ids, the amount of state they
//! publish and how much of the cluster the node that opened the exchange already knows; and a
//! node that only ever opens exchanges itself still receives the whole cluster state through the
//! answers it gets.
//!
//! The nodes are real chitchat servers talking through an in-memory network that behaves like
//! UDP: a message larger than one datagram is lost. The test decides which exchange happens when,
//! so a seed fixes the cluster (size, id lengths, state), the order members first meet the seed
//! node, and which nodes then open exchanges with it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{Socket, Transport};
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, ChitchatMessage,
    FailureDetectorConfig, Serializable,
};
use tokio::sync::mpsc;

/// Largest UDP payload over IPv4.
pub const UDP_PAYLOAD_LIMIT: usize = 65_507;

/// Exchanges a node opens with the seed node before it must know the whole cluster.
pub const ROUNDS: usize = 8;

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED_CAFE_F00D_D00D)
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

    pub fn text(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..len).map(|_| ALPHABET[(self.next() % 62) as usize] as char).collect()
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
    pub len: usize,
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
        let len = msg.serialized_len();
        let sent = Sent { from: self.addr, to, kind: kind(&msg), len, msg };
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
        for _ in 0..5_000 {
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

    /// Hands the message to its destination and waits until that node has handled it.
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
        for _ in 0..5_000 {
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
}

impl Node {
    pub fn addr(&self) -> SocketAddr {
        self.id.gossip_advertise_addr
    }

    /// What this node knows: node id -> key -> value (live keys only).
    pub async fn view(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.handle
            .with_chitchat(|chitchat| {
                chitchat
                    .node_states()
                    .iter()
                    .map(|(id, state)| {
                        let kvs = state
                            .key_values()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect::<BTreeMap<_, _>>();
                        (id.node_id.clone(), kvs)
                    })
                    .collect()
            })
            .await
    }
}

pub async fn spawn_node(
    net: &Net,
    name: &str,
    node_id: String,
    index: usize,
    kvs: Vec<(String, String)>,
) -> Node {
    let addr: SocketAddr = ([10, 4, (index / 200) as u8, (index % 200 + 1) as u8], 7280).into();
    let id = ChitchatId::new(node_id, 1_717_000_000 + index as u64, addr);
    let config = ChitchatConfig {
        chitchat_id: id.clone(),
        cluster_id: "prod".to_string(),
        // Periodic gossip never fires during a test: the test opens every exchange itself.
        gossip_interval: Duration::from_secs(3_600),
        listen_addr: addr,
        seed_nodes: Vec::new(),
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3_600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let handle = spawn_chitchat(config, kvs, net).await.expect("spawn chitchat");
    Node { name: name.to_string(), id, handle }
}

/// One message of an exchange, and whether it got through.
#[derive(Debug, Clone)]
pub struct Step {
    pub from: String,
    pub to: String,
    pub kind: &'static str,
    pub len: usize,
    pub delivered: bool,
}

/// One Syn / SynAck / Ack exchange opened by `a` with `b`; a message over the UDP limit is lost
/// and ends the exchange.
pub async fn exchange(net: &Net, a: &Node, b: &Node) -> Vec<Step> {
    let mut steps = Vec::new();
    net.clear();
    a.handle.gossip(b.addr()).expect("gossip command");
    let plan = [(a, b, "Syn"), (b, a, "SynAck"), (a, b, "Ack")];
    for (from, to, kind) in plan {
        let Some(sent) = net.take(from.addr(), to.addr(), kind).await else {
            panic!("{} never sent the {kind} to {}", from.name, to.name);
        };
        let fits = sent.len <= UDP_PAYLOAD_LIMIT;
        steps.push(Step {
            from: from.name.clone(),
            to: to.name.clone(),
            kind,
            len: sent.len,
            delivered: fits,
        });
        if !fits {
            break;
        }
        assert!(net.deliver(sent).await, "{} stopped handling messages", to.name);
    }
    steps
}

/// A cluster of members that all published some metadata, and a seed node that knows them all.
pub struct ClusterSpec {
    pub members: usize,
    pub id_len: usize,
    pub keys_per_member: usize,
    pub value_len: usize,
    /// Order in which the seed node first opens an exchange with each member.
    pub meet_order: Vec<usize>,
    /// Members that later open exchanges with the seed node themselves.
    pub probes: Vec<usize>,
    pub seed: u64,
}

/// A seeded cluster; `large` picks more members with longer ids (a bigger digest).
pub fn cluster_spec(seed: u64, large: bool) -> ClusterSpec {
    let mut rng = Rng::new(seed);
    let (members, id_len) = if large {
        (rng.range(40, 56), rng.range(150, 220))
    } else {
        (rng.range(20, 40), rng.range(60, 160))
    };
    let value_len = rng.range(300, 900);
    // At least ~110 KB of random metadata: more than one datagram even once compressed.
    let keys_per_member = 110_000 / (members * value_len) + 1;
    let mut meet_order: Vec<usize> = (0..members).collect();
    rng.shuffle(&mut meet_order);
    // Members met early know little of the cluster; one of them and one met later probe.
    let probes = vec![meet_order[rng.range(0, members / 4)], meet_order[rng.range(members / 4, members / 2)]];
    ClusterSpec { members, id_len, keys_per_member, value_len, meet_order, probes, seed }
}

/// The cluster of the report: 32 searchers with ~100-byte ids and a few KB of metadata each.
pub fn reported_spec() -> ClusterSpec {
    ClusterSpec {
        members: 32,
        id_len: 96,
        keys_per_member: 4,
        value_len: 900,
        meet_order: (0..32).collect(),
        probes: Vec::new(),
        seed: 7,
    }
}

pub fn member_name(i: usize) -> String {
    format!("searcher-{i:02}")
}

pub struct Cluster {
    pub net: Net,
    pub seed_node: Node,
    pub members: Vec<Node>,
    pub truth: BTreeMap<String, BTreeMap<String, String>>,
    pub bootstrap: Vec<Step>,
}

pub async fn build_cluster(spec: &ClusterSpec) -> Cluster {
    let mut rng = Rng::new(spec.seed ^ 0xC1A5);
    let net = Net::default();
    let seed_node = spawn_node(&net, "seed", pad("seed-node", spec.id_len, &mut rng), 0, Vec::new()).await;
    let mut members = Vec::new();
    let mut truth = BTreeMap::new();
    for i in 0..spec.members {
        let node_id = pad(&format!("searcher-{i:02}"), spec.id_len, &mut rng);
        let mut kvs: Vec<(String, String)> = (0..spec.keys_per_member)
            .map(|k| (format!("index_shards_{k}"), rng.text(spec.value_len)))
            .collect();
        // Member i updated its load i times, so members reach distinct max versions.
        kvs.extend((0..=i).map(|n| ("load".to_string(), format!("{n}"))));
        truth.insert(node_id.clone(), kvs.iter().cloned().collect::<BTreeMap<_, _>>());
        members.push(spawn_node(&net, &member_name(i), node_id, i + 1, kvs).await);
    }
    // The seed node opens one exchange with every member: it learns each member's state from
    // the member's answer.
    let mut bootstrap = Vec::new();
    for &i in &spec.meet_order {
        bootstrap.extend(exchange(&net, &seed_node, &members[i]).await);
    }
    Cluster { net, seed_node, members, truth, bootstrap }
}

fn pad(prefix: &str, len: usize, rng: &mut Rng) -> String {
    let mut id = format!("{prefix}.");
    let rest = len.saturating_sub(id.len());
    id.push_str(&rng.text(rest).to_lowercase());
    id
}

/// Keys of `truth` that `view` is missing or holds with another value.
pub fn missing(
    truth: &BTreeMap<String, BTreeMap<String, String>>,
    view: &BTreeMap<String, BTreeMap<String, String>>,
) -> usize {
    truth
        .iter()
        .flat_map(|(node, kvs)| kvs.iter().map(move |(k, v)| (node, k, v)))
        .filter(|(node, k, v)| view.get(*node).and_then(|kvs| kvs.get(*k)) != Some(*v))
        .count()
}

/// A node opens `ROUNDS` exchanges with the seed node; returns every step and the keys it
/// misses before the first round and after each round.
pub async fn probe(cluster: &Cluster, node: &Node) -> (Vec<Step>, Vec<usize>) {
    let mut steps = Vec::new();
    let mut missing_after = vec![missing(&cluster.truth, &node.view().await)];
    for _ in 0..ROUNDS {
        steps.extend(exchange(&cluster.net, node, &cluster.seed_node).await);
        missing_after.push(missing(&cluster.truth, &node.view().await));
    }
    (steps, missing_after)
}

fn check_steps(what: &str, steps: &[Step]) {
    for step in steps {
        assert!(
            step.len <= UDP_PAYLOAD_LIMIT,
            "{what}: {} -> {} {} is {} bytes, over the {UDP_PAYLOAD_LIMIT}-byte UDP payload limit",
            step.from,
            step.to,
            step.kind,
            step.len
        );
    }
}

async fn check_cluster(spec: ClusterSpec) {
    let cluster = build_cluster(&spec).await;
    check_steps("bootstrap", &cluster.bootstrap);
    let total_keys: usize = cluster.truth.values().map(|kvs| kvs.len()).sum();
    assert_eq!(
        missing(&cluster.truth, &cluster.seed_node.view().await),
        0,
        "the seed node should know every member after meeting them (test setup)"
    );

    // A brand new node whose only contact is the seed node.
    let mut rng = Rng::new(spec.seed ^ 0x7017);
    let joiner_id = pad("searcher-new", spec.id_len, &mut rng);
    let joiner = spawn_node(
        &cluster.net,
        "joiner",
        joiner_id,
        spec.members + 1,
        vec![("grpc_addr".to_string(), "10.4.9.9:7281".to_string())],
    )
    .await;
    let mut probers: Vec<&Node> = vec![&joiner];
    probers.extend(spec.probes.iter().map(|&i| &cluster.members[i]));

    for node in probers {
        let (steps, missing_after) = probe(&cluster, node).await;
        check_steps(&node.name, &steps);
        for round in 1..missing_after.len() {
            assert!(
                missing_after[round - 1] == 0 || missing_after[round] < missing_after[round - 1],
                "{}: exchange {round} with the seed node brought no new state although the node \
                 still missed keys (missing before and after each round: {missing_after:?})",
                node.name
            );
        }
        assert_eq!(
            missing_after.last().copied(),
            Some(0),
            "{} opened {ROUNDS} exchanges with the seed node and still misses keys \
             (missing after each round: {missing_after:?}, of {total_keys})",
            node.name
        );
    }
    // The seed node learned the joiner's own key from its Ack.
    let seed_view = cluster.seed_node.view().await;
    assert_eq!(
        seed_view.get(&joiner.id.node_id).and_then(|kvs| kvs.get("grpc_addr")).map(String::as_str),
        Some("10.4.9.9:7281"),
        "the seed node never received the joiner's state"
    );
}

#[tokio::test]
async fn joiner_of_reported_cluster_gets_answers() {
    check_cluster(ClusterSpec { probes: vec![0, 16], ..reported_spec() }).await;
}

#[tokio::test]
async fn seeded_clusters_answers_fit_one_datagram() {
    let base = seed();
    for round in 0..3u64 {
        check_cluster(cluster_spec(base.wrapping_mul(1_000).wrapping_add(round), round == 0)).await;
    }
}
