//! An observer node O dials a few peers P1..Pn. Every node runs Kademlia and identify on one
//! memory transport. The peers switch their Kademlia mode between server and client while
//! their connection to O stays up; identify tells O about each change of the protocols a peer
//! serves.
//!
//! The property: O's routing table lists a peer with status Connected only while O is connected
//! to it and the peer serves the Kademlia protocol. After a peer switches to client mode, its
//! entry (if it has one) is no longer Connected; after it switches back to server mode, it is
//! Connected again; peers that did not change keep their status; and O keeps every connection
//! open throughout (a mode switch is not a reason to drop a peer).
//!
//! The seeded test runs a sequence of mode switches drawn from the seed over two to four peers,
//! some of which start in client mode. `symptom_scenario` is the reported run (one peer turns
//! client once), which the bundle generator replays.

use std::{
    collections::BTreeMap,
    future::{poll_fn, Future},
    pin::pin,
    task::Poll,
    time::Duration,
};

use futures::StreamExt;
use libp2p_swarm::SwarmEvent;
use libp2p_core::{transport::MemoryTransport, upgrade::Version, Multiaddr, Transport};
use libp2p_identify as identify;
use libp2p_identity::{Keypair, PeerId};
use libp2p_kad::{store::MemoryStore, Kademlia, KademliaConfig, Mode};
use libp2p_swarm::{NetworkBehaviour, Swarm};

#[derive(NetworkBehaviour)]
#[behaviour(prelude = "libp2p_swarm::derive_prelude")]
pub struct Node {
    kad: Kademlia<MemoryStore>,
    identify: identify::Behaviour,
}

/// One step of a plan: peer `peer` (1-based) switches to `server` mode or client mode.
#[derive(Clone, Copy, Debug)]
pub struct Switch {
    pub peer: usize,
    pub server: bool,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// For each peer, whether it starts in server mode.
    pub start_server: Vec<bool>,
    pub switches: Vec<Switch>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub violations: Vec<String>,
}

fn node(index: u8) -> Swarm<Node> {
    let key = Keypair::ed25519_from_bytes([index + 1; 32]).expect("key");
    let peer_id = key.public().to_peer_id();
    let transport = MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(libp2p_plaintext::PlainText2Config { local_public_key: key.public() })
        .multiplex(libp2p_yamux::Config::default())
        .boxed();
    let behaviour = Node {
        kad: Kademlia::with_config(peer_id, MemoryStore::new(peer_id), KademliaConfig::default()),
        identify: identify::Behaviour::new(identify::Config::new("/faultline/1.0.0".into(), key.public())),
    };
    libp2p_swarm::SwarmBuilder::with_tokio_executor(transport, behaviour, peer_id)
        .idle_connection_timeout(Duration::from_secs(60))
        .build()
}

pub fn name(i: usize) -> String {
    if i == 0 {
        "O".into()
    } else {
        format!("P{i}")
    }
}

/// What O's routing table says about a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Absent,
    Connected,
    Disconnected,
}

struct Net {
    /// 0 is the observer, 1..=n the peers.
    swarms: Vec<Swarm<Node>>,
    ids: Vec<PeerId>,
    /// Identify info O received, in order: (peer index, whether it lists the kad protocol).
    heard: Vec<(usize, bool)>,
}

impl Net {
    async fn pump(&mut self, limit: Duration, mut until: impl FnMut(&mut Net) -> bool) -> bool {
        let mut sleep = pin!(tokio::time::sleep(limit));
        poll_fn(|cx| {
            loop {
                let mut progressed = false;
                for k in 0..self.swarms.len() {
                    while let Poll::Ready(Some(ev)) = self.swarms[k].poll_next_unpin(cx) {
                        progressed = true;
                        if let (0, SwarmEvent::Behaviour(NodeEvent::Identify(identify::Event::Received { peer_id, info }))) =
                            (k, ev)
                        {
                            if let Some(i) = self.ids.iter().position(|p| *p == peer_id) {
                                let kad = info.protocols.iter().any(|p| p.as_ref() == "/ipfs/kad/1.0.0");
                                self.heard.push((i, kad));
                            }
                        }
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

    /// O's routing-table view of every peer (1-based index -> view).
    fn views(&mut self) -> BTreeMap<usize, View> {
        let mut found: BTreeMap<PeerId, View> = BTreeMap::new();
        for bucket in self.swarms[0].behaviour_mut().kad.kbuckets() {
            for e in bucket.iter() {
                let v = if format!("{:?}", e.status) == "Connected" { View::Connected } else { View::Disconnected };
                found.insert(*e.node.key.preimage(), v);
            }
        }
        (1..self.ids.len()).map(|i| (i, found.get(&self.ids[i]).copied().unwrap_or(View::Absent))).collect()
    }

    fn connected(&self, i: usize) -> bool {
        self.swarms[0].is_connected(&self.ids[i])
    }
}

fn mode(server: bool) -> Mode {
    if server {
        Mode::Server
    } else {
        Mode::Client
    }
}

/// Whether `view` is what O should show for a peer in server mode (`server`) or client mode.
/// A client-mode peer may be absent or listed as disconnected, never as connected.
fn fits(view: View, server: bool) -> bool {
    if server {
        view == View::Connected
    } else {
        view != View::Connected
    }
}

fn show(views: &BTreeMap<usize, View>) -> String {
    let v: Vec<String> = views.iter().map(|(i, v)| format!("{}: {v:?}", name(*i))).collect();
    v.join(", ")
}

fn heard_text(heard: &[(usize, bool)]) -> String {
    let v: Vec<String> = heard
        .iter()
        .map(|(i, kad)| format!("{} lists {}", name(*i), if *kad { "/ipfs/kad/1.0.0" } else { "no kad protocol" }))
        .collect();
    v.join("; ")
}

/// Runs one plan on a fresh network whose peers listen on `/memory/base+i`.
pub async fn run(plan: &Plan, base: u64) -> Outcome {
    let n = plan.start_server.len();
    let mut out = Outcome::default();
    let mut swarms = vec![node(0)];
    for i in 1..=n {
        swarms.push(node(i as u8));
    }
    let ids: Vec<PeerId> = swarms.iter().map(|s| *s.local_peer_id()).collect();
    let mut net = Net { swarms, ids, heard: Vec::new() };
    net.swarms[0].behaviour_mut().kad.set_mode(Some(Mode::Server));
    let mut server = vec![true; n + 1];
    for i in 1..=n {
        server[i] = plan.start_server[i - 1];
        net.swarms[i].behaviour_mut().kad.set_mode(Some(mode(server[i])));
        let addr: Multiaddr = format!("/memory/{}", base + i as u64).parse().unwrap();
        net.swarms[i].listen_on(addr.clone()).expect("listen");
        net.swarms[0].dial(addr).expect("dial");
    }
    out.log.push(format!(
        "O dials {}; modes: {}",
        (1..=n).map(name).collect::<Vec<_>>().join(", "),
        (1..=n).map(|i| format!("{} {:?}", name(i), mode(server[i]))).collect::<Vec<_>>().join(", ")
    ));
    let srv = server.clone();
    let ok = net
        .pump(Duration::from_secs(10), move |net| {
            (1..=n).all(|i| net.connected(i)) && net.views().iter().all(|(i, v)| fits(*v, srv[*i]))
        })
        .await;
    // Let identify finish on every connection before the first switch.
    net.pump(Duration::from_millis(300), |_| false).await;
    let mut heard = std::mem::take(&mut net.heard);
    heard.sort();
    heard.dedup();
    out.log.push(format!("O's identify info: {}", heard_text(&heard)));
    let views = net.views();
    out.log.push(format!("O's routing table: {}", show(&views)));
    assert!(ok, "setup: O did not connect to every peer and list the server-mode ones: {}", show(&views));

    for (k, sw) in plan.switches.iter().enumerate() {
        server[sw.peer] = sw.server;
        net.swarms[sw.peer].behaviour_mut().kad.set_mode(Some(mode(sw.server)));
        out.log.push(format!("step {}: {} switches to {:?} mode", k + 1, name(sw.peer), mode(sw.server)));
        let srv = server.clone();
        net.pump(Duration::from_secs(3), move |net| net.views().iter().all(|(i, v)| fits(*v, srv[*i]))).await;
        // Nothing may flip back afterwards.
        net.pump(Duration::from_millis(300), |_| false).await;
        let heard = std::mem::take(&mut net.heard);
        if !heard.is_empty() {
            out.log.push(format!("O's identify info: {}", heard_text(&heard)));
        }
        let views = net.views();
        out.log.push(format!("O's routing table: {}", show(&views)));
        for (i, v) in &views {
            if !fits(*v, server[*i]) {
                out.violations.push(format!(
                    "after step {}: {} is in {:?} mode but O's routing table shows it {v:?}",
                    k + 1,
                    name(*i),
                    mode(server[*i])
                ));
            }
        }
        for i in 1..=n {
            if !net.connected(i) {
                out.violations.push(format!("after step {}: O is no longer connected to {}", k + 1, name(i)));
            }
        }
        if !out.violations.is_empty() {
            break;
        }
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// The reported run: two server-mode peers, one of which switches to client mode.
pub fn symptom_plan() -> Plan {
    Plan { start_server: vec![true, true], switches: vec![Switch { peer: 1, server: false }] }
}

pub fn symptom_scenario() -> Outcome {
    runtime().block_on(run(&symptom_plan(), 4300))
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
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// The plan a seed stands for: 2 to 4 peers, at least one starting in server mode; 4 to 7
/// switches, each of one peer to the mode it is not in, so that some peer goes server -> client
/// -> server.
pub fn plan(seed: u64) -> Plan {
    let mut m = Mix(seed);
    let n = m.range(2, 4);
    let mut start: Vec<bool> = (0..n).map(|_| m.next() % 3 != 0).collect();
    let first = m.range(0, n - 1);
    start[first] = true;
    let mut cur = start.clone();
    let mut switches = vec![Switch { peer: first + 1, server: false }];
    cur[first] = false;
    let steps = m.range(4, 7);
    // The first peer comes back to server mode at some point.
    let back = m.range(1, steps - 2);
    while switches.len() < steps {
        // The first peer switches only twice: to client mode first, back to server at `back`.
        let p = if switches.len() == back { first } else { (first + m.range(1, n - 1)) % n };
        cur[p] = !cur[p];
        switches.push(Switch { peer: p + 1, server: cur[p] });
    }
    Plan { start_server: start, switches }
}

#[test]
fn symptom() {
    let out = symptom_scenario();
    assert!(out.violations.is_empty(), "{:#?}\n{:#?}", out.violations, out.log);
}

#[test]
fn routing_table_follows_peer_modes() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let plan = plan(seed);
    let out = runtime().block_on(run(&plan, 5000));
    assert!(out.violations.is_empty(), "seed {seed}, plan {plan:?}:\n{:#?}\n{:#?}", out.violations, out.log);
}
