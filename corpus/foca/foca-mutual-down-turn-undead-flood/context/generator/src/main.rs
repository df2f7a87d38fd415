//! Produces context/after-partition.md: X and Y each declared the other down during a partition
//! (both still see Z). After the partition heals X announces to Y. Every packet between X and Y
//! is delivered (packets for Z are dropped) and shown with the receiver's foca log lines
//! (DEBUG and up, plain formatter). Stops after 8 deliveries.
//! Run from context/generator: `cargo run -q > ../after-partition.md`. Output is not edited.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Foca, Identity, Member, Notification, Runtime, State, Timer};
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

#[derive(Default)]
struct Outbox {
    packets: VecDeque<(Node, Vec<u8>)>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, n: Notification<Node>) {
        self.notifications.push(n);
    }
    fn send_to(&mut self, to: Node, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }
    fn submit_after(&mut self, _event: Timer<Node>, _after: Duration) {}
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn agent(id: Node, seed: u64) -> Agent {
    let mut config = Config::simple();
    config.notify_down_members = true;
    Foca::new(id, config, SmallRng::seed_from_u64(seed), codec())
}

fn name(n: &Node) -> String {
    format!("{}#{}", ["?", "X", "Y", "Z"][n.addr as usize], n.generation)
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

fn logged<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(move || w.clone())
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let mut lines = Vec::new();
    for l in text.lines() {
        // Drop the span prefix (it repeats the decoded header shown in the table).
        let l = match l.find("}: ") {
            Some(i) if l.contains("handle_data{") => format!("{} {}", l.split_whitespace().next().unwrap(), &l[i + 3..]),
            _ => l.to_string(),
        };
        lines.push(l.replace("Node { addr: 1, generation: 0 }", "X#0").replace("Node { addr: 2, generation: 0 }", "Y#0"));
    }
    (r, lines)
}

fn main() {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };
    let z = Node { addr: 3, generation: 0 };
    let mut nodes = [agent(x, 5), agent(y, 6)];
    let mut out = [Outbox::default(), Outbox::default()];
    nodes[0].apply_many([Member::alive(z), Member::new(y, 0, State::Down)].into_iter(), &mut out[0]).unwrap();
    nodes[1].apply_many([Member::alive(z), Member::new(x, 0, State::Down)].into_iter(), &mut out[1]).unwrap();
    for o in &mut out {
        o.packets.clear();
        o.notifications.clear();
    }
    println!("# X and Y after the partition heals\n");
    println!("foca 0.11.0, `Config::simple()` with `notify_down_members = true`. Identities are");
    println!("`NAME#generation`; `renew()` bumps the generation. Before: X has Z alive and Y down;");
    println!("Y has Z alive and X down. X then calls `announce(Y#0)`.\n");
    nodes[0].announce(y, &mut out[0]).unwrap();

    println!("| # | packet | receiver: handle_data | receiver log |\n|---|---|---|---|");
    let mut n = 0;
    'outer: loop {
        let mut progressed = false;
        for from in 0..2 {
            if let Some((dst, data)) = out[from].packets.pop_front() {
                if dst.addr == 3 {
                    continue;
                }
                let to = (dst.addr - 1) as usize;
                n += 1;
                let mut b = &data[..];
                let h = codec().decode_header(&mut b).unwrap();
                let (r, logs) = logged(|| nodes[to].handle_data(&data, &mut out[to]));
                let notes: Vec<String> = out[to].notifications.drain(..).map(|n| format!("notify {n:?}")).collect();
                println!(
                    "| {n} | {} -> {}: {:?} ({} bytes) | {:?} | {} |",
                    name(&h.src), name(&h.dst), h.message, data.len(), r,
                    logs.into_iter().chain(notes).collect::<Vec<_>>().join("<br>")
                );
                progressed = true;
                if n == 8 {
                    break 'outer;
                }
            }
        }
        if !progressed {
            break;
        }
    }
    println!(
        "\nAfter {n} deliveries: {} packet(s) still queued; X's identity {}, Y's identity {};",
        out[0].packets.len() + out[1].packets.len(),
        name(nodes[0].identity()),
        name(nodes[1].identity())
    );
    println!(
        "X's active members: {:?}; Y's active members: {:?}",
        nodes[0].iter_members().map(|m| name(m.id())).collect::<Vec<_>>(),
        nodes[1].iter_members().map(|m| name(m.id())).collect::<Vec<_>>()
    );
}
