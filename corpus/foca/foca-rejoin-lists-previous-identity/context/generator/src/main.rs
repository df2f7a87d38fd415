//! Produces context/rejoin.md: A's process restarts as A#1 and joins through B, which still
//! lists A#0 as alive. Shows what A#1 is told and notifies, then fires A#1's probe timers three
//! times, delivering packets by address (A#* at 1, B at 2; nothing listens at C's address 3).
//! Run from context/generator: `cargo run -q > ../rejoin.md`. The run is the oracle's
//! (`symptom_scenario`); this program only formats it. Output is not edited.

#[path = "../../../oracle/tests/previous_identity.rs"]
#[allow(dead_code)]
mod scenario;

use foca::{BincodeCodec, Codec, Header};
use scenario::{Event, Node, Observer};

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
    let h: Header<Node> = BincodeCodec(bincode::DefaultOptions::new()).decode_header(&mut &data[..]).unwrap();
    names(format!("{} -> {}: {:?}", name(&h.src), name(&h.dst), h.message))
}

struct Rows(Vec<String>);

impl Observer for Rows {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Packet(data, dst, None) => {
                self.0.push(format!("{} (nobody at address {})", describe(data), dst.addr));
            }
            Event::Packet(data, _, Some((who, r, notes))) => {
                let who = name(&who);
                let notes: Vec<String> = notes.into_iter().map(|n| names(format!("{n:?}"))).collect();
                self.0.push(format!(
                    "{} | {who} handle_data -> {}{}",
                    describe(data),
                    names(format!("{r:?}")),
                    if notes.is_empty() { String::new() } else { format!("; {who} notifies {}", notes.join(", ")) }
                ));
            }
            Event::ProbeRound(round, members) => self.0.push(format!(
                "**A#1 probe round {round}** (A#1's members: {})",
                members.iter().map(name).collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

fn main() {
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let mut rows = Rows(vec!["B's members: A#0 (alive, A's previous process), C#0".into()]);
    scenario::symptom_scenario(3, &mut rows);

    println!("# A's process rejoins after a restart\n");
    println!("foca 0.6.0, `Config::simple()`. Identities are `NAME#generation`; packets are delivered");
    println!("by address. A#1's probe timers (direct and indirect stage) are fired by hand, all other");
    println!("timers are held.\n");
    for r in rows.0 {
        println!("- {r}");
    }
}
