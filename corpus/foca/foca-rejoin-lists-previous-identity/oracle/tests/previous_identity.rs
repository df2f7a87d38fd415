//! A process restarts with a renewed identity and rejoins through a peer that still lists the
//! process's previous identity as alive. The restarted process must not count its own previous
//! identity as another member of the cluster.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Config, Foca, Identity, Member, Notification, Runtime, Timer};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    addr: u8,
    generation: u8,
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
struct Outbox {
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

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn agent(id: Node, seed: u64) -> Agent {
    Foca::new(
        id,
        Config::simple(),
        SmallRng::seed_from_u64(seed),
        BincodeCodec(bincode::DefaultOptions::new()),
    )
}

#[test]
fn restarted_process_does_not_list_its_previous_identity() {
    let a_old = Node { addr: 1, generation: 0 };
    let a_new = Node { addr: 1, generation: 1 };
    let b = Node { addr: 2, generation: 0 };
    let c = Node { addr: 3, generation: 0 };

    // B has not noticed yet that A's first process is gone.
    let mut node_b = agent(b, 2);
    let mut out_b = Outbox::default();
    node_b
        .apply_many([Member::alive(a_old), Member::alive(c)].into_iter(), &mut out_b)
        .unwrap();
    out_b.packets.clear();

    // A's process restarts with the next generation and joins through B.
    let mut node_a = agent(a_new, 1);
    let mut out_a = Outbox::default();
    node_a.announce(b, &mut out_a).unwrap();
    let (_, announce) = out_a.packets.pop_front().unwrap();
    node_b.handle_data(&announce, &mut out_b).unwrap();
    let (dst, feed) = out_b.packets.pop_front().expect("B answers the announce");
    assert_eq!(a_new, dst);
    node_a.handle_data(&feed, &mut out_a).unwrap();
    assert!(out_a.notifications.contains(&Notification::Active));

    let members: Vec<Node> = node_a.iter_members().copied().collect();
    assert!(members.contains(&b) && members.contains(&c), "A learned B and C: {members:?}");
    assert!(
        !members.contains(&a_old),
        "the restarted process lists its own previous identity as a live member: {members:?}"
    );

    // And it never probes or gossips to its own address.
    out_a.packets.clear();
    for _ in 0..6 {
        let timers: Vec<Timer<Node>> = out_a.timers.drain(..).collect();
        for t in timers {
            if matches!(t, Timer::ProbeRandomMember(_) | Timer::SendIndirectProbe { .. }) {
                node_a.handle_timer(t, &mut out_a).unwrap();
            } else {
                out_a.timers.push(t);
            }
        }
        while let Some((to, _)) = out_a.packets.pop_front() {
            assert_ne!(1, to.addr, "A sent a packet to its own address (to {to:?})");
        }
    }
}
