//! Peers of one topic, each a `proto::topic::State`, run over a simulated network with a fixed
//! latency per link, in-order delivery on a link, and crashes: a crashed peer handles nothing
//! more, and each other peer learns of it (its connection closes) one link latency later.
//!
//! The overlay is a full mesh; a few warm-up broadcasts from one origin settle the broadcast tree,
//! so that one peer (the victim) receives the origin's messages from a single tree parent and only
//! hears announcements (IHave) from its other neighbours. Then the parent crashes while a burst of
//! messages is on its way, so the victim must pull the burst from the peers that announce it.
//!
//! The property: every peer that survives delivers every message of the burst exactly once, also
//! when the first peer that announced a message to it departs before it asks for the message, or
//! before it answers the request; a message it misses is requested from the next peer that
//! announces it, one request at a time (when the first announcer answers within the retry timeout,
//! only one request is sent per message); and the topic keeps working afterwards.
//! `reported_plan` is the reported run, which the bundle generator replays.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use iroh_gossip::proto::{
    topic::{Command, Config, Event, InEvent, Message, OutEvent, State, Timer},
    Scope,
};
use n0_future::time::{Duration, Instant};
use rand::{seq::SliceRandom, Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub type Peer = u64;

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// The hex form of a message's id, as the protocol's messages print it.
pub fn id_hex(content: &[u8]) -> String {
    hex::encode(blake3::hash(content).as_bytes())
}

/// The kind of a topic message, read from its printed form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gossip,
    IHave,
    Graft,
    Prune,
    Swarm,
}

pub fn kind(msg: &Message<Peer>) -> Kind {
    let text = format!("{msg:?}");
    if text.starts_with("Swarm(") {
        Kind::Swarm
    } else if text.starts_with("Gossip(Gossip(") {
        Kind::Gossip
    } else if text.starts_with("Gossip(IHave(") {
        Kind::IHave
    } else if text.starts_with("Gossip(Graft(") {
        Kind::Graft
    } else {
        Kind::Prune
    }
}

/// What happened to the watched messages, for the bundle.
#[derive(Clone, Debug)]
pub struct Line {
    pub at_ms: u64,
    pub text: String,
}

enum Ev {
    Deliver { from: Peer, to: Peer, msg: Message<Peer> },
    Timer { node: Peer, timer: Timer<Peer> },
    Disconnected { node: Peer, peer: Peer },
    Command { node: Peer, cmd: Command<Peer> },
    Crash { node: Peer },
}

pub struct Node {
    state: State<Peer, ChaCha8Rng>,
    pub alive: bool,
    /// Delivered messages: content and the neighbour it came from.
    pub delivered: Vec<(Bytes, Peer)>,
    pub neighbours: BTreeSet<Peer>,
    /// Graft requests this node sent, per message id: (time in ms, to whom).
    pub grafts: BTreeMap<String, Vec<(u64, Peer)>>,
    /// Graft retry timers this node handled for the watched messages.
    pub graft_timers: usize,
}

/// Crash `node` when `from` sends a message of `kind` to `to` (the first time), `delay_ms` later;
/// a negative delay counts back from when that message arrives.
#[derive(Clone, Debug)]
pub struct CrashTrigger {
    pub node: Peer,
    pub from: Peer,
    pub to: Peer,
    pub kind: Kind,
    pub delay_ms: i64,
}

pub struct Sim {
    start: Instant,
    now_us: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    pub nodes: BTreeMap<Peer, Node>,
    latency: BTreeMap<(Peer, Peer), u64>,
    notified: BTreeSet<(Peer, Peer)>,
    triggers: Vec<CrashTrigger>,
    /// Message ids (hex) to trace, with their names.
    pub watched: BTreeMap<String, String>,
    /// Peer names for the trace.
    pub names: BTreeMap<Peer, String>,
    pub trace: Option<Vec<Line>>,
}

fn link(a: Peer, b: Peer) -> (Peer, Peer) {
    (a.min(b), a.max(b))
}

impl Sim {
    pub fn new(peers: &[Peer], latency: BTreeMap<(Peer, Peer), u64>, seed: u64) -> Sim {
        let nodes = peers
            .iter()
            .map(|&p| {
                let rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(p));
                let node = Node {
                    state: State::with_rng(p, None, Config::default(), rng),
                    alive: true,
                    delivered: Vec::new(),
                    neighbours: BTreeSet::new(),
                    grafts: BTreeMap::new(),
                    graft_timers: 0,
                };
                (p, node)
            })
            .collect();
        let names = peers.iter().map(|&p| (p, format!("peer-{p}"))).collect();
        Sim {
            start: Instant::now(),
            now_us: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            latency,
            notified: BTreeSet::new(),
            triggers: Vec::new(),
            watched: BTreeMap::new(),
            names,
            trace: None,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.now_us / 1_000
    }

    fn lat_us(&self, a: Peer, b: Peer) -> u64 {
        self.latency.get(&link(a, b)).copied().unwrap_or(30) * 1_000
    }

    fn push(&mut self, at_us: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at_us, self.seq), ev);
    }

    pub fn name(&self, p: Peer) -> String {
        self.names.get(&p).cloned().unwrap_or_else(|| format!("peer-{p}"))
    }

    pub fn note(&mut self, text: String) {
        let at_ms = self.now_ms();
        if let Some(trace) = self.trace.as_mut() {
            trace.push(Line { at_ms, text });
        }
    }

    /// Names of the watched messages a printed message mentions.
    fn watched_in(&self, text: &str) -> Vec<String> {
        self.watched.iter().filter(|(id, _)| text.contains(id.as_str())).map(|(_, n)| n.clone()).collect()
    }

    pub fn add_trigger(&mut self, trigger: CrashTrigger) {
        self.triggers.push(trigger);
    }

    pub fn command_at(&mut self, at_ms: u64, node: Peer, cmd: Command<Peer>) {
        self.push(at_ms * 1_000, Ev::Command { node, cmd });
    }

    pub fn crash_at(&mut self, at_ms: u64, node: Peer) {
        self.push(at_ms * 1_000, Ev::Crash { node });
    }

    pub fn broadcast_at(&mut self, at_ms: u64, node: Peer, content: &str) {
        let data = Bytes::from(content.as_bytes().to_vec());
        self.command_at(at_ms, node, Command::Broadcast(data, Scope::Swarm));
    }

    pub fn run_until(&mut self, until_ms: u64) {
        let until_us = until_ms * 1_000;
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > until_us {
                break;
            }
            let ((at, _), ev) = entry.remove_entry();
            self.now_us = at;
            self.step(ev);
        }
        self.now_us = until_us;
    }

    fn step(&mut self, ev: Ev) {
        let (node, input) = match ev {
            Ev::Crash { node } => {
                self.crash(node);
                return;
            }
            Ev::Command { node, cmd } => (node, InEvent::Command(cmd)),
            Ev::Timer { node, timer } => {
                let text = format!("{timer:?}");
                let names = self.watched_in(&text);
                if text.contains("SendGraft") && !names.is_empty() {
                    if let Some(n) = self.nodes.get_mut(&node) {
                        n.graft_timers += 1;
                    }
                    if self.nodes.get(&node).is_some_and(|n| n.alive) {
                        let who = self.name(node);
                        self.note(format!("{who}: graft timer fires for {}", names.join(", ")));
                    }
                }
                (node, InEvent::TimerExpired(timer))
            }
            Ev::Disconnected { node, peer } => {
                if self.nodes.get(&node).is_some_and(|n| n.alive) {
                    let (who, gone) = (self.name(node), self.name(peer));
                    self.note(format!("{who}: connection to {gone} closed"));
                }
                (node, InEvent::PeerDisconnected(peer))
            }
            Ev::Deliver { from, to, msg } => {
                if !self.nodes.get(&to).is_some_and(|n| n.alive) {
                    if self.nodes.get(&from).is_some_and(|n| n.alive)
                        && self.notified.insert((from, to))
                    {
                        let at = self.now_us + self.lat_us(from, to);
                        self.push(at, Ev::Disconnected { node: from, peer: to });
                    }
                    return;
                }
                let text = format!("{msg:?}");
                let names = self.watched_in(&text);
                let k = kind(&msg);
                if !names.is_empty() && k != Kind::Swarm {
                    let (a, b) = (self.name(from), self.name(to));
                    self.note(format!("{a} -> {b} {k:?} [{}] arrives", names.join(", ")));
                }
                (to, InEvent::RecvMessage(from, msg))
            }
        };
        let now = self.start + Duration::from_micros(self.now_us);
        let Some(n) = self.nodes.get_mut(&node) else { return };
        if !n.alive {
            return;
        }
        let outs: Vec<OutEvent<Peer>> = n.state.handle(input, now).collect();
        // The state lists sends to several peers in hash-set order; sort them by destination so a
        // run is the same every time.
        let (mut sends, others): (Vec<_>, Vec<_>) =
            outs.into_iter().partition(|o| matches!(o, OutEvent::SendMessage(..)));
        sends.sort_by_key(|o| match o {
            OutEvent::SendMessage(to, _) => *to,
            _ => 0,
        });
        for out in others.into_iter().chain(sends) {
            self.out(node, out);
        }
    }

    fn out(&mut self, node: Peer, out: OutEvent<Peer>) {
        match out {
            OutEvent::SendMessage(to, msg) => {
                let k = kind(&msg);
                let text = format!("{msg:?}");
                let names = self.watched_in(&text);
                if k == Kind::Graft {
                    if let Some(pos) = text.find("MessageId(") {
                        let id = text[pos + 10..].chars().take(64).collect::<String>();
                        let at = self.now_ms();
                        let n = self.nodes.get_mut(&node).expect("sender exists");
                        n.grafts.entry(id).or_default().push((at, to));
                    }
                }
                if !names.is_empty() && k != Kind::Swarm {
                    let (a, b) = (self.name(node), self.name(to));
                    self.note(format!("{a} -> {b} {k:?} [{}] sent", names.join(", ")));
                }
                let lat = self.lat_us(node, to);
                let fired: Vec<CrashTrigger> = self
                    .triggers
                    .iter()
                    .filter(|t| t.from == node && t.to == to && t.kind == k)
                    .cloned()
                    .collect();
                self.triggers.retain(|t| !(t.from == node && t.to == to && t.kind == k));
                for t in fired {
                    let base = self.now_us as i64 + if t.delay_ms < 0 { lat as i64 } else { 0 };
                    let at = (base + t.delay_ms * 1_000).max(self.now_us as i64) as u64;
                    self.push(at, Ev::Crash { node: t.node });
                }
                let at = self.now_us + lat;
                self.push(at, Ev::Deliver { from: node, to, msg });
            }
            OutEvent::ScheduleTimer(delay, timer) => {
                let at = self.now_us + delay.as_micros() as u64;
                self.push(at, Ev::Timer { node, timer });
            }
            OutEvent::DisconnectPeer(peer) => {
                if self.notified.insert((peer, node)) {
                    let at = self.now_us + self.lat_us(node, peer);
                    self.push(at, Ev::Disconnected { node: peer, peer: node });
                }
            }
            OutEvent::EmitEvent(event) => match event {
                Event::NeighborUp(p) => {
                    self.nodes.get_mut(&node).expect("node").neighbours.insert(p);
                }
                Event::NeighborDown(p) => {
                    self.nodes.get_mut(&node).expect("node").neighbours.remove(&p);
                }
                Event::Received(msg) => {
                    let names = self.watched_in(&id_hex(&msg.content));
                    if !names.is_empty() {
                        let (a, b) = (self.name(node), self.name(msg.delivered_from));
                        self.note(format!("{a} delivers {} (from {b})", names.join(", ")));
                    }
                    let n = self.nodes.get_mut(&node).expect("node");
                    n.delivered.push((msg.content, msg.delivered_from));
                }
            },
            OutEvent::PeerData(..) => {}
        }
    }

    fn crash(&mut self, node: Peer) {
        let Some(n) = self.nodes.get_mut(&node) else { return };
        if !n.alive {
            return;
        }
        n.alive = false;
        let who = self.name(node);
        self.note(format!("{who} crashes"));
        let others: Vec<Peer> =
            self.nodes.iter().filter(|(p, n)| **p != node && n.alive).map(|(p, _)| *p).collect();
        for m in others {
            if self.notified.insert((m, node)) {
                let at = self.now_us + self.lat_us(node, m);
                self.push(at, Ev::Disconnected { node: m, peer: node });
            }
        }
    }

    /// How many times `node` delivered `content`.
    pub fn count(&self, node: Peer, content: &str) -> usize {
        self.nodes[&node].delivered.iter().filter(|(c, _)| c.as_ref() == content.as_bytes()).count()
    }
}

/// How the victim's tree parent and its first announcer fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The first peer that announces the burst to the victim crashes before the victim asks it.
    AnnouncerLeavesBeforeRequest,
    /// The victim asks the first announcer, which crashes before the request reaches it.
    AnnouncerLeavesBeforeAnswer,
    /// Nobody but the tree parent fails; every announcer is close to the victim.
    ParentOnly,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub peers: Vec<Peer>,
    pub origin: Peer,
    pub victim: Peer,
    pub parent: Peer,
    /// The peer whose announcement reaches the victim first.
    pub first: Peer,
    pub latency: BTreeMap<(Peer, Peer), u64>,
    pub fault: Fault,
    /// AnnouncerLeavesBeforeRequest: how long after sending its announcement the first
    /// announcer crashes.
    pub crash_after_ms: u64,
    /// Messages in the burst.
    pub burst: usize,
    pub seed: u64,
}

/// Builds a plan: peers 1..=n, the roles and latencies drawn from `rng` where given.
pub fn plan(rng: &mut ChaCha8Rng, fault: Fault, seed: u64) -> Plan {
    let n: u64 = rng.gen_range(5..=6);
    let mut peers: Vec<Peer> = (1..=n).collect();
    peers.shuffle(rng);
    let (origin, victim, parent, first) = (peers[0], peers[1], peers[2], peers[3]);
    let mut latency = BTreeMap::new();
    for (i, &a) in peers.iter().enumerate() {
        for &b in &peers[i + 1..] {
            latency.insert(link(a, b), rng.gen_range(25..=45));
        }
    }
    for &p in &peers {
        if p != origin && p != victim {
            latency.insert(link(origin, p), rng.gen_range(12..=15));
        }
    }
    latency.insert(link(origin, parent), rng.gen_range(8..=10));
    latency.insert(link(parent, victim), rng.gen_range(3..=6));
    let late = match fault {
        Fault::ParentOnly => 20..=45,
        _ => 250..=500,
    };
    for &p in &peers {
        if p != parent && p != victim && p != first {
            latency.insert(link(p, victim), rng.gen_range(late.clone()));
        }
    }
    latency.insert(link(origin, victim), rng.gen_range(250..=400));
    let first_lat = match fault {
        Fault::ParentOnly => rng.gen_range(8..=18),
        _ => rng.gen_range(30..=45),
    };
    latency.insert(link(first, victim), first_lat);
    peers.sort();
    Plan {
        peers,
        origin,
        victim,
        parent,
        first,
        latency,
        fault,
        crash_after_ms: rng.gen_range(1..=60),
        burst: rng.gen_range(1..=3),
        seed,
    }
}

/// The reported run: five peers; peer-4 hears the burst announced first by peer-5, which leaves.
pub fn reported_plan() -> Plan {
    let (origin, victim, parent, first) = (1, 4, 2, 5);
    let peers: Vec<Peer> = vec![1, 2, 3, 4, 5];
    let mut latency = BTreeMap::new();
    for &a in &peers {
        for &b in &peers {
            if a < b {
                latency.insert((a, b), 30);
            }
        }
    }
    latency.insert(link(origin, parent), 9);
    latency.insert(link(origin, 3), 13);
    latency.insert(link(origin, first), 12);
    latency.insert(link(parent, victim), 4);
    latency.insert(link(first, victim), 35);
    latency.insert(link(3, victim), 320);
    latency.insert(link(origin, victim), 280);
    Plan {
        peers,
        origin,
        victim,
        parent,
        first,
        latency,
        fault: Fault::AnnouncerLeavesBeforeRequest,
        crash_after_ms: 20,
        burst: 1,
        seed: 7,
    }
}

pub fn burst_content(i: usize) -> String {
    format!("burst-{i}")
}

pub const WARMUPS: usize = 3;
pub const FAULT_AT_MS: u64 = 2_000;
pub const AFTER_AT_MS: u64 = 5_000;
pub const END_MS: u64 = 8_000;

/// Runs a plan up to the end; the caller checks the outcome.
pub fn run(plan: &Plan, trace: bool) -> Sim {
    let mut sim = Sim::new(&plan.peers, plan.latency.clone(), plan.seed);
    if trace {
        sim.trace = Some(Vec::new());
    }
    for i in 0..plan.burst {
        let content = burst_content(i);
        sim.watched.insert(id_hex(content.as_bytes()), content);
    }
    // Every peer joins through every peer that started before it: a full mesh.
    let mut order = plan.peers.clone();
    order.retain(|p| *p != plan.origin);
    order.insert(0, plan.origin);
    for (i, &p) in order.iter().enumerate() {
        sim.command_at(10 * i as u64, p, Command::Join(order[..i].to_vec()));
    }
    sim.run_until(400);
    // A join's random walk can leave a pair unconnected: such a peer joins the other directly.
    for round in 1..=3u64 {
        for &p in &plan.peers {
            let missing: Vec<Peer> = plan
                .peers
                .iter()
                .copied()
                .filter(|q| *q != p && !sim.nodes[&p].neighbours.contains(q))
                .collect();
            if !missing.is_empty() {
                let at = sim.now_ms() + 1;
                sim.command_at(at, p, Command::Join(missing));
            }
        }
        sim.run_until(400 + 200 * round);
    }
    for &p in &plan.peers {
        let expected: BTreeSet<Peer> = plan.peers.iter().copied().filter(|q| *q != p).collect();
        assert_eq!(sim.nodes[&p].neighbours, expected, "setup: the overlay should be a full mesh");
    }
    for w in 0..WARMUPS {
        sim.broadcast_at(1_000 + 300 * w as u64, plan.origin, &format!("warm-up-{w}"));
    }
    sim.run_until(FAULT_AT_MS);
    let last = format!("warm-up-{}", WARMUPS - 1);
    let from = sim.nodes[&plan.victim].delivered.iter().find(|(c, _)| c.as_ref() == last.as_bytes());
    assert_eq!(
        from.map(|(_, p)| *p),
        Some(plan.parent),
        "setup: the victim should receive the origin's messages from its tree parent"
    );
    let (origin, parent) = (sim.name(plan.origin), sim.name(plan.parent));
    sim.note(format!("-- {parent} crashes; {origin} broadcasts the next message 1 ms later"));

    sim.crash_at(FAULT_AT_MS, plan.parent);
    for i in 0..plan.burst {
        sim.broadcast_at(FAULT_AT_MS + 1, plan.origin, &burst_content(i));
    }
    match plan.fault {
        Fault::AnnouncerLeavesBeforeRequest => sim.add_trigger(CrashTrigger {
            node: plan.first,
            from: plan.first,
            to: plan.victim,
            kind: Kind::IHave,
            delay_ms: plan.crash_after_ms as i64,
        }),
        Fault::AnnouncerLeavesBeforeAnswer => sim.add_trigger(CrashTrigger {
            node: plan.first,
            from: plan.victim,
            to: plan.first,
            kind: Kind::Graft,
            delay_ms: -1,
        }),
        Fault::ParentOnly => {}
    }
    sim.run_until(AFTER_AT_MS);
    sim.broadcast_at(AFTER_AT_MS, plan.origin, "after");
    sim.run_until(END_MS);
    sim
}

/// Checks what every surviving peer delivered, and how the victim asked for the burst.
pub fn check(plan: &Plan, sim: &Sim) {
    let survivors: Vec<Peer> =
        plan.peers.iter().copied().filter(|p| sim.nodes[p].alive && *p != plan.origin).collect();
    for &p in &survivors {
        for i in 0..plan.burst {
            let content = burst_content(i);
            assert_eq!(
                sim.count(p, &content),
                1,
                "{plan:?}: peer-{p} delivered {content} {} times; it was announced to it by peers \
                 that hold it",
                sim.count(p, &content)
            );
        }
        assert_eq!(
            sim.count(p, "after"),
            1,
            "{plan:?}: peer-{p} did not deliver the message broadcast after the burst exactly once"
        );
    }
    let victim = &sim.nodes[&plan.victim];
    for i in 0..plan.burst {
        let id = id_hex(burst_content(i).as_bytes());
        let grafts = victim.grafts.get(&id).cloned().unwrap_or_default();
        if plan.fault == Fault::ParentOnly {
            assert_eq!(
                grafts.len(),
                1,
                "{plan:?}: the first announcer answers within the retry timeout, so the victim \
                 should request burst-{i} once, not {grafts:?}"
            );
        }
        for pair in grafts.windows(2) {
            assert!(
                pair[0].1 != pair[1].1,
                "{plan:?}: the victim requested burst-{i} twice in a row from the same peer: {grafts:?}"
            );
        }
    }
    // The victim stops asking once it has everything: graft timers stay few.
    assert!(
        victim.graft_timers <= plan.burst * (2 * plan.peers.len() + 2),
        "{plan:?}: the victim handled {} graft timers; it keeps retrying",
        victim.graft_timers
    );
}

#[test]
fn announcer_leaves_before_request() {
    let plan = reported_plan();
    let sim = run(&plan, false);
    check(&plan, &sim);
}

#[test]
fn seeded_departures_and_recoveries() {
    let s = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut faults = vec![
        Fault::AnnouncerLeavesBeforeRequest,
        Fault::AnnouncerLeavesBeforeAnswer,
        Fault::AnnouncerLeavesBeforeAnswer,
        Fault::ParentOnly,
        Fault::ParentOnly,
        Fault::AnnouncerLeavesBeforeRequest,
    ];
    faults.shuffle(&mut rng);
    for (i, fault) in faults.into_iter().enumerate() {
        let p = plan(&mut rng, fault, s.wrapping_mul(31).wrapping_add(i as u64));
        let sim = run(&p, false);
        check(&p, &sim);
    }
}
