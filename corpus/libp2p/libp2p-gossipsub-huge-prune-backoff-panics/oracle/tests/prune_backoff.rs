//! A victim gossipsub node V, one or two honest gossipsub peers H1.., and a peer X that speaks
//! the gossipsub wire protocol directly (hand-encoded RPC frames over a `/meshsub/1.1.0` stream),
//! so it can send a PRUNE carrying any backoff a remote implementation might send.
//!
//! The property: whatever backoff a peer's PRUNE carries, the node that receives it never panics
//! (not while handling it, not in a later heartbeat, not when that peer grafts again), it does
//! not graft the pruning peer on that topic again during the test window (a backoff far longer
//! than the window is honoured, not dropped), the pruning peer is out of its mesh, and the node
//! keeps exchanging messages with its honest peers afterwards.
//!
//! The seeded test runs four rounds: a backoff just short of the largest one the clock can
//! represent with a heartbeat slack of a second or more, the same kind of backoff with peer
//! scoring on and X grafting again right after its PRUNE, a backoff the clock cannot represent
//! at all, and an ordinary long backoff. `symptom_scenario` is the reported run, which the bundle
//! generator replays.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::{poll_fn, Future},
    panic::{catch_unwind, AssertUnwindSafe},
    pin::pin,
    sync::{Arc, Mutex},
    task::Poll,
    time::{Duration, Instant},
};

use futures::{channel::mpsc, AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p_core::{transport::MemoryTransport, upgrade::Version, Multiaddr, Transport};
use libp2p_gossipsub as gossipsub;
use libp2p_identity::{Keypair, PeerId};
use libp2p_swarm::{StreamProtocol, Swarm, SwarmEvent};

const TOPIC: &str = "blocks";
const MESHSUB: StreamProtocol = StreamProtocol::new("/meshsub/1.1.0");

/// The backoff X puts in its PRUNE.
#[derive(Clone, Copy, Debug)]
pub enum Backoff {
    /// Several entries for the topic, from `spread` seconds below the largest backoff the
    /// monotonic clock can still add to "now" up to two above it (those two overflow).
    NearMax { spread: u64, descending: bool },
    /// A backoff the clock cannot add to "now" at all.
    Unrepresentable(u64),
    /// An ordinary, long backoff.
    Plain(u64),
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub heartbeat_ms: u64,
    pub backoff_slack: u32,
    pub prune_backoff_ms: u64,
    pub scoring: bool,
    pub backoff: Backoff,
    /// X sends a GRAFT for the topic right after its PRUNE.
    pub graft_after: bool,
    /// Each PRUNE entry goes in its own RPC frame.
    pub split: bool,
    pub honest: usize,
}

/// What a run saw, for the checks and for the bundle.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Steps in the order they happened (names, not peer ids).
    pub log: Vec<String>,
    /// The victim's panic message, if it panicked.
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

/// What X saw on the streams the victim opened to it.
#[derive(Debug, Default)]
struct RawSeen {
    grafts: usize,
    prunes: usize,
    subscribed: bool,
    log: Vec<String>,
}

// ---- minimal protobuf encoding of gossipsub RPC frames ----

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn field_bytes(num: u64, data: &[u8], out: &mut Vec<u8>) {
    varint(num << 3 | 2, out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

fn field_varint(num: u64, v: u64, out: &mut Vec<u8>) {
    varint(num << 3, out);
    varint(v, out);
}

fn frame(rpc: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    varint(rpc.len() as u64, &mut out);
    out.extend(rpc);
    out
}

fn rpc_subscribe(topic: &str) -> Vec<u8> {
    let mut sub = Vec::new();
    field_varint(1, 1, &mut sub);
    field_bytes(2, topic.as_bytes(), &mut sub);
    let mut rpc = Vec::new();
    field_bytes(1, &sub, &mut rpc);
    frame(rpc)
}

fn rpc_prune(topic: &str, backoffs: &[u64]) -> Vec<u8> {
    let mut control = Vec::new();
    for &b in backoffs {
        let mut prune = Vec::new();
        field_bytes(1, topic.as_bytes(), &mut prune);
        field_varint(3, b, &mut prune);
        field_bytes(4, &prune, &mut control);
    }
    let mut rpc = Vec::new();
    field_bytes(3, &control, &mut rpc);
    frame(rpc)
}

fn rpc_graft(topic: &str) -> Vec<u8> {
    let mut graft = Vec::new();
    field_bytes(1, topic.as_bytes(), &mut graft);
    let mut control = Vec::new();
    field_bytes(3, &graft, &mut control);
    let mut rpc = Vec::new();
    field_bytes(3, &control, &mut rpc);
    frame(rpc)
}

enum Val<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(buf: &[u8]) -> Vec<(u64, Val<'_>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let Some(key) = read_varint(buf, &mut pos) else { break };
        match key & 7 {
            0 => match read_varint(buf, &mut pos) {
                Some(v) => out.push((key >> 3, Val::Int(v))),
                None => break,
            },
            2 => {
                let Some(len) = read_varint(buf, &mut pos) else { break };
                let end = pos + len as usize;
                if end > buf.len() {
                    break;
                }
                out.push((key >> 3, Val::Bytes(&buf[pos..end])));
                pos = end;
            }
            1 => pos += 8,
            5 => pos += 4,
            _ => break,
        }
    }
    out
}

fn topic_of(buf: &[u8]) -> String {
    fields(buf)
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (1, Val::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Records what one RPC frame from the victim carries.
fn observe(rpc: &[u8], seen: &mut RawSeen) {
    for (n, v) in fields(rpc) {
        let Val::Bytes(b) = v else { continue };
        match n {
            1 => {
                let sub = fields(b).iter().any(|(n, v)| *n == 1 && matches!(v, Val::Int(1)));
                let t = fields(b)
                    .into_iter()
                    .find_map(|(n, v)| match (n, v) {
                        (2, Val::Bytes(t)) => Some(String::from_utf8_lossy(t).into_owned()),
                        _ => None,
                    })
                    .unwrap_or_default();
                if t == TOPIC && sub {
                    seen.subscribed = true;
                }
            }
            3 => {
                for (cn, cv) in fields(b) {
                    let Val::Bytes(c) = cv else { continue };
                    match cn {
                        3 if topic_of(c) == TOPIC => {
                            seen.grafts += 1;
                            seen.log.push(format!("V -> X: GRAFT {TOPIC}"));
                        }
                        4 if topic_of(c) == TOPIC => {
                            seen.prunes += 1;
                            seen.log.push(format!("V -> X: PRUNE {TOPIC}"));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

async fn read_frames(mut stream: libp2p_swarm::Stream, seen: Arc<Mutex<RawSeen>>) {
    loop {
        let mut len = 0u64;
        let mut shift = 0;
        loop {
            let mut b = [0u8; 1];
            if stream.read_exact(&mut b).await.is_err() {
                return;
            }
            len |= u64::from(b[0] & 0x7f) << shift;
            shift += 7;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        let mut buf = vec![0u8; len as usize];
        if stream.read_exact(&mut buf).await.is_err() {
            return;
        }
        observe(&buf, &mut seen.lock().unwrap());
    }
}

/// The largest whole number of seconds the monotonic clock can add to "now".
pub fn max_backoff_secs() -> u64 {
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if Instant::now().checked_add(Duration::from_secs(mid)).is_some() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

fn transport(key: &Keypair) -> libp2p_core::transport::Boxed<(PeerId, libp2p_core::muxing::StreamMuxerBox)> {
    MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(libp2p_plaintext::Config::new(key))
        .multiplex(libp2p_yamux::Config::default())
        .boxed()
}

fn key(index: u8) -> Keypair {
    Keypair::ed25519_from_bytes([index + 1; 32]).expect("key")
}

fn swarm_config() -> libp2p_swarm::Config {
    libp2p_swarm::Config::with_tokio_executor().with_idle_connection_timeout(Duration::from_secs(60))
}

fn gossip_node(index: u8, plan: &Plan) -> Swarm<gossipsub::Behaviour> {
    let key = key(index);
    let peer_id = key.public().to_peer_id();
    let hb = Duration::from_millis(plan.heartbeat_ms);
    let cfg = gossipsub::ConfigBuilder::default()
        .heartbeat_initial_delay(hb)
        .heartbeat_interval(hb)
        .backoff_slack(plan.backoff_slack)
        .prune_backoff(Duration::from_millis(plan.prune_backoff_ms))
        .build()
        .expect("config");
    let behaviour = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key.clone()), cfg)
        .expect("behaviour");
    Swarm::new(transport(&key), behaviour, peer_id, swarm_config())
}

fn topic() -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(TOPIC)
}

pub fn name(i: usize) -> String {
    if i == 0 {
        "V".into()
    } else {
        format!("H{i}")
    }
}

struct Net {
    /// The victim; `None` once it panicked.
    victim: Option<Swarm<gossipsub::Behaviour>>,
    honest: Vec<Swarm<gossipsub::Behaviour>>,
    /// payload -> nodes (0 = victim, 1.. honest) whose application got it
    received: BTreeMap<String, BTreeSet<usize>>,
    crash: Option<String>,
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

impl Net {
    fn record(&mut self, i: usize, ev: SwarmEvent<gossipsub::Event>) {
        if let SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) = ev {
            let payload = String::from_utf8_lossy(&message.data).into_owned();
            self.received.entry(payload).or_default().insert(i);
        }
    }

    /// Drives the victim and the honest nodes until `until` holds or `limit` elapses.
    async fn pump(&mut self, limit: Duration, mut until: impl FnMut(&Net) -> bool) -> bool {
        let mut sleep = pin!(tokio::time::sleep(limit));
        // gossipsub re-arms its heartbeat timer without polling it, so it only fires when the
        // swarm is polled for another reason; a busy node always is. A steady tick stands in
        // for that traffic.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        poll_fn(|cx| {
            while tick.poll_tick(cx).is_ready() {}
            loop {
                let mut progressed = false;
                let mut events = Vec::new();
                if let Some(v) = self.victim.as_mut() {
                    loop {
                        match catch_unwind(AssertUnwindSafe(|| v.poll_next_unpin(cx))) {
                            Ok(Poll::Ready(Some(ev))) => events.push(ev),
                            Ok(_) => break,
                            Err(p) => {
                                self.crash = Some(panic_text(p));
                                break;
                            }
                        }
                    }
                }
                if self.crash.is_some() {
                    self.victim = None;
                }
                progressed |= !events.is_empty();
                for ev in events {
                    self.record(0, ev);
                }
                for i in 0..self.honest.len() {
                    while let Poll::Ready(Some(ev)) = self.honest[i].poll_next_unpin(cx) {
                        progressed = true;
                        self.record(i + 1, ev);
                    }
                }
                if until(self) {
                    return Poll::Ready(true);
                }
                if !progressed {
                    break;
                }
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            Poll::Pending
        })
        .await
    }

    fn victim_mesh(&self) -> BTreeSet<PeerId> {
        match &self.victim {
            Some(v) => v.behaviour().mesh_peers(&topic().hash()).copied().collect(),
            None => BTreeSet::new(),
        }
    }
}

/// The backoff entries X sends, computed right before sending.
fn entries(b: Backoff) -> Vec<u64> {
    match b {
        Backoff::NearMax { spread, descending } => {
            let top = max_backoff_secs();
            let mut v: Vec<u64> = (top - spread..=top + 2).collect();
            if descending {
                v.reverse();
            }
            v
        }
        Backoff::Unrepresentable(v) | Backoff::Plain(v) => vec![v],
    }
}

fn describe(b: Backoff) -> String {
    match b {
        Backoff::NearMax { spread, .. } => format!(
            "{} entries for `{TOPIC}`, backoffs from {spread} s below to 2 s above the largest the local monotonic clock can add to now (about 2^63 s)",
            spread + 3
        ),
        Backoff::Unrepresentable(v) => format!("backoff {v} s (more than the monotonic clock can represent)"),
        Backoff::Plain(v) => format!("backoff {v} s"),
    }
}

/// Runs one plan on a fresh network whose victim listens on `/memory/port`.
pub async fn run(plan: &Plan, port: u64) -> Outcome {
    let mut out = Outcome::default();
    let hb = Duration::from_millis(plan.heartbeat_ms);
    let mut victim = gossip_node(0, plan);
    let victim_id = *victim.local_peer_id();
    if plan.scoring {
        victim
            .behaviour_mut()
            .with_peer_score(gossipsub::PeerScoreParams::default(), gossipsub::PeerScoreThresholds::default())
            .expect("scoring");
    }
    let addr: Multiaddr = format!("/memory/{port}").parse().unwrap();
    victim.listen_on(addr.clone()).expect("listen");
    victim.behaviour_mut().subscribe(&topic()).expect("subscribe");

    let mut honest = Vec::new();
    for i in 1..=plan.honest {
        let mut h = gossip_node(i as u8, plan);
        h.behaviour_mut().subscribe(&topic()).expect("subscribe");
        h.dial(addr.clone()).expect("dial");
        honest.push(h);
    }
    let honest_ids: Vec<PeerId> = honest.iter().map(|h| *h.local_peer_id()).collect();

    // X: a bare swarm whose streams we write by hand.
    let xkey = key(100);
    let x_id = xkey.public().to_peer_id();
    let mut xs = Swarm::new(transport(&xkey), libp2p_stream::Behaviour::new(), x_id, swarm_config());
    let mut control = xs.behaviour().new_control();
    let mut incoming = control.accept(MESHSUB).expect("accept");
    xs.dial(addr.clone()).expect("dial");
    tokio::spawn(async move {
        loop {
            let _ = xs.select_next_some().await;
        }
    });
    let seen = Arc::new(Mutex::new(RawSeen::default()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Some((_peer, stream)) = incoming.next().await {
            tokio::spawn(read_frames(stream, seen2.clone()));
        }
    });
    let (tx, mut rx) = mpsc::unbounded::<Vec<u8>>();
    tokio::spawn(async move {
        let mut stream = loop {
            match control.open_stream(victim_id, MESHSUB).await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        while let Some(bytes) = rx.next().await {
            if stream.write_all(&bytes).await.is_err() || stream.flush().await.is_err() {
                return;
            }
        }
    });

    let mut net = Net { victim: Some(victim), honest, received: BTreeMap::new(), crash: None };
    out.log.push(format!(
        "V: heartbeat {} ms, backoff_slack {}, prune_backoff {} ms, peer scoring {}; peers {} gossipsub node(s) and X",
        plan.heartbeat_ms,
        plan.backoff_slack,
        plan.prune_backoff_ms,
        if plan.scoring { "on" } else { "off" },
        plan.honest
    ));
    tx.unbounded_send(rpc_subscribe(TOPIC)).unwrap();
    out.log.push(format!("X -> V: SUBSCRIBE {TOPIC}"));

    let ids = honest_ids.clone();
    let s = seen.clone();
    let ready = net
        .pump(Duration::from_secs(10), move |net| {
            let mesh = net.victim_mesh();
            ids.iter().all(|h| mesh.contains(h)) && mesh.contains(&x_id) && s.lock().unwrap().grafts >= 1
        })
        .await;
    assert!(ready, "setup: the victim did not graft X and its honest peers (crash: {:?})", net.crash);
    out.log.append(&mut seen.lock().unwrap().log);
    out.log.push(format!("V's mesh for `{TOPIC}`: X and {} honest peer(s)", plan.honest));

    // The PRUNE, then maybe a GRAFT.
    let values = entries(plan.backoff);
    if plan.split {
        for &v in &values {
            tx.unbounded_send(rpc_prune(TOPIC, &[v])).unwrap();
        }
    } else {
        tx.unbounded_send(rpc_prune(TOPIC, &values)).unwrap();
    }
    out.log.push(format!(
        "X -> V: PRUNE {} ({})",
        describe(plan.backoff),
        if plan.split { "one RPC per entry" } else { "one RPC" }
    ));
    if plan.graft_after {
        tx.unbounded_send(rpc_graft(TOPIC)).unwrap();
        out.log.push(format!("X -> V: GRAFT {TOPIC}"));
    }

    // Long enough for every backoff slot of the victim's heartbeat to come round, and more.
    let slots = plan.prune_backoff_ms / plan.heartbeat_ms + u64::from(plan.backoff_slack) + 1;
    let window = hb * (slots as u32 + 4);
    net.pump(window, |net| net.crash.is_some()).await;
    out.log.append(&mut seen.lock().unwrap().log);
    if let Some(c) = &net.crash {
        out.log.push(format!("V panicked: {c}"));
        out.crash = Some(c.clone());
        out.violations.push(format!("the victim panicked: {c}"));
        return out;
    }
    out.log.push(format!("V still running after {} heartbeats", slots + 4));

    let grafts = seen.lock().unwrap().grafts;
    if grafts != 1 {
        out.violations.push(format!(
            "the victim sent X {grafts} GRAFTs for `{TOPIC}`; after X's PRUNE it must not graft X again within the backoff"
        ));
    }
    if net.victim_mesh().contains(&x_id) {
        out.violations.push(format!("X is still in the victim's mesh for `{TOPIC}` after its PRUNE"));
    }

    // The victim keeps working with its honest peers.
    let res = net.honest[0].behaviour_mut().publish(topic(), "from-h1");
    if res.is_err() {
        out.violations.push(format!("H1 could not publish: {res:?}"));
    }
    let res = net.victim.as_mut().unwrap().behaviour_mut().publish(topic(), "from-v");
    if res.is_err() {
        out.violations.push(format!("the victim could not publish: {res:?}"));
    }
    let n = plan.honest;
    net.pump(hb * 20, move |net| {
        net.crash.is_some()
            || (net.received.get("from-h1").is_some_and(|r| r.contains(&0))
                && net.received.get("from-v").is_some_and(|r| r.len() == n))
    })
    .await;
    out.log.append(&mut seen.lock().unwrap().log);
    if let Some(c) = &net.crash {
        out.log.push(format!("V panicked: {c}"));
        out.crash = Some(c.clone());
        out.violations.push(format!("the victim panicked: {c}"));
        return out;
    }
    let h = net.received.get("from-h1").cloned().unwrap_or_default();
    let v = net.received.get("from-v").cloned().unwrap_or_default();
    out.log.push(format!("H1 publishes: V {}", if h.contains(&0) { "receives it" } else { "never receives it" }));
    out.log.push(format!("V publishes: {} of {n} honest peer(s) receive it", v.len()));
    if !h.contains(&0) {
        out.violations.push("a message H1 published after the PRUNE never reached the victim".into());
    }
    if v.len() != n {
        out.violations.push(format!("a message the victim published after the PRUNE reached {} of {n} honest peers", v.len()));
    }
    let grafts = seen.lock().unwrap().grafts;
    if grafts != 1 {
        out.violations.push(format!("by the end the victim had sent X {grafts} GRAFTs for `{TOPIC}`"));
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// The reported run: 250 ms heartbeat with a slack of four heartbeats, scoring off, one honest
/// peer; X prunes with backoffs at the edge of what the clock can represent. The bundle
/// generator prints its log.
pub fn symptom_plan() -> Plan {
    Plan {
        heartbeat_ms: 250,
        backoff_slack: 4,
        prune_backoff_ms: 2000,
        scoring: false,
        backoff: Backoff::NearMax { spread: 12, descending: false },
        graft_after: false,
        split: false,
        honest: 1,
    }
}

pub fn symptom_scenario() -> Outcome {
    runtime().block_on(run(&symptom_plan(), 4200))
}

/// splitmix64, so plans depend on the seed alone.
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn coin(&mut self) -> bool {
        self.next() % 2 == 0
    }
}

/// The four plans a seed stands for.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut m = Mix(seed);
    let mut v = Vec::new();
    // Near the clock's limit, slack of at least a second, scoring off.
    let hb = [100, 125, 200, 250][m.range(0, 3) as usize];
    let slack = (1000 / hb) as u32 + m.range(0, 2) as u32;
    v.push(Plan {
        heartbeat_ms: hb,
        backoff_slack: slack,
        prune_backoff_ms: hb * m.range(4, 10),
        scoring: false,
        backoff: Backoff::NearMax { spread: m.range(12, 30), descending: m.coin() },
        graft_after: m.coin(),
        split: m.coin(),
        honest: m.range(1, 2) as usize,
    });
    // Near the limit, scoring on, X grafts again at once; a short slack.
    let hb = [100, 200][m.range(0, 1) as usize];
    v.push(Plan {
        heartbeat_ms: hb,
        backoff_slack: 1,
        prune_backoff_ms: hb * m.range(4, 10),
        scoring: true,
        backoff: Backoff::NearMax { spread: m.range(12, 30), descending: m.coin() },
        graft_after: true,
        split: m.coin(),
        honest: m.range(1, 2) as usize,
    });
    // A backoff the clock cannot represent at all.
    let huge = [u64::MAX, i64::MAX as u64 + 1, u64::MAX - m.range(0, 1 << 40)][m.range(0, 2) as usize];
    v.push(Plan {
        heartbeat_ms: 100,
        backoff_slack: 1,
        prune_backoff_ms: 100 * m.range(4, 10),
        scoring: m.coin(),
        backoff: Backoff::Unrepresentable(huge),
        graft_after: m.coin(),
        split: false,
        honest: m.range(1, 2) as usize,
    });
    // An ordinary long backoff (a day to a year).
    v.push(Plan {
        heartbeat_ms: 100,
        backoff_slack: 1,
        prune_backoff_ms: 100 * m.range(4, 10),
        scoring: m.coin(),
        backoff: Backoff::Plain(m.range(86_400, 31_536_000)),
        graft_after: m.coin(),
        split: false,
        honest: m.range(1, 2) as usize,
    });
    v
}

#[test]
fn symptom() {
    let out = symptom_scenario();
    assert!(out.violations.is_empty(), "{:#?}\n{:#?}", out.violations, out.log);
}

#[test]
fn peer_backoff_never_crashes_and_is_honoured() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for (k, plan) in plans(seed).iter().enumerate() {
        let out = runtime().block_on(run(plan, 5000 + k as u64));
        assert!(
            out.violations.is_empty(),
            "seed {seed}, plan {plan:?}:\n{:#?}\n{:#?}",
            out.violations,
            out.log
        );
    }
}

