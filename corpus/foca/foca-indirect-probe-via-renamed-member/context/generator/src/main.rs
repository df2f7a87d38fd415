//! Produces context/message-sequence.md: the packets between node A and node P (addressed by
//! the address part of the identity) while P restarts during one of A's probe cycles, plus the
//! timers A schedules and fires and every `handle_data` result.
//! Run from context/generator: `cargo run -q > ../message-sequence.md`. Output is not edited.

use foca::{AccumulatingRuntime, BincodeCodec, Codec, Config, Foca, Identity, Member, Message, Timer};
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
        Some(Node { addr: self.addr, generation: self.generation.wrapping_add(1) })
    }
    fn addr(&self) -> u8 {
        self.addr
    }
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn name(n: &Node) -> String {
    format!("{}#{}", if n.addr == 1 { "A" } else { "P" }, n.generation)
}

fn describe(data: &[u8]) -> String {
    let mut buf = data;
    let h = codec().decode_header(&mut buf).unwrap();
    let m = match h.message {
        Message::PingReq { target, probe_number } => format!("PingReq {{ target: {}, probe: {probe_number} }}", name(&target)),
        Message::IndirectPing { origin, probe_number } => format!("IndirectPing {{ origin: {}, probe: {probe_number} }}", name(&origin)),
        Message::IndirectAck { target, probe_number } => format!("IndirectAck {{ target: {}, probe: {probe_number} }}", name(&target)),
        Message::ForwardedAck { origin, probe_number } => format!("ForwardedAck {{ origin: {}, probe: {probe_number} }}", name(&origin)),
        other => format!("{other:?}"),
    };
    format!("{} -> {}: {m}", name(&h.src), name(&h.dst))
}

struct Log(Vec<String>);
impl Log {
    fn row(&mut self, at: &str, event: String) {
        self.0.push(format!("| {} | {at} | {event} |", self.0.len() + 1));
    }
}

fn timer_name(t: &Timer<Node>) -> String {
    match t {
        Timer::ProbeRandomMember(_) => "ProbeRandomMember".into(),
        Timer::SendIndirectProbe { probed_id, .. } => format!("SendIndirectProbe {{ probed_id: {} }}", name(probed_id)),
        Timer::ChangeSuspectToDown { member_id, .. } => format!("ChangeSuspectToDown {{ member_id: {} }}", name(member_id)),
        Timer::RemoveDown(id) => format!("RemoveDown({})", name(id)),
        other => format!("{other:?}"),
    }
}

/// Drains one runtime; returns packets, logs scheduled timers.
fn drain(who: &str, rt: &mut AccumulatingRuntime<Node>, log: &mut Log, timers: &mut Vec<Timer<Node>>) -> Vec<(Node, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some((dst, data)) = rt.to_send() {
        out.push((dst, data.to_vec()));
    }
    while let Some((after, t)) = rt.to_schedule() {
        log.row(who, format!("schedules {} in {} ms", timer_name(&t), after.as_millis()));
        timers.push(t);
    }
    while let Some(n) = rt.to_notify() {
        log.row(who, format!("notification {n:?}").replace("Node { addr: 2, generation: 0 }", "P#0").replace("Node { addr: 2, generation: 1 }", "P#1").replace("Node { addr: 1, generation: 0 }", "A#0"));
    }
    out
}

fn main() {
    let a = Node { addr: 1, generation: 0 };
    let p0 = Node { addr: 2, generation: 0 };
    let p1 = Node { addr: 2, generation: 1 };
    let mut log = Log(Vec::new());
    let mut timers_a = Vec::new();
    let mut ignored = Vec::new();

    let mut node_a: Agent = Foca::new(a, Config::simple(), SmallRng::seed_from_u64(11), codec());
    let mut rt_a = AccumulatingRuntime::new();
    node_a.apply_many([Member::alive(p0)].into_iter(), &mut rt_a).unwrap();
    log.row("A#0", "learns P#0 (alive)".into());
    drain("A#0", &mut rt_a, &mut log, &mut timers_a);

    let probe = timers_a.remove(0);
    log.row("A#0", format!("timer fires: {}", timer_name(&probe)));
    node_a.handle_timer(probe, &mut rt_a).unwrap();
    for (_, d) in drain("A#0", &mut rt_a, &mut log, &mut timers_a) {
        log.row("network", format!("{} (dropped: P#0 process is hung)", describe(&d)));
    }
    let indirect = timers_a.iter().position(|t| matches!(t, Timer::SendIndirectProbe { .. })).unwrap();
    let indirect = timers_a.remove(indirect);

    log.row("P", "process restarted with identity P#1 (same address 2)".into());
    let mut node_p: Agent = Foca::new(p1, Config::simple(), SmallRng::seed_from_u64(22), codec());
    let mut rt_p = AccumulatingRuntime::new();
    node_p.announce(a, &mut rt_p).unwrap();
    let mut queue = drain("P#1", &mut rt_p, &mut log, &mut ignored);

    let mut fire = Some(indirect);
    loop {
        while !queue.is_empty() {
            let mut next = Vec::new();
            for (dst, d) in queue.drain(..) {
                log.row("network", describe(&d));
                let (node, rt, who) = if dst.addr == 1 { (&mut node_a, &mut rt_a, "A#0") } else { (&mut node_p, &mut rt_p, "P#1") };
                let res = node.handle_data(&d, &mut *rt);
                log.row(who, format!("handle_data -> {res:?}"));
                let t = if who == "A#0" { &mut timers_a } else { &mut ignored };
                next.extend(drain(who, rt, &mut log, t));
            }
            queue = next;
        }
        match fire.take() {
            Some(t) => {
                log.row("A#0", format!("timer fires: {} (members: {:?})", timer_name(&t), node_a.iter_members().map(|m| name(m.id())).collect::<Vec<_>>()));
                node_a.handle_timer(t, &mut rt_a).unwrap();
                queue = drain("A#0", &mut rt_a, &mut log, &mut timers_a);
            }
            None => break,
        }
    }

    println!("# Message sequence: P restarts during A's probe of it\n");
    println!("Identities are `NAME#generation`; packets are delivered by address, so anything sent");
    println!("to P#0 or P#1 reaches whichever process listens on address 2. Config::simple().\n");
    println!("| # | where | event |\n|---|---|---|");
    for r in log.0 {
        println!("{r}");
    }
}
