//! Produces context/message-sequence.md: the packets between node A and node P (addressed by
//! the address part of the identity) while P restarts during one of A's probe cycles, plus the
//! timers A schedules and fires and every `handle_data` result.
//! Run from context/generator: `cargo run -q > ../message-sequence.md`. The run is the oracle's
//! (`symptom_scenario`); this program only formats what it reports. Output is not edited.

#[path = "../../../oracle/tests/indirect_probe.rs"]
#[allow(dead_code)]
mod scenario;

use foca::{Codec, Message, Timer};
use scenario::{Event, Node, Observer};

fn name(n: &Node) -> String {
    format!("{}#{}", if n.addr == 1 { "A" } else { "P" }, n.generation)
}

fn describe(data: &[u8]) -> String {
    let mut buf = data;
    let h = scenario::codec().decode_header(&mut buf).unwrap();
    let m = match h.message {
        Message::PingReq { target, probe_number } => format!("PingReq {{ target: {}, probe: {probe_number} }}", name(&target)),
        Message::IndirectPing { origin, probe_number } => format!("IndirectPing {{ origin: {}, probe: {probe_number} }}", name(&origin)),
        Message::IndirectAck { target, probe_number } => format!("IndirectAck {{ target: {}, probe: {probe_number} }}", name(&target)),
        Message::ForwardedAck { origin, probe_number } => format!("ForwardedAck {{ origin: {}, probe: {probe_number} }}", name(&origin)),
        other => format!("{other:?}"),
    };
    format!("{} -> {}: {m}", name(&h.src), name(&h.dst))
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

/// The table rows, numbered in order.
struct Log(Vec<String>);

impl Observer for Log {
    fn event(&mut self, at: &str, event: Event<'_>) {
        let text = match event {
            Event::Learns(id) => format!("learns {} (alive)", name(&id)),
            Event::Schedules(t, after) => format!("schedules {} in {} ms", timer_name(t), after.as_millis()),
            Event::Notified(n) => format!("notification {n:?}")
                .replace("Node { addr: 2, generation: 0 }", "P#0")
                .replace("Node { addr: 2, generation: 1 }", "P#1")
                .replace("Node { addr: 1, generation: 0 }", "A#0"),
            Event::Fires(t, None) => format!("timer fires: {}", timer_name(t)),
            Event::Fires(t, Some(members)) => format!(
                "timer fires: {} (members: {:?})",
                timer_name(t),
                members.iter().map(name).collect::<Vec<_>>()
            ),
            Event::Packet(d, true) => format!("{} (dropped: P#0 process is hung)", describe(d)),
            Event::Packet(d, false) => describe(d),
            Event::Restarted(id) => format!("process restarted with identity {} (same address {})", name(&id), id.addr),
            Event::Handled(res) => format!("handle_data -> {res:?}"),
        };
        self.0.push(format!("| {} | {at} | {text} |", self.0.len() + 1));
    }
}

fn main() {
    let mut log = Log(Vec::new());
    scenario::symptom_scenario(&mut log);

    println!("# Message sequence: P restarts during A's probe of it\n");
    println!("Identities are `NAME#generation`; packets are delivered by address, so anything sent");
    println!("to P#0 or P#1 reaches whichever process listens on address 2. Config::simple().\n");
    println!("| # | where | event |\n|---|---|---|");
    for r in log.0 {
        println!("{r}");
    }
}
