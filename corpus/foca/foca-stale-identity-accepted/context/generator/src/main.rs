//! Produces context/stale-packet-trace.md: node A's view of the cluster while node B restarts
//! under a new identity and a gossip packet from B's previous process reaches A late.
//! Run: `cargo run -q > ../stale-packet-trace.md` (from context/generator). Node A's foca
//! tracing output (TRACE) is captured with a plain formatter; nothing is edited by hand.

use std::io::Write;
use std::sync::{Arc, Mutex};

use foca::{AccumulatingRuntime, BincodeCodec, Config, Foca, Identity, Member, State};
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

fn agent(id: Node, seed: u64) -> Agent {
    Foca::new(id, Config::simple(), SmallRng::seed_from_u64(seed), BincodeCodec(bincode::DefaultOptions::new()))
}

fn name(n: &Node) -> String {
    let letter = match n.addr { 1 => "A", 2 => "B", 3 => "C", 4 => "D", _ => "?" };
    format!("{letter}#{}", n.generation)
}

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with node A's log capture on.
fn on_a<R>(log: &Buf, f: impl FnOnce() -> R) -> R {
    let w = log.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(move || w.clone())
        .finish();
    tracing::subscriber::with_default(sub, f)
}

fn view(a: &Agent) -> String {
    let mut v: Vec<String> = a
        .iter_membership_state()
        .map(|m| format!("{} {:?} inc {}", name(m.id()), m.state(), m.incarnation()))
        .collect();
    v.sort();
    v.join(", ")
}

fn drain(rt: &mut AccumulatingRuntime<Node>) -> Vec<(Node, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some((dst, data)) = rt.to_send() {
        out.push((dst, data.to_vec()));
    }
    while rt.to_schedule().is_some() {}
    while rt.to_notify().is_some() {}
    out
}

fn main() {
    let a = Node { addr: 1, generation: 0 };
    let b0 = Node { addr: 2, generation: 0 };
    let b1 = Node { addr: 2, generation: 1 };
    let d = Node { addr: 4, generation: 0 };
    let log = Buf::default();
    let mut rows: Vec<(String, String)> = Vec::new();

    let mut node_a = agent(a, 1);
    let mut rt_a = AccumulatingRuntime::new();
    on_a(&log, || node_a.apply_many([Member::alive(b0), Member::alive(d)].into_iter(), &mut rt_a)).unwrap();
    drain(&mut rt_a);
    rows.push(("A joins B#0 and D".into(), view(&node_a)));

    let mut node_b0 = agent(b0, 2);
    let mut rt_b0 = AccumulatingRuntime::new();
    node_b0.apply_many([Member::alive(a), Member::new(d, 0, State::Suspect)].into_iter(), &mut rt_b0).unwrap();
    drain(&mut rt_b0);
    node_b0.gossip(&mut rt_b0).unwrap();
    let delayed: Vec<Vec<u8>> = drain(&mut rt_b0).into_iter().filter(|(t, _)| *t == a).map(|(_, p)| p).collect();
    rows.push((
        format!("B#0 (which suspects D) gossips; its {} packet(s) to A are delayed in the network", delayed.len()),
        view(&node_a),
    ));
    drop(node_b0);

    let mut node_b1 = agent(b1, 3);
    let mut rt_b1 = AccumulatingRuntime::new();
    node_b1.announce(a, &mut rt_b1).unwrap();
    for (_, p) in drain(&mut rt_b1) {
        on_a(&log, || node_a.handle_data(&p, &mut rt_a)).unwrap();
    }
    drain(&mut rt_a);
    rows.push(("B restarts as B#1 and announces to A".into(), view(&node_a)));

    for p in delayed {
        let r = on_a(&log, || node_a.handle_data(&p, &mut rt_a));
        rows.push((format!("delayed packet from B#0 reaches A: handle_data -> {r:?}"), view(&node_a)));
    }
    drain(&mut rt_a);

    println!("# Node A during B's restart\n");
    println!("Identities are `ADDR#generation`; a higher generation wins an address conflict.\n");
    println!("| step | A's membership state after |\n|---|---|");
    for (s, v) in rows {
        println!("| {s} | {v} |");
    }
    println!("\n## A's foca log (TRACE)\n\n```text");
    print!("{}", String::from_utf8(log.0.lock().unwrap().clone()).unwrap());
    println!("```");
}
