//! Two members that each declared the other down during a partition meet again after it
//! heals. They must sort it out with a bounded number of packets and end up as members of
//! each other's cluster again.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Config, Foca, Identity, Member, Notification, Runtime, State, Timer};
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

/// Collects what a foca instance asks of its runtime.
#[derive(Default)]
struct Outbox {
    packets: VecDeque<(Node, Vec<u8>)>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, notification: Notification<Node>) {
        self.notifications.push(notification);
    }

    fn send_to(&mut self, to: Node, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }

    fn submit_after(&mut self, _event: Timer<Node>, _after: Duration) {}
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn agent(id: Node, seed: u64) -> Agent {
    let mut config = Config::simple();
    config.notify_down_members = true;
    Foca::new(
        id,
        config,
        SmallRng::seed_from_u64(seed),
        BincodeCodec(bincode::DefaultOptions::new()),
    )
}

fn view_of(agent: &Agent, addr: u8) -> Option<(Node, State)> {
    agent
        .iter_members()
        .find(|m| m.id().addr == addr)
        .map(|m| (*m.id(), m.state()))
}

#[test]
fn members_that_declared_each_other_down_rejoin() {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };
    let z = Node { addr: 3, generation: 0 };

    // During the partition, each side declared the other down; both still see Z.
    let mut nodes = [agent(x, 5), agent(y, 6)];
    let mut outboxes = [Outbox::default(), Outbox::default()];
    nodes[0]
        .apply_many(
            [Member::alive(z), Member::new(y, 0, State::Down)].into_iter(),
            &mut outboxes[0],
        )
        .unwrap();
    nodes[1]
        .apply_many(
            [Member::alive(z), Member::new(x, 0, State::Down)].into_iter(),
            &mut outboxes[1],
        )
        .unwrap();
    for o in &mut outboxes {
        o.packets.clear();
        o.notifications.clear();
    }

    // The partition heals and X announces itself to Y (as it does periodically to its seeds).
    nodes[0].announce(y, &mut outboxes[0]).unwrap();

    // Deliver everything exchanged between X and Y (packets for Z are dropped), one packet at
    // a time, alternating between the two outboxes.
    let mut delivered = 0;
    loop {
        let mut progressed = false;
        for from in 0..2 {
            while let Some((dst, data)) = outboxes[from].packets.pop_front() {
                let to = match dst.addr {
                    1 => 0,
                    2 => 1,
                    _ => continue,
                };
                delivered += 1;
                assert!(
                    delivered <= 50,
                    "X and Y are still exchanging packets after {delivered} deliveries; \
                     X's active members: {:?}, Y's active members: {:?}",
                    nodes[0].iter_members().collect::<Vec<_>>(),
                    nodes[1].iter_members().collect::<Vec<_>>(),
                );
                let _ = nodes[to].handle_data(&data, &mut outboxes[to]);
                progressed = true;
                break;
            }
        }
        if !progressed {
            break;
        }
    }

    // Both are back in each other's view as active members.
    let x_now = *nodes[0].identity();
    let y_now = *nodes[1].identity();
    let y_seen_by_x = view_of(&nodes[0], 2).expect("X knows a member at Y's address");
    let x_seen_by_y = view_of(&nodes[1], 1).expect("Y knows a member at X's address");
    assert_ne!(State::Down, y_seen_by_x.1, "X still considers Y down");
    assert_ne!(State::Down, x_seen_by_y.1, "Y still considers X down");
    assert_eq!(y_now, y_seen_by_x.0);
    assert_eq!(x_now, x_seen_by_y.0);
}
