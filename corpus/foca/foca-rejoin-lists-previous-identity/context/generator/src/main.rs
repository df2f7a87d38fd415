//! Produces context/rejoin.md: A's process restarts as A#1 and joins through B, which still
//! lists A#0 as alive. Shows what A#1 is told and notifies, then fires A#1's probe timers three
//! times, delivering packets by address (A#* at 1, B at 2; nothing listens at C's address 3).
//! Run from context/generator: `cargo run -q > ../rejoin.md`. Output is not edited.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Foca, Header, Identity, Member, Notification, Runtime, Timer};
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
    timers: Vec<Timer<Node>>,
    notifications: Vec<Notification<Node>>,
}

impl Runtime<Node> for Outbox {
    fn notify(&mut self, n: Notification<Node>) {
        self.notifications.push(n);
    }
    fn send_to(&mut self, to: Node, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }
    fn submit_after(&mut self, event: Timer<Node>, _after: Duration) {
        self.timers.push(event);
    }
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn name(n: &Node) -> String {
    format!("{}#{}", ["?", "A", "B", "C"][n.addr as usize], n.generation)
}

fn names(s: String) -> String {
    let mut s = s;
    for (a, g) in [(1, 0), (1, 1), (2, 0), (3, 0)] {
        s = s.replace(&format!("Node {{ addr: {a}, generation: {g} }}"), &name(&Node { addr: a, generation: g }));
    }
    s
}

fn describe(data: &[u8]) -> String {
    let h: Header<Node> = codec().decode_header(&mut &data[..]).unwrap();
    names(format!("{} -> {}: {:?}", name(&h.src), name(&h.dst), h.message))
}

fn main() {
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let a0 = Node { addr: 1, generation: 0 };
    let a1 = Node { addr: 1, generation: 1 };
    let b = Node { addr: 2, generation: 0 };
    let c = Node { addr: 3, generation: 0 };
    let mut rows: Vec<String> = Vec::new();

    let mut node_b: Agent = Foca::new(b, Config::simple(), SmallRng::seed_from_u64(2), codec());
    let mut out_b = Outbox::default();
    node_b.apply_many([Member::alive(a0), Member::alive(c)].into_iter(), &mut out_b).unwrap();
    out_b = Outbox::default();
    rows.push("B's members: A#0 (alive, A's previous process), C#0".into());

    let mut node_a: Agent = Foca::new(a1, Config::simple(), SmallRng::seed_from_u64(1), codec());
    let mut out_a = Outbox::default();
    node_a.announce(b, &mut out_a).unwrap();

    // nodes[0] = process at address 1, nodes[1] = process at address 2
    let mut round = 0;
    loop {
        let mut moved = true;
        while moved {
            moved = false;
            for from in 0..2 {
                let out = if from == 0 { &mut out_a } else { &mut out_b };
                let Some((dst, data)) = out.packets.pop_front() else { continue };
                moved = true;
                let line = describe(&data);
                let (node, o) = match dst.addr {
                    1 => (&mut node_a, &mut out_a),
                    2 => (&mut node_b, &mut out_b),
                    _ => {
                        rows.push(format!("{line} (nobody at address {})", dst.addr));
                        continue;
                    }
                };
                let r = node.handle_data(&data, &mut *o);
                let who = name(node.identity());
                let notes: Vec<String> = o.notifications.drain(..).map(|n| names(format!("{n:?}"))).collect();
                rows.push(format!(
                    "{line} | {who} handle_data -> {}{}",
                    names(format!("{r:?}")),
                    if notes.is_empty() { String::new() } else { format!("; {who} notifies {}", notes.join(", ")) }
                ));
            }
        }
        if round == 3 {
            break;
        }
        round += 1;
        rows.push(format!(
            "**A#1 probe round {round}** (A#1's members: {})",
            node_a.iter_members().map(name).collect::<Vec<_>>().join(", ")
        ));
        let timers: Vec<Timer<Node>> = out_a.timers.drain(..).collect();
        for t in timers {
            if matches!(t, Timer::ProbeRandomMember(_) | Timer::SendIndirectProbe { .. }) {
                node_a.handle_timer(t, &mut out_a).unwrap();
            } else {
                out_a.timers.push(t);
            }
        }
    }

    println!("# A's process rejoins after a restart\n");
    println!("foca 0.6.0, `Config::simple()`. Identities are `NAME#generation`; packets are delivered");
    println!("by address. A#1's probe timers (direct and indirect stage) are fired by hand, all other");
    println!("timers are held.\n");
    for r in rows {
        println!("- {r}");
    }
}
