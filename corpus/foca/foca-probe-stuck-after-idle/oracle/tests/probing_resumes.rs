//! A two-member cluster on a simulated clock. B's process dies; A suspects it and declares it
//! down, going idle. B's process comes back under a renewed identity and announces itself to A.
//! From then on A must keep probing B (a failure detector that silently stops probing can never
//! notice B dying again).
//!
//! B may also come back under the same identity once A has forgotten it: the probe A was in
//! the middle of when it went idle must not count against B then, so A never suspects B while
//! B answers every ping.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Header, Message, Foca, Identity, Member, Notification, Runtime, Timer};
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

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn config() -> Config {
    let mut config = Config::simple();
    // probe every 1.5 s, 0.5 s round trip; a suspect is declared down 3.2 s after suspicion
    config.probe_period = Duration::from_millis(1500);
    config.probe_rtt = Duration::from_millis(500);
    config.suspect_to_down_after = Duration::from_millis(3200);
    config
}

#[derive(Default)]
struct Outbox {
    packets: Vec<(Node, Vec<u8>)>,
    timers: Vec<(Duration, Timer<Node>)>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, notification: Notification<Node>) {
        self.notifications.push(notification);
    }

    fn send_to(&mut self, to: Node, data: &[u8]) {
        self.packets.push((to, data.to_vec()));
    }

    fn submit_after(&mut self, event: Timer<Node>, after: Duration) {
        self.timers.push((after, event));
    }
}

enum Event {
    Timer(Timer<Node>),
    Packet(Vec<u8>),
}

/// Events for the process at an address, ordered by time then by submission order.
struct Sim {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, u8)>>,
    events: std::collections::HashMap<u64, Event>,
    procs: [Option<Agent>; 2],
    /// (time, message) of every packet A sent to B's address
    a_to_b: Vec<(u64, Message<Node>)>,
    /// (time, update) of every update about B's address, other than alive, that A sent to B
    a_doubts_b: Vec<(u64, Member<Node>)>,
    timer_errors: Vec<(u64, u8, String)>,
    a_notifications: Vec<(u64, Notification<Node>)>,
}

impl Sim {
    fn push(&mut self, at: u64, addr: u8, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, addr)));
        self.events.insert(self.seq, ev);
    }

    fn absorb(&mut self, from: u8, out: Outbox) {
        for (dst, data) in out.packets {
            if from == 1 && dst.addr == 2 {
                let mut codec = BincodeCodec(bincode::DefaultOptions::new());
                let mut rest = &data[..];
                let header: Header<Node> =
                    codec.decode_header(&mut rest).expect("A sends valid packets");
                self.a_to_b.push((self.now, header.message));
                if rest.len() >= 2 {
                    let count = u16::from_be_bytes([rest[0], rest[1]]);
                    rest = &rest[2..];
                    for _ in 0..count {
                        let m: Member<Node> = codec.decode_member(&mut rest).expect("valid update");
                        if m.id().addr == 2 && m.state() != foca::State::Alive {
                            self.a_doubts_b.push((self.now, m));
                        }
                    }
                }
            }
            // 1 ms one-way latency
            self.push(self.now + 1, dst.addr, Event::Packet(data));
        }
        for (after, timer) in out.timers {
            self.push(self.now + after.as_millis() as u64, from, Event::Timer(timer));
        }
        if from == 1 {
            for n in out.notifications {
                self.a_notifications.push((self.now, n));
            }
        }
    }

    fn run_until(&mut self, until: u64) {
        while let Some(Reverse((at, seq, addr))) = self.queue.peek().copied() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            let ev = self.events.remove(&seq).unwrap();
            let Some(proc) = self.procs[(addr - 1) as usize].as_mut() else {
                continue; // nobody listening at that address: dropped
            };
            let mut out = Outbox::default();
            match ev {
                Event::Timer(t) => {
                    if let Err(e) = proc.handle_timer(t, &mut out) {
                        self.timer_errors.push((at, addr, format!("{e:?}")));
                    }
                }
                Event::Packet(p) => {
                    let _ = proc.handle_data(&p, &mut out);
                }
            }
            self.absorb(addr, out);
        }
        self.now = until;
    }
}

#[test]
fn probing_resumes_after_the_cluster_comes_back() {
    run(Node { addr: 2, generation: 1 }, 20_000);
}

#[test]
fn same_identity_rejoins_without_being_suspected() {
    run(Node { addr: 2, generation: 0 }, 45_000);
}

/// B dies at 5 s and comes back as `b_again` at `back_at` ms, announcing itself to A.
fn run(b_again: Node, back_at: u64) {
    let a = Node { addr: 1, generation: 0 };
    let b = Node { addr: 2, generation: 0 };
    let mut sim = Sim {
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: Default::default(),
        procs: [
            Some(Foca::new(a, config(), SmallRng::seed_from_u64(1), BincodeCodec(bincode::DefaultOptions::new()))),
            Some(Foca::new(b, config(), SmallRng::seed_from_u64(2), BincodeCodec(bincode::DefaultOptions::new()))),
        ],
        a_to_b: Vec::new(),
        timer_errors: Vec::new(),
        a_notifications: Vec::new(),
        a_doubts_b: Vec::new(),
    };

    // t=0: A and B know each other.
    let mut out = Outbox::default();
    sim.procs[0].as_mut().unwrap().apply_many([Member::alive(b)].into_iter(), &mut out).unwrap();
    sim.absorb(1, out);
    let mut out = Outbox::default();
    sim.procs[1].as_mut().unwrap().apply_many([Member::alive(a)].into_iter(), &mut out).unwrap();
    sim.absorb(2, out);
    sim.run_until(5_000);

    // t=5s: B's process dies.
    sim.procs[1] = None;
    sim.run_until(back_at);
    assert!(
        sim.a_notifications.iter().any(|(_, n)| *n == Notification::Idle),
        "A should have declared B down and gone idle: {:?}",
        sim.a_notifications
    );
    assert_eq!(0, sim.procs[0].as_ref().unwrap().num_members());

    // t=20s: B's process is back with a renewed identity and announces itself to A.
    let b1 = b_again;
    let mut node_b1: Agent = Foca::new(b1, config(), SmallRng::seed_from_u64(3), BincodeCodec(bincode::DefaultOptions::new()));
    let mut out = Outbox::default();
    node_b1.announce(a, &mut out).unwrap();
    sim.procs[1] = Some(node_b1);
    sim.absorb(2, out);
    let rejoined_at = sim.now;
    let sent_before = sim.a_to_b.len();
    let doubts_before = sim.a_doubts_b.len();
    sim.run_until(back_at + 20_000);

    assert_eq!(1, sim.procs[0].as_ref().unwrap().num_members(), "A lists B again");
    // 20 s of operation with a 1.5 s probe period: A must keep pinging B.
    let pings: Vec<u64> = sim.a_to_b[sent_before..]
        .iter()
        .filter(|(_, m)| matches!(m, Message::Ping(_)))
        .map(|(t, _)| *t)
        .collect();
    let late = pings.iter().filter(|t| **t > rejoined_at + 10_000).count();
    assert!(
        pings.len() >= 10 && late >= 5,
        "A stopped probing B after it rejoined: pings to B at {pings:?} (ms)"
    );
    let doubts: Vec<_> = sim.a_doubts_b[doubts_before..]
        .iter()
        .filter(|(_, m)| *m.id() == b_again)
        .collect();
    assert!(
        doubts.is_empty(),
        "A suspected B although B answered every ping after it rejoined: {doubts:?}"
    );
    assert!(
        sim.timer_errors.is_empty(),
        "timer handling failed: {:?}",
        sim.timer_errors
    );
}
