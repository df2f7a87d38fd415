//! Produces context/trace.md: the reported run (three peers, peer 1 broadcasts 200 messages at
//! once) as the simulator sees it: frames per link and kind, refused writes, connection and
//! neighbour events, deliveries. The run is the oracle's (`symptom_scenario`); this program only
//! groups and formats what it reports.
//! Run from context/generator: `cargo run -q > ../trace.md`.

#[path = "../../../oracle/tests/burst_announcements.rs"]
#[allow(dead_code)]
mod scenario;

use std::collections::BTreeMap;

use n0_future::time::Duration;
use scenario::{Observer, Peer, Seen};

#[derive(Default)]
struct Section {
    title: String,
    /// (from, to, kind) -> (frames, largest frame in bytes)
    frames: BTreeMap<(Peer, Peer, String), (usize, usize)>,
    events: Vec<String>,
    /// peer -> (messages delivered, by whom)
    delivered: BTreeMap<Peer, BTreeMap<Peer, usize>>,
}

#[derive(Default)]
struct Trace {
    sections: Vec<Section>,
}

fn ms(at: Duration) -> String {
    format!("{:.1}", at.as_secs_f64() * 1000.0)
}

impl Trace {
    fn cur(&mut self) -> &mut Section {
        self.sections.last_mut().expect("a phase started")
    }
}

impl Observer for Trace {
    fn seen(&mut self, at: Duration, what: Seen<'_>) {
        match what {
            Seen::Phase(p) => self.sections.push(Section {
                title: format!("{} (t = {} ms)", p, ms(at)),
                ..Default::default()
            }),
            Seen::Sent { from, to, msg, bytes } => {
                let e = self.cur().frames.entry((from, to, scenario::kind(msg))).or_default();
                e.0 += 1;
                e.1 = e.1.max(bytes);
            }
            Seen::Refused { from, to, msg, bytes, limit } => {
                let text = format!(
                    "{} ms: peer {from} -> peer {to}: {} frame with {} ids, {bytes} bytes (limit {limit}): write refused, connection closed",
                    ms(at),
                    scenario::kind(msg),
                    scenario::announcements(msg)
                );
                self.cur().events.push(text);
            }
            Seen::Disconnected { node, peer } => {
                let text = format!("{} ms: peer {node}: connection to peer {peer} closed", ms(at));
                self.cur().events.push(text);
            }
            Seen::Up { node, peer } => {
                let text = format!("{} ms: peer {node}: NeighborUp({peer})", ms(at));
                self.cur().events.push(text);
            }
            Seen::Down { node, peer } => {
                let text = format!("{} ms: peer {node}: NeighborDown({peer})", ms(at));
                self.cur().events.push(text);
            }
            Seen::Received { node, from, .. } => {
                *self.cur().delivered.entry(node).or_default().entry(from).or_default() += 1;
            }
        }
    }
}

fn main() {
    let mut trace = Trace::default();
    let plan = scenario::symptom_plan();
    let out = scenario::symptom_scenario(&mut trace);

    println!("# Trace: peer 1 broadcasts {} messages at once\n", plan.burst);
    println!(
        "{} peers, one topic, `Config::default()` (max_message_size {}), {} ms per link, frames \
         delivered in order on each link. Like the network layer, the simulator refuses to write \
         a frame of max_message_size bytes or more and closes that connection. Peers 2 and 3 \
         joined through peer 1. Frame kinds are `layer/message`.\n",
        plan.nodes,
        plan.limit,
        plan.fixed_latency.unwrap_or(0)
    );
    for s in &trace.sections {
        println!("## {}\n", s.title);
        if !s.frames.is_empty() {
            println!("| link | kind | frames | largest (bytes) |\n|---|---|---|---|");
            for ((from, to, kind), (n, max)) in &s.frames {
                println!("| {from} -> {to} | {kind} | {n} | {max} |");
            }
            println!();
        }
        for e in &s.events {
            println!("- {e}");
        }
        if !s.events.is_empty() {
            println!();
        }
        for (node, by) in &s.delivered {
            let parts: Vec<String> = by.iter().map(|(f, n)| format!("{n} from peer {f}")).collect();
            println!("- peer {node} delivered {}", parts.join(", "));
        }
        if !s.delivered.is_empty() {
            println!();
        }
    }
    println!("## End\n");
    println!("- neighbours before the burst: {:?}", out.neighbors_before);
    println!("- neighbours at the end: {:?}", out.neighbors_after);
    println!("- frames refused: {}", out.oversized.len());
    println!(
        "- messages not delivered exactly once: {}",
        out.wrong_deliveries.len()
    );
}
