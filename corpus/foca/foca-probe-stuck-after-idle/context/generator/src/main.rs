//! Produces context/node-a-timeline.md: node A's side of a two-member cluster on a simulated
//! clock (1 ms latency). B's process dies at t=5 s; at t=20 s it comes back as B#1 and announces
//! to A. Every call into A (timer or packet) is listed with its result, the messages A sent
//! and A's notifications, for t >= 4.5 s. Run from context/generator:
//! `cargo run -q > ../node-a-timeline.md`. Output is not edited.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Foca, Header, Identity, Member, Message, Notification, Runtime, Timer};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    addr: u8,
    generation: u8,
}

impl Identity for Node {
    fn renew(&self) -> Option<Self> {
        Some(Node { addr: self.addr, generation: self.generation.wrapping_add(1) })
    }
    fn has_same_prefix(&self, other: &Self) -> bool {
        self.addr == other.addr
    }
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn config() -> Config {
    let mut config = Config::simple();
    config.probe_period = Duration::from_millis(1500);
    config.probe_rtt = Duration::from_millis(500);
    config.suspect_to_down_after = Duration::from_millis(3200);
    config
}

fn name(n: &Node) -> String {
    format!("{}#{}", if n.addr == 1 { "A" } else { "B" }, n.generation)
}

fn msg(m: &Message<Node>) -> String {
    match m {
        Message::PingReq { target, probe_number } => format!("PingReq({}, {probe_number})", name(target)),
        other => format!("{other:?}"),
    }
}

fn timer(t: &Timer<Node>) -> String {
    match t {
        Timer::ProbeRandomMember(tok) => format!("ProbeRandomMember(token {tok})"),
        Timer::SendIndirectProbe { probed_id, token } => format!("SendIndirectProbe({}, token {token})", name(probed_id)),
        Timer::ChangeSuspectToDown { member_id, token, .. } => format!("ChangeSuspectToDown({}, token {token})", name(member_id)),
        Timer::RemoveDown(id) => format!("RemoveDown({})", name(id)),
    }
}

#[derive(Default)]
struct Outbox {
    packets: Vec<(Node, Vec<u8>)>,
    timers: Vec<(Duration, Timer<Node>)>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, n: Notification<Node>) {
        self.notifications.push(n);
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

struct Sim {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, u8)>>,
    events: HashMap<u64, Event>,
    procs: [Option<Agent>; 2],
    rows: Vec<String>,
}

impl Sim {
    fn push(&mut self, at: u64, addr: u8, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, addr)));
        self.events.insert(self.seq, ev);
    }

    fn absorb(&mut self, from: u8, out: Outbox) -> (Vec<String>, Vec<String>) {
        let mut sent = Vec::new();
        for (dst, data) in out.packets {
            let h: Header<Node> = codec().decode_header(&mut &data[..]).unwrap();
            sent.push(format!("{} to {}", msg(&h.message), name(&dst)));
            self.push(self.now + 1, dst.addr, Event::Packet(data));
        }
        for (after, t) in out.timers {
            self.push(self.now + after.as_millis() as u64, from, Event::Timer(t));
        }
        let notes = out.notifications.iter().map(|n| format!("{n:?}").replace("Node { addr: 2, generation: 1 }", "B#1").replace("Node { addr: 2, generation: 0 }", "B#0")).collect();
        (sent, notes)
    }

    fn run_until(&mut self, until: u64) {
        while let Some(Reverse((at, seq, addr))) = self.queue.peek().copied() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            let ev = self.events.remove(&seq).unwrap();
            let Some(p) = self.procs[(addr - 1) as usize].as_mut() else { continue };
            let mut out = Outbox::default();
            let what = match &ev {
                Event::Timer(t) => format!("timer {}", timer(t)),
                Event::Packet(d) => {
                    let h: Header<Node> = codec().decode_header(&mut &d[..]).unwrap();
                    format!("recv {} from {}", msg(&h.message), name(&h.src))
                }
            };
            let result = match ev {
                Event::Timer(t) => p.handle_timer(t, &mut out),
                Event::Packet(d) => p.handle_data(&d, &mut out),
            };
            let members = p.num_members();
            let (sent, notes) = self.absorb(addr, out);
            if addr == 1 && at >= 4500 {
                self.rows.push(format!(
                    "| {:.3} | {what} | {result:?} | {} | {} | {members} |",
                    at as f64 / 1000.0,
                    sent.join(", "),
                    notes.join(", ")
                ));
            }
        }
        self.now = until;
    }
}

fn main() {
    let a = Node { addr: 1, generation: 0 };
    let b = Node { addr: 2, generation: 0 };
    let mut sim = Sim {
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        procs: [
            Some(Foca::new(a, config(), SmallRng::seed_from_u64(1), codec())),
            Some(Foca::new(b, config(), SmallRng::seed_from_u64(2), codec())),
        ],
        rows: Vec::new(),
    };
    let mut out = Outbox::default();
    sim.procs[0].as_mut().unwrap().apply_many([Member::alive(b)].into_iter(), &mut out).unwrap();
    sim.absorb(1, out);
    let mut out = Outbox::default();
    sim.procs[1].as_mut().unwrap().apply_many([Member::alive(a)].into_iter(), &mut out).unwrap();
    sim.absorb(2, out);
    sim.run_until(5_000);
    sim.rows.push("| 5.000 | *B's process dies* | | | | |".into());
    sim.procs[1] = None;
    sim.run_until(20_000);
    sim.rows.push("| 20.000 | *B restarts as B#1 and announces to A* | | | | |".into());
    let mut node_b1: Agent = Foca::new(Node { addr: 2, generation: 1 }, config(), SmallRng::seed_from_u64(3), codec());
    let mut out = Outbox::default();
    node_b1.announce(a, &mut out).unwrap();
    sim.procs[1] = Some(node_b1);
    sim.absorb(2, out);
    sim.run_until(27_000);

    println!("# Node A's timeline\n");
    println!("foca 0.4.1, A and B only; probe_period 1.5 s, probe_rtt 0.5 s, suspect_to_down_after 3.2 s.");
    println!("Timers are handed back at their due time on a simulated clock; packets take 1 ms.");
    println!("Rows are calls into A from t = 4.5 s to t = 27 s.\n");
    println!("| t (s) | input | result | A sent | A notified | A's members |\n|---|---|---|---|---|---|");
    for r in sim.rows {
        println!("{r}");
    }
}
