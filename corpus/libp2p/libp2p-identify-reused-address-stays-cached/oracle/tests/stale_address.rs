//! A node A learns the listen addresses of its peers through identify (its address cache is on,
//! the default). Peer B listens on one address; bystanders C1.. on theirs. B shuts down and its
//! address is taken over, either by a new node with another identity (N) or by A itself (a
//! dial of B by id that reaches A is then a wrong peer id as well). A's
//! application then dials B by peer id, several times, without giving addresses, as it does
//! for every peer it wants back.
//!
//! The property: the addresses identify learned are offered when a peer is dialled by id (a
//! bystander A disconnected from is dialled back through them), and once a dial of B through an
//! address reaches another identity (A's own or a new node's), that address is no longer offered
//! for B: later dials of B fail with no addresses instead of reaching the new owner again, and
//! the new owner sees exactly one connection attempt meant for B.
//!
//! The seeded test runs two rounds, one per kind of new owner, with the number of bystanders and
//! of redials drawn from the seed. `symptom_scenario` is the reported run, which the bundle
//! generator replays.

use std::{
    future::{poll_fn, Future},
    pin::pin,
    task::Poll,
    time::Duration,
};

use futures::StreamExt;
use libp2p_core::{transport::MemoryTransport, upgrade::Version, Multiaddr, Transport};
use libp2p_identify as identify;
use libp2p_identity::{Keypair, PeerId};
use libp2p_swarm::{dial_opts::DialOpts, DialError, Swarm, SwarmEvent};

/// Who takes over B's address once B is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A new node with its own identity.
    NewNode,
    /// A itself.
    Observer,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub owner: Owner,
    pub bystanders: usize,
    pub redials: usize,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub violations: Vec<String>,
}

fn node(seed: u8) -> Swarm<identify::Behaviour> {
    let key = Keypair::ed25519_from_bytes([seed; 32]).expect("key");
    let peer_id = key.public().to_peer_id();
    let transport = MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(libp2p_plaintext::Config::new(&key))
        .multiplex(libp2p_yamux::Config::default())
        .boxed();
    let behaviour = identify::Behaviour::new(identify::Config::new("/faultline/1.0.0".into(), key.public()));
    Swarm::new(
        transport,
        behaviour,
        peer_id,
        libp2p_swarm::Config::with_tokio_executor().with_idle_connection_timeout(Duration::from_secs(60)),
    )
}

/// The outcome of one dial of a peer by id, as A's swarm reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dialed {
    Connected,
    NoAddresses,
    WrongPeerId,
    LocalPeerId,
    Other(String),
    Nothing,
}

fn classify(e: &DialError) -> Dialed {
    match e {
        DialError::NoAddresses => Dialed::NoAddresses,
        DialError::WrongPeerId { .. } => Dialed::WrongPeerId,
        DialError::LocalPeerId { .. } => Dialed::LocalPeerId,
        other => Dialed::Other(format!("{other}").chars().take(80).collect()),
    }
}

struct Net {
    a: Swarm<identify::Behaviour>,
    /// Bystanders, then B while it lives, then the new node once it exists.
    others: Vec<Option<Swarm<identify::Behaviour>>>,
    /// Peers A got identify info from.
    identified: Vec<PeerId>,
    /// A's last dial outcome per peer.
    outcome: Vec<(PeerId, Dialed)>,
    /// Inbound connections seen by A and by each other node (same indexing as `others`).
    incoming_a: usize,
    incoming: Vec<usize>,
}

impl Net {
    async fn pump(&mut self, limit: Duration, mut until: impl FnMut(&Net) -> bool) -> bool {
        let mut sleep = pin!(tokio::time::sleep(limit));
        poll_fn(|cx| {
            loop {
                let mut progressed = false;
                while let Poll::Ready(Some(ev)) = self.a.poll_next_unpin(cx) {
                    progressed = true;
                    match ev {
                        SwarmEvent::Behaviour(identify::Event::Received { peer_id, .. }) => {
                            self.identified.push(peer_id)
                        }
                        SwarmEvent::ConnectionEstablished { peer_id, endpoint, .. } if endpoint.is_dialer() => {
                            self.outcome.push((peer_id, Dialed::Connected))
                        }
                        SwarmEvent::OutgoingConnectionError { peer_id: Some(p), error, .. } => {
                            self.outcome.push((p, classify(&error)))
                        }
                        SwarmEvent::IncomingConnection { .. } => self.incoming_a += 1,
                        _ => {}
                    }
                }
                for k in 0..self.others.len() {
                    if let Some(s) = self.others[k].as_mut() {
                        while let Poll::Ready(Some(ev)) = s.poll_next_unpin(cx) {
                            progressed = true;
                            if let SwarmEvent::IncomingConnection { .. } = ev {
                                self.incoming[k] += 1;
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

    /// Dials `peer` by id alone and waits for the outcome.
    async fn dial_by_id(&mut self, peer: PeerId) -> Dialed {
        self.outcome.retain(|(p, _)| *p != peer);
        if let Err(e) = self.a.dial(DialOpts::peer_id(peer).build()) {
            return classify(&e);
        }
        self.pump(Duration::from_secs(5), |net| net.outcome.iter().any(|(p, _)| *p == peer)).await;
        // Let the dial settle so its connection (if any) is counted.
        self.pump(Duration::from_millis(100), |_| false).await;
        self.outcome.iter().find(|(p, _)| *p == peer).map(|(_, d)| d.clone()).unwrap_or(Dialed::Nothing)
    }
}

/// Runs one plan; nodes listen on `/memory/base + k`.
pub async fn run(plan: &Plan, base: u64) -> Outcome {
    let mut out = Outcome::default();
    let c = plan.bystanders;
    let addr = |k: usize| -> Multiaddr { format!("/memory/{}", base + k as u64).parse().unwrap() };
    let a = node(1);
    let a_id = *a.local_peer_id();
    let mut others = Vec::new();
    for k in 0..c {
        let mut s = node(10 + k as u8);
        s.listen_on(addr(k)).expect("listen");
        others.push(Some(s));
    }
    let b_slot = c;
    let mut b = node(2);
    let b_id = *b.local_peer_id();
    let b_listener = b.listen_on(addr(b_slot)).expect("listen");
    others.push(Some(b));
    let ids: Vec<PeerId> = others.iter().map(|s| *s.as_ref().unwrap().local_peer_id()).collect();
    let mut net = Net { a, others, identified: Vec::new(), outcome: Vec::new(), incoming_a: 0, incoming: vec![0; c + 2] };

    for k in 0..=c {
        net.a.dial(addr(k)).expect("dial");
    }
    let want = ids.clone();
    let ok = net
        .pump(Duration::from_secs(10), move |net| want.iter().all(|p| net.identified.contains(p)))
        .await;
    assert!(ok, "setup: A did not identify every peer");
    out.log.push(format!(
        "A dials B and {c} other peer(s) by address; identify runs on every connection (A's address cache on, default size)"
    ));

    // A drops its connections to the bystanders; it will want them back later.
    for k in 0..c {
        let _ = net.a.disconnect_peer_id(ids[k]);
    }
    // B goes away for good: it closes its listener (freeing the address) and its swarm is
    // dropped.
    net.others[b_slot].as_mut().unwrap().remove_listener(b_listener);
    net.pump(Duration::from_millis(100), |_| false).await;
    net.others[b_slot] = None;
    let ok = net
        .pump(Duration::from_secs(10), move |net| !net.a.is_connected(&b_id) && net.a.connected_peers().count() == 0)
        .await;
    assert!(ok, "setup: connections did not close");
    out.log.push("B shuts down; A also closes its connections to the other peers".into());

    // Someone else takes B's address.
    match plan.owner {
        Owner::NewNode => {
            let mut n = node(3);
            n.listen_on(addr(b_slot)).expect("listen on B's address");
            net.others.push(Some(n));
            out.log.push("a new node N, with its own identity, starts listening on B's former address".into());
        }
        Owner::Observer => {
            net.a.listen_on(addr(b_slot)).expect("listen on B's address");
            out.log.push("A itself starts listening on B's former address".into());
        }
    }
    net.pump(Duration::from_millis(200), |_| false).await;

    let owner_incoming = |net: &Net| match plan.owner {
        Owner::NewNode => net.incoming[c + 1],
        Owner::Observer => net.incoming_a,
    };
    let owner = match plan.owner {
        Owner::NewNode => "N",
        Owner::Observer => "A",
    };
    // Dialled by id, a connection to another identity (A's own included) is a wrong peer id.
    let expected_first = Dialed::WrongPeerId;
    for r in 1..=plan.redials {
        let before = owner_incoming(&net);
        let d = net.dial_by_id(b_id).await;
        let reached = owner_incoming(&net) - before;
        out.log.push(format!(
            "A dials B by peer id (attempt {r}): {d:?}; inbound connections at {owner}: +{reached}"
        ));
        if r == 1 {
            if d != expected_first {
                out.violations.push(format!(
                    "the first dial of B after {owner} took its address ended with {d:?}, expected {expected_first:?} (the address A learned for B is no longer offered)"
                ));
            }
        } else if d != Dialed::NoAddresses {
            out.violations.push(format!(
                "dial {r} of B ended with {d:?}: the address that already led to another identity is still offered for B"
            ));
        }
    }
    let total = owner_incoming(&net);
    if plan.owner == Owner::NewNode && total != 1 {
        out.violations.push(format!("N saw {total} inbound connections meant for B; expected exactly one"));
    }

    // The bystanders come back through the addresses identify learned.
    for k in 0..c {
        let d = net.dial_by_id(ids[k]).await;
        out.log.push(format!("A dials C{} by peer id: {d:?}", k + 1));
        if d != Dialed::Connected {
            out.violations.push(format!("dialling bystander C{} by peer id ended with {d:?}", k + 1));
        }
    }
    let _ = a_id;
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// The reported run: a new node takes B's address; one bystander; three redials.
pub fn symptom_plan() -> Plan {
    Plan { owner: Owner::NewNode, bystanders: 1, redials: 3 }
}

pub fn symptom_scenario() -> Outcome {
    runtime().block_on(run(&symptom_plan(), 4400))
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

/// The two rounds a seed stands for, in an order drawn from the seed.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut m = Mix(seed);
    let mut v = vec![
        Plan { owner: Owner::NewNode, bystanders: m.range(1, 3), redials: m.range(2, 4) },
        Plan { owner: Owner::Observer, bystanders: m.range(1, 3), redials: m.range(2, 4) },
    ];
    if m.next() % 2 == 0 {
        v.reverse();
    }
    v
}

#[test]
fn symptom() {
    let out = symptom_scenario();
    assert!(out.violations.is_empty(), "{:#?}\n{:#?}", out.violations, out.log);
}

#[test]
fn reused_address_is_dropped_for_the_old_identity() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for (k, plan) in plans(seed).iter().enumerate() {
        let out = runtime().block_on(run(plan, 5000 + 10 * k as u64));
        assert!(
            out.violations.is_empty(),
            "seed {seed}, plan {plan:?}:\n{:#?}\n{:#?}",
            out.violations,
            out.log
        );
    }
}
