//! A member restarts (new identity, same address) while another member is in the middle of
//! probing its old identity. The prober must not ask the restarted process to ping the
//! identity it just replaced: that request ends up back at the restarted process itself.

use foca::{
    AccumulatingRuntime, BincodeCodec, Codec, Config, Error, Foca, Identity, Member, Message,
    Notification, Timer,
};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    addr: u8,
    generation: u8,
}

impl Identity for Node {
    type Addr = u8;

    fn renew(&self) -> Option<Self> {
        Some(Node {
            addr: self.addr,
            generation: self.generation.wrapping_add(1),
        })
    }

    fn addr(&self) -> u8 {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

type Codec_ = BincodeCodec<bincode::DefaultOptions>;
type Agent = Foca<Node, Codec_, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> Codec_ {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn agent(id: Node, seed: u64) -> Agent {
    Foca::new(id, Config::simple(), SmallRng::seed_from_u64(seed), codec())
}

#[derive(Default)]
struct Drained {
    packets: Vec<(Node, Vec<u8>)>,
    timers: Vec<Timer<Node>>,
    notifications: Vec<Notification<Node>>,
}

fn drain(rt: &mut AccumulatingRuntime<Node>) -> Drained {
    let mut out = Drained::default();
    while let Some((dst, data)) = rt.to_send() {
        out.packets.push((dst, data.to_vec()));
    }
    while let Some((_, timer)) = rt.to_schedule() {
        out.timers.push(timer);
    }
    while let Some(n) = rt.to_notify() {
        out.notifications.push(n);
    }
    out
}

fn message_of(data: &[u8]) -> Message<Node> {
    let mut buf = data;
    codec().decode_header(&mut buf).expect("valid header").message
}

/// A two-process "network": packets are delivered to whichever process currently listens on
/// the destination address. Every `handle_data` result is recorded.
struct Net {
    a: (Agent, AccumulatingRuntime<Node>),
    p: (Agent, AccumulatingRuntime<Node>),
    errors: Vec<(Node, Error)>,
    ping_reqs_to_p: Vec<Message<Node>>,
}

impl Net {
    fn deliver(&mut self, mut queue: Vec<(Node, Vec<u8>)>) {
        let mut hops = 0;
        while !queue.is_empty() {
            hops += 1;
            assert!(hops < 100, "packets keep bouncing");
            let mut next = Vec::new();
            for (dst, data) in queue.drain(..) {
                let (node, rt) = match dst.addr {
                    1 => (&mut self.a.0, &mut self.a.1),
                    2 => (&mut self.p.0, &mut self.p.1),
                    _ => panic!("no process at {dst:?}"),
                };
                let me = *node.identity();
                if let Err(e) = node.handle_data(&data, &mut *rt) {
                    self.errors.push((me, e));
                }
                for (to, d) in drain(rt).packets {
                    if me.addr == 1 && to.addr == 2 {
                        if let m @ Message::PingReq { .. } = message_of(&d) {
                            self.ping_reqs_to_p.push(m);
                        }
                    }
                    next.push((to, d));
                }
            }
            queue = next;
        }
    }
}

#[test]
fn restarted_member_is_not_asked_to_probe_its_old_identity() {
    let a = Node { addr: 1, generation: 0 };
    let p_old = Node { addr: 2, generation: 0 };
    let p_new = Node { addr: 2, generation: 1 };

    let mut node_a = agent(a, 11);
    let mut rt_a = AccumulatingRuntime::new();
    node_a
        .apply_many([Member::alive(p_old)].into_iter(), &mut rt_a)
        .unwrap();
    let start = drain(&mut rt_a);
    let probe_timer = start
        .timers
        .into_iter()
        .find(|t| matches!(t, Timer::ProbeRandomMember(_)))
        .expect("A schedules its first probe once it has a member");

    // A's probe period starts: it pings P's current identity. P's process is hanging and
    // never answers; A schedules the indirect stage of the cycle.
    node_a.handle_timer(probe_timer, &mut rt_a).unwrap();
    let probing = drain(&mut rt_a);
    assert_eq!(1, probing.packets.len());
    assert_eq!(p_old, probing.packets[0].0);
    assert!(matches!(message_of(&probing.packets[0].1), Message::Ping(_)));
    let indirect = probing
        .timers
        .into_iter()
        .find(|t| matches!(t, Timer::SendIndirectProbe { .. }))
        .expect("A schedules the indirect probe");
    assert!(matches!(indirect, Timer::SendIndirectProbe { probed_id, .. } if probed_id == p_old));

    // Before that timer fires, P's process is restarted with the next generation and
    // announces itself to A, which replaces the old identity.
    let mut node_p = agent(p_new, 22);
    let mut rt_p = AccumulatingRuntime::new();
    node_p.announce(a, &mut rt_p).unwrap();
    let announce = drain(&mut rt_p).packets;

    let mut net = Net {
        a: (node_a, rt_a),
        p: (node_p, rt_p),
        errors: Vec::new(),
        ping_reqs_to_p: Vec::new(),
    };
    net.deliver(announce);
    assert!(net.errors.is_empty(), "join failed: {:?}", net.errors);
    assert_eq!(1, net.a.0.num_members());
    assert_eq!(Some(&p_new), net.a.0.iter_members().next().map(|m| m.id()));
    assert_eq!(1, net.p.0.num_members());

    // Now A's indirect-probe timer for the old identity fires.
    net.a.0.handle_timer(indirect, &mut net.a.1).unwrap();
    let out = drain(&mut net.a.1).packets;
    for (to, d) in &out {
        if let m @ Message::PingReq { .. } = message_of(d) {
            if to.addr == p_new.addr {
                net.ping_reqs_to_p.push(m);
            }
        }
    }
    net.deliver(out);

    assert!(
        net.ping_reqs_to_p.is_empty(),
        "A asked P's new process to ping P's replaced identity on its behalf: {:?}",
        net.ping_reqs_to_p
    );
    assert!(
        net.errors.is_empty(),
        "handle_data failed during the probe: {:?}",
        net.errors
    );
}
