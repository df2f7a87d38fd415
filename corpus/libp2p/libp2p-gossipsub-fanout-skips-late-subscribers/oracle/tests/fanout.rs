//! A hub publishes on a topic it is not subscribed to, with flood publishing and lazy gossip
//! off, so every message goes to the hub's fanout for the topic. Subscribers are connected only
//! to the hub (a star), so whatever the hub does not push to them, they never see.
//!
//! The property: once the hub's heartbeat has run, each message it publishes reaches exactly
//! min(D, eligible subscribers) subscribers (D = the hub's mesh_n), where eligible means
//! subscribed, connected and not scored below the publish threshold; a peer below that threshold
//! never gets one. Peers that subscribe after the fanout was formed, and peers that take the place
//! of a fanout member that disconnected or unsubscribed, count like the first ones.
//!
//! The seeded test runs three rounds with sizes, join order and the leaving member drawn from
//! the seed: late subscribers (scoring off), a fanout member leaving while other subscribers
//! wait (scoring off), and late subscribers with peer scoring on and one late subscriber scored
//! below the publish threshold. `symptom_scenario` is the reported run, which the bundle
//! generator replays.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::{poll_fn, Future},
    pin::pin,
    task::Poll,
    time::Duration,
};

use futures::StreamExt;
use libp2p_core::{transport::MemoryTransport, upgrade::Version, Multiaddr, Transport};
use libp2p_gossipsub as gossipsub;
use libp2p_identity::{Keypair, PeerId};
use libp2p_swarm::{Swarm, SwarmEvent};

pub const HEARTBEAT: Duration = Duration::from_millis(100);
const TOPIC: &str = "status";

/// How a fanout member leaves in the churn round.
#[derive(Clone, Copy, Debug)]
pub enum Leave {
    Disconnect,
    Unsubscribe,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// The hub's mesh_n (D); `None` keeps the library default.
    pub mesh_n: Option<usize>,
    /// Subscribers that subscribe before the hub's first publish.
    pub early: usize,
    /// Subscribers that subscribe after it.
    pub late: usize,
    /// Peer scoring on the hub, with the late subscriber of this index (0-based among the late
    /// ones) given an application score below the publish threshold.
    pub scoring: Option<Option<usize>>,
    /// After the fanout carries the late subscribers, one member that received the last message
    /// leaves this way (chosen with `pick`).
    pub churn: Option<(Leave, u64)>,
    /// Publishes to try before giving up on a round.
    pub max_rounds: usize,
}

/// What a scenario run saw, for the checks and for the bundle.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Human-readable steps (names, not peer ids), in the order the scenario took them.
    pub log: Vec<String>,
    /// For each published payload, the subscribers (1-based) that delivered it to their app.
    pub received: BTreeMap<String, BTreeSet<usize>>,
    /// Problems found, empty when the property held.
    pub violations: Vec<String>,
}

struct Net {
    /// 0 is the hub, 1..=n the subscribers.
    swarms: Vec<Swarm<gossipsub::Behaviour>>,
    ids: Vec<PeerId>,
    received: BTreeMap<String, BTreeSet<usize>>,
}

fn config(mesh_n: Option<usize>) -> gossipsub::Config {
    let mut b = gossipsub::ConfigBuilder::default();
    b.heartbeat_initial_delay(HEARTBEAT)
        .heartbeat_interval(HEARTBEAT)
        .flood_publish(false)
        .gossip_lazy(0)
        .gossip_factor(0.0);
    if let Some(d) = mesh_n {
        b.mesh_n(d)
            .mesh_n_low(1)
            .mesh_n_high(d * 2)
            .mesh_outbound_min(d / 2);
    }
    b.build().expect("valid config")
}

fn node(index: u8, cfg: gossipsub::Config) -> Swarm<gossipsub::Behaviour> {
    let key = Keypair::ed25519_from_bytes([index + 1; 32]).expect("key");
    let peer_id = key.public().to_peer_id();
    let transport = MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(libp2p_plaintext::Config::new(&key))
        .multiplex(libp2p_yamux::Config::default())
        .boxed();
    let behaviour =
        gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key), cfg).expect("behaviour");
    Swarm::new(
        transport,
        behaviour,
        peer_id,
        libp2p_swarm::Config::with_tokio_executor()
            .with_idle_connection_timeout(Duration::from_secs(60)),
    )
}

pub fn name(i: usize) -> String {
    if i == 0 {
        "hub".into()
    } else {
        format!("S{i}")
    }
}

fn topic() -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(TOPIC)
}

impl Net {
    fn on_event(&mut self, i: usize, ev: SwarmEvent<gossipsub::Event>) {
        if let SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) = ev {
            let payload = String::from_utf8_lossy(&message.data).into_owned();
            if i != 0 {
                self.received.entry(payload).or_default().insert(i);
            }
        }
    }

    /// Drives every node until `until` holds or `limit` elapses; returns whether it held.
    async fn pump(&mut self, limit: Duration, mut until: impl FnMut(&Net) -> bool) -> bool {
        let mut sleep = pin!(tokio::time::sleep(limit));
        poll_fn(|cx| {
            loop {
                let mut progressed = false;
                for i in 0..self.swarms.len() {
                    while let Poll::Ready(Some(ev)) = self.swarms[i].poll_next_unpin(cx) {
                        progressed = true;
                        self.on_event(i, ev);
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

    /// Subscribers (1-based) the hub knows to be subscribed to the topic.
    fn hub_view(&self) -> BTreeSet<usize> {
        let t = topic().hash();
        self.swarms[0]
            .behaviour()
            .all_peers()
            .filter(|(_, topics)| topics.contains(&&t))
            .filter_map(|(p, _)| self.ids.iter().position(|id| id == p))
            .collect()
    }
}

/// Runs one plan on a fresh star network whose hub listens on `/memory/port`.
pub async fn run(plan: &Plan, port: u64) -> Outcome {
    let n = plan.early + plan.late;
    let mut out = Outcome::default();
    let mut swarms = vec![node(0, config(plan.mesh_n))];
    for i in 1..=n {
        swarms.push(node(i as u8, config(None)));
    }
    let ids: Vec<PeerId> = swarms.iter().map(|s| *s.local_peer_id()).collect();
    let mut net = Net { swarms, ids, received: BTreeMap::new() };
    let d = plan.mesh_n.unwrap_or_else(|| config(None).mesh_n());

    if let Some(_) = plan.scoring {
        net.swarms[0]
            .behaviour_mut()
            .with_peer_score(gossipsub::PeerScoreParams::default(), gossipsub::PeerScoreThresholds::default())
            .expect("scoring");
    }

    let addr: Multiaddr = format!("/memory/{port}").parse().unwrap();
    net.swarms[0].listen_on(addr.clone()).expect("listen");
    for i in 1..=n {
        net.swarms[i].dial(addr.clone()).expect("dial");
    }
    assert!(
        net.pump(Duration::from_secs(10), |net| net.swarms[0].connected_peers().count() == n).await,
        "setup: subscribers did not connect"
    );
    out.log.push(format!(
        "{n} subscribers connected to the hub only; hub mesh_n = {d}, flood_publish = false, gossip_lazy = 0{}",
        if plan.scoring.is_some() { ", peer scoring on" } else { "" }
    ));

    // A late subscriber the hub's application distrusts from the start: -6 x weight 10 is
    // below the publish threshold (-50) and above the graylist threshold (-80).
    let mut bad = BTreeSet::new();
    if let Some(Some(k)) = plan.scoring {
        let b = plan.early + 1 + k % plan.late;
        let id = net.ids[b];
        assert!(net.swarms[0].behaviour_mut().set_application_score(&id, -6.0));
        bad.insert(b);
        out.log.push(format!("hub sets application score -6 for {} (below publish threshold)", name(b)));
    }

    // Early subscribers, then the hub's first publish, which forms the fanout.
    let early: BTreeSet<usize> = (1..=plan.early).collect();
    for &i in &early {
        net.swarms[i].behaviour_mut().subscribe(&topic()).expect("subscribe");
    }
    let want = early.clone();
    assert!(
        net.pump(Duration::from_secs(10), |net| net.hub_view() == want).await,
        "setup: hub did not learn the early subscriptions"
    );
    out.log.push(format!("subscribe: {}; hub sees subscribed {}", names(&early), names(&net.hub_view())));
    let res = net.swarms[0].behaviour_mut().publish(topic(), "m0");
    out.log.push(format!("hub publishes m0 -> {}", if res.is_ok() { "Ok" } else { "Err" }));
    res.expect("first publish");
    net.pump(Duration::from_secs(10), |net| net.received.get("m0").is_some_and(|r| *r == want)).await;

    // Late subscribers.
    let late: Vec<usize> = (plan.early + 1..=n).collect();
    for &i in &late {
        net.swarms[i].behaviour_mut().subscribe(&topic()).expect("subscribe");
    }
    let all: BTreeSet<usize> = (1..=n).collect();
    assert!(
        net.pump(Duration::from_secs(10), |net| net.hub_view() == all).await,
        "setup: hub did not learn the late subscriptions"
    );
    out.log.push(format!(
        "subscribe: {}; hub sees subscribed {}",
        names(&late.iter().copied().collect()),
        names(&net.hub_view())
    ));

    let mut next = 1;
    let eligible: BTreeSet<usize> = all.difference(&bad).copied().collect();
    let last = rounds(&mut net, &mut out, &mut next, d, &early, &eligible, &bad, plan.max_rounds).await;

    if let (Some((how, pick)), Some(last)) = (plan.churn, last) {
        let members: Vec<usize> = net.received[&last].iter().copied().collect();
        let leaver = members[(pick % members.len() as u64) as usize];
        match how {
            Leave::Disconnect => {
                let hub = net.ids[0];
                let _ = net.swarms[leaver].disconnect_peer_id(hub);
                net.pump(Duration::from_secs(10), |net| !net.swarms[0].is_connected(&net.ids[leaver])).await;
            }
            Leave::Unsubscribe => {
                net.swarms[leaver].behaviour_mut().unsubscribe(&topic());
                net.pump(Duration::from_secs(10), |net| !net.hub_view().contains(&leaver)).await;
            }
        }
        out.log.push(format!("{} leaves the topic ({how:?})", name(leaver)));
        let eligible: BTreeSet<usize> = eligible.iter().copied().filter(|&i| i != leaver).collect();
        let keep: BTreeSet<usize> = members.iter().copied().filter(|&i| i != leaver).collect();
        rounds(&mut net, &mut out, &mut next, d, &keep, &eligible, &bad, plan.max_rounds).await;
    }

    out.received = std::mem::take(&mut net.received);
    out
}

fn names(set: &BTreeSet<usize>) -> String {
    let v: Vec<String> = set.iter().map(|&i| name(i)).collect();
    format!("[{}]", v.join(", "))
}

/// Publishes one message per heartbeat until one reaches min(D, |eligible|) subscribers, then
/// one more, checking every message against the bounds. Returns the last payload that reached
/// the target, if any.
#[allow(clippy::too_many_arguments)]
async fn rounds(
    net: &mut Net,
    out: &mut Outcome,
    next: &mut usize,
    d: usize,
    keep: &BTreeSet<usize>,
    eligible: &BTreeSet<usize>,
    bad: &BTreeSet<usize>,
    max_rounds: usize,
) -> Option<String> {
    let target = d.min(eligible.len());
    let mut sent = Vec::new();
    let mut reached: Option<String> = None;
    let mut extra = 0;
    for _ in 0..max_rounds {
        let payload = format!("m{next}");
        *next += 1;
        let res = net.swarms[0].behaviour_mut().publish(topic(), payload.clone());
        if let Err(e) = &res {
            out.violations.push(format!("publish {payload} failed: {e:?}"));
        }
        let p = payload.clone();
        net.pump(HEARTBEAT, |net| net.received.get(&p).is_some_and(|r| r.len() >= target)).await;
        sent.push(payload.clone());
        if reached.is_some() {
            extra += 1;
            if extra == 2 {
                break;
            }
        } else if net.received.get(&payload).is_some_and(|r| r.len() >= target) {
            reached = Some(payload);
        }
    }
    // Let stragglers arrive before judging.
    net.pump(HEARTBEAT * 2, |_| false).await;
    for p in &sent {
        let r = net.received.get(p).cloned().unwrap_or_default();
        out.log.push(format!("hub publishes {p}: delivered to {}", names(&r)));
        if r.len() > target {
            out.violations.push(format!("{p} reached {} subscribers, more than {target}", r.len()));
        }
        if let Some(b) = r.intersection(bad).next() {
            out.violations.push(format!("{p} was sent to {} although it is below the publish threshold", name(*b)));
        }
    }
    match &reached {
        None => out.violations.push(format!(
            "after {} publishes, none reached {target} of the eligible subscribers {}",
            sent.len(),
            names(eligible)
        )),
        Some(p) => {
            let after: Vec<&String> = sent.iter().skip_while(|s| *s != p).collect();
            for q in after {
                let r = net.received.get(q).cloned().unwrap_or_default();
                if r.len() != target || !keep.is_subset(&r) {
                    out.violations.push(format!(
                        "{q} reached {} instead of {target} subscribers including {}",
                        names(&r),
                        names(keep)
                    ));
                }
            }
        }
    }
    reached
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// The reported run: one subscriber before the hub's first publish, three after; defaults
/// otherwise. The bundle generator prints its log.
pub fn symptom_scenario() -> Outcome {
    let plan = Plan { mesh_n: None, early: 1, late: 3, scoring: None, churn: None, max_rounds: 10 };
    runtime().block_on(run(&plan, 4100))
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

/// The three plans a seed stands for.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut m = Mix(seed);
    let mut v = Vec::new();
    // Late subscribers, scoring off.
    let d = m.range(2, 4);
    let early = m.range(1, d - 1);
    let late = m.range(1, 3);
    v.push(Plan { mesh_n: Some(d), early, late, scoring: None, churn: None, max_rounds: 20 });
    // A fanout member leaves while more subscribers than D wait.
    let d = m.range(2, 3);
    let early = m.range(1, d - 1);
    let late = d + 1 - early + m.range(0, 1);
    let how = if m.next() % 2 == 0 { Leave::Disconnect } else { Leave::Unsubscribe };
    v.push(Plan { mesh_n: Some(d), early, late, scoring: None, churn: Some((how, m.next())), max_rounds: 20 });
    // Scoring on, one late subscriber below the publish threshold; the fanout has room for
    // every late subscriber, so only the score can keep that one out.
    let d = m.range(3, 4);
    let early = m.range(1, d - 2);
    let late = m.range(2, d - early);
    let bad = m.range(0, late - 1);
    v.push(Plan { mesh_n: Some(d), early, late, scoring: Some(Some(bad)), churn: None, max_rounds: 20 });
    v
}

#[test]
fn symptom() {
    let out = symptom_scenario();
    assert!(out.violations.is_empty(), "{:#?}\n{:#?}", out.violations, out.log);
}

#[test]
fn fanout_reaches_eligible_subscribers() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let rt = runtime();
    for (k, plan) in plans(seed).iter().enumerate() {
        let out = rt.block_on(run(plan, 5000 + k as u64));
        assert!(
            out.violations.is_empty(),
            "seed {seed}, plan {plan:?}:\n{:#?}\n{:#?}",
            out.violations,
            out.log
        );
    }
}
