//! A delayed packet sent by a member's previous identity (before it restarted and rejoined
//! under a newer identity at the same address) must not change the receiver's view of the
//! cluster.

use foca::{AccumulatingRuntime, BincodeCodec, Config, Foca, Identity, Member, Notification, State};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    addr: u8,
    generation: u8,
}

impl Node {
    fn new(addr: u8, generation: u8) -> Self {
        Self { addr, generation }
    }
}

impl Identity for Node {
    type Addr = u8;

    fn renew(&self) -> Option<Self> {
        Some(Node::new(self.addr, self.generation.wrapping_add(1)))
    }

    fn addr(&self) -> u8 {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
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

/// Drains a runtime, returning the packets it wanted sent.
fn drain(rt: &mut AccumulatingRuntime<Node>) -> Vec<(Node, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some((dst, data)) = rt.to_send() {
        out.push((dst, data.to_vec()));
    }
    while rt.to_schedule().is_some() {}
    while rt.to_notify().is_some() {}
    out
}

fn state_of(agent: &Agent, addr: u8) -> Option<(Node, State)> {
    agent
        .iter_membership_state()
        .find(|m| m.id().addr == addr)
        .map(|m| (*m.id(), m.state()))
}

#[test]
fn packet_from_replaced_identity_is_ignored() {
    let a = Node::new(1, 0);
    let b_old = Node::new(2, 0);
    let d = Node::new(4, 0);

    let mut node_a = agent(a, 1);
    let mut rt_a = AccumulatingRuntime::new();
    node_a
        .apply_many([Member::alive(b_old), Member::alive(d)].into_iter(), &mut rt_a)
        .unwrap();
    drain(&mut rt_a);

    // B's first process suspects D and gossips that to everybody it knows.
    let mut node_b_old = agent(b_old, 2);
    let mut rt_b_old = AccumulatingRuntime::new();
    node_b_old
        .apply_many(
            [Member::alive(a), Member::new(d, 0, State::Suspect)].into_iter(),
            &mut rt_b_old,
        )
        .unwrap();
    drain(&mut rt_b_old);
    node_b_old.gossip(&mut rt_b_old).unwrap();
    let delayed: Vec<Vec<u8>> = drain(&mut rt_b_old)
        .into_iter()
        .filter(|(dst, _)| *dst == a)
        .map(|(_, data)| data)
        .collect();
    assert_eq!(1, delayed.len(), "B's gossip should address A once");

    // Those packets are held up in the network. Meanwhile B's process restarts with a
    // newer identity at the same address and rejoins through A.
    drop(node_b_old);
    let b_new = Node::new(2, 1);
    let mut node_b_new = agent(b_new, 3);
    let mut rt_b_new = AccumulatingRuntime::new();
    node_b_new.announce(a, &mut rt_b_new).unwrap();
    for (dst, data) in drain(&mut rt_b_new) {
        assert_eq!(a, dst);
        node_a.handle_data(&data, &mut rt_a).unwrap();
    }
    let mut renamed = false;
    while let Some(n) = rt_a.to_notify() {
        if n == Notification::Rename(b_old, b_new) {
            renamed = true;
        }
    }
    assert!(renamed, "A should have replaced B's old identity");
    drain(&mut rt_a);
    assert_eq!(Some((b_new, State::Alive)), state_of(&node_a, 2));
    assert_eq!(Some((d, State::Alive)), state_of(&node_a, 4));

    // Now the old process's gossip finally arrives at A.
    for data in delayed {
        let _ = node_a.handle_data(&data, &mut rt_a);
    }
    drain(&mut rt_a);

    // Nothing that identity said may be trusted any more: D is still alive as far as A
    // knows, and B is still its newer identity.
    assert_eq!(
        Some((d, State::Alive)),
        state_of(&node_a, 4),
        "a packet from B's replaced identity changed A's view of D"
    );
    assert_eq!(Some((b_new, State::Alive)), state_of(&node_a, 2));
    assert_eq!(2, node_a.num_members());
}
