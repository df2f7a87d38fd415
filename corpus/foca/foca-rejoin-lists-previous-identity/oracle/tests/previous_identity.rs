//! A process restarts with a renewed identity and rejoins through a peer that still lists the
//! process's previous identity as alive. The restarted process must not count its own previous
//! identity as another member of the cluster.
//!
//! Beyond the reported run: it keeps not listing it when the application hands it that identity
//! again (alive or suspect, any incarnation), and the peer it joined through learns from it that
//! the previous identity is gone instead of listing it forever.
//! `symptom_scenario` is the reported run, which the bundle generator replays.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Config, Foca, Identity, Member, Notification, Runtime, Timer};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub addr: u8,
    pub generation: u8,
}

impl Identity for Node {
    fn renew(&self) -> Option<Self> {
        Some(Node {
            addr: self.addr,
            generation: self.generation.wrapping_add(1),
        })
    }

    fn has_same_prefix(&self, other: &Self) -> bool {
        self.addr == other.addr
    }
}

#[derive(Default)]
pub struct Outbox {
    packets: VecDeque<(Node, Vec<u8>)>,
    timers: Vec<Timer<Node>>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, notification: Notification<Node>) {
        self.notifications.push(notification);
    }

    fn send_to(&mut self, to: Node, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }

    fn submit_after(&mut self, event: Timer<Node>, _after: Duration) {
        self.timers.push(event);
    }
}

pub type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn agent(id: Node, seed: u64) -> Agent {
    Foca::new(
        id,
        Config::simple(),
        SmallRng::seed_from_u64(seed),
        BincodeCodec(bincode::DefaultOptions::new()),
    )
}

/// What the reported run shows, in order.
pub enum Event<'a> {
    /// A packet and, when someone listens at its address, who handled it and how.
    Packet(&'a [u8], Node, Option<(Node, &'a Result<(), foca::Error>, Vec<Notification<Node>>)>),
    /// A#1's probe timers fire, the `n`th time; with A#1's members at that moment.
    ProbeRound(usize, Vec<Node>),
}

/// Hooks for the bundle generator; the oracle uses the defaults.
pub trait Observer {
    fn event(&mut self, _event: Event<'_>) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// Where the reported run left the two processes.
pub struct SymptomOutcome {
    pub node_a: Agent,
    pub out_a: Outbox,
    pub node_b: Agent,
    pub out_b: Outbox,
    pub a_active: bool,
    pub members_after_join: Vec<Node>,
    /// Every packet A#1 addressed to its own address.
    pub to_own_address: Vec<Node>,
}

/// Delivers every queued packet by address until all is quiet (nothing listens at address 3).
fn settle(
    node_a: &mut Agent,
    out_a: &mut Outbox,
    node_b: &mut Agent,
    out_b: &mut Outbox,
    own: &mut Vec<Node>,
    obs: &mut dyn Observer,
) {
    let mut moved = true;
    while moved {
        moved = false;
        for from in 0..2 {
            let out = if from == 0 { &mut *out_a } else { &mut *out_b };
            let Some((dst, data)) = out.packets.pop_front() else {
                continue;
            };
            moved = true;
            if from == 0 && dst.addr == 1 {
                own.push(dst);
            }
            let (node, o) = match dst.addr {
                1 => (&mut *node_a, &mut *out_a),
                2 => (&mut *node_b, &mut *out_b),
                _ => {
                    obs.event(Event::Packet(&data, dst, None));
                    continue;
                }
            };
            let r = node.handle_data(&data, &mut *o);
            let notes: Vec<Notification<Node>> = o.notifications.drain(..).collect();
            obs.event(Event::Packet(&data, dst, Some((*node.identity(), &r, notes))));
        }
    }
}

/// The reported run: B still lists A's previous process A#0 (and C); A's process restarts as
/// A#1 and announces itself to B; then A#1's probe timers fire `rounds` times. Packets are
/// delivered by address; nothing listens at C's address.
pub fn symptom_scenario(rounds: usize, obs: &mut dyn Observer) -> SymptomOutcome {
    let a_old = Node { addr: 1, generation: 0 };
    let a_new = Node { addr: 1, generation: 1 };
    let b = Node { addr: 2, generation: 0 };
    let c = Node { addr: 3, generation: 0 };

    let mut node_b = agent(b, 2);
    let mut out_b = Outbox::default();
    node_b
        .apply_many([Member::alive(a_old), Member::alive(c)].into_iter(), &mut out_b)
        .unwrap();
    out_b = Outbox::default();

    let mut node_a = agent(a_new, 1);
    let mut out_a = Outbox::default();
    node_a.announce(b, &mut out_a).unwrap();
    let mut own = Vec::new();
    settle(&mut node_a, &mut out_a, &mut node_b, &mut out_b, &mut own, obs);
    let members_after_join: Vec<Node> = node_a.iter_members().copied().collect();
    let a_active = node_a.iter_members().next().is_some();

    for round in 1..=rounds {
        obs.event(Event::ProbeRound(round, node_a.iter_members().copied().collect()));
        let timers: Vec<Timer<Node>> = out_a.timers.drain(..).collect();
        for t in timers {
            if matches!(t, Timer::ProbeRandomMember(_) | Timer::SendIndirectProbe { .. }) {
                node_a.handle_timer(t, &mut out_a).unwrap();
            } else {
                out_a.timers.push(t);
            }
        }
        settle(&mut node_a, &mut out_a, &mut node_b, &mut out_b, &mut own, obs);
    }

    SymptomOutcome {
        node_a,
        out_a,
        node_b,
        out_b,
        a_active,
        members_after_join,
        to_own_address: own,
    }
}

#[test]
fn restarted_process_does_not_list_its_previous_identity() {
    let a_old = Node { addr: 1, generation: 0 };
    let b = Node { addr: 2, generation: 0 };
    let c = Node { addr: 3, generation: 0 };

    let out = symptom_scenario(3, &mut Quiet);
    let members = &out.members_after_join;
    assert!(out.a_active, "A did not join");
    assert!(members.contains(&b) && members.contains(&c), "A learned B and C: {members:?}");
    assert!(
        !members.contains(&a_old),
        "the restarted process lists its own previous identity as a live member: {members:?}"
    );
    assert!(
        out.to_own_address.is_empty(),
        "A sent packets to its own address (to {:?})",
        out.to_own_address
    );

    // The application hands it its previous identity again (say, from a stale seed list).
    let SymptomOutcome {
        mut node_a,
        mut out_a,
        mut node_b,
        mut out_b,
        ..
    } = out;
    node_a
        .apply_many(
            [
                Member::alive(a_old),
                Member::new(a_old, 3, foca::State::Suspect),
                Member::new(a_old, 7, foca::State::Alive),
            ]
            .into_iter(),
            &mut out_a,
        )
        .unwrap();
    let members: Vec<Node> = node_a.iter_members().copied().collect();
    assert!(
        !members.contains(&a_old),
        "the restarted process took its previous identity back as a member: {members:?}"
    );

    // It keeps probing and gossiping, never to its own address, and B hears from it.
    let mut own = Vec::new();
    for round in 0..6 {
        if round % 2 == 1 {
            node_a.gossip(&mut out_a).unwrap();
        }
        let timers: Vec<Timer<Node>> = out_a.timers.drain(..).collect();
        for t in timers {
            if matches!(t, Timer::ProbeRandomMember(_) | Timer::SendIndirectProbe { .. }) {
                node_a.handle_timer(t, &mut out_a).unwrap();
            } else {
                out_a.timers.push(t);
            }
        }
        settle(&mut node_a, &mut out_a, &mut node_b, &mut out_b, &mut own, &mut Quiet);
    }
    assert!(own.is_empty(), "A sent packets to its own address (to {own:?})");
    let b_members: Vec<Node> = node_b.iter_members().copied().collect();
    assert!(
        !b_members.contains(&a_old),
        "B still lists A's previous identity as a live member after hearing from A: {b_members:?}"
    );
}
