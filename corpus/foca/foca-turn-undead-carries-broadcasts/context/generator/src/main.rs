//! Produces context/partition-heal.md: X still believes Y is alive, Y declared X down during
//! a partition and has custom broadcasts queued. X's probe timers fire for three periods; every
//! packet between them is shown with its bytes after the header and the receiver's result.
//! Run from context/generator: `cargo run -q > ../partition-heal.md`. The run is the oracle's
//! (`symptom_scenario`); this program only formats it. Output is not edited.

#[path = "../../../oracle/tests/turn_undead.rs"]
#[allow(dead_code)]
mod scenario;

use foca::{BincodeCodec, Codec};
use scenario::{Event, Node, Observer};

fn name(n: &Node) -> String {
    format!("{}#{}", if n.addr == 1 { "X" } else { "Y" }, n.generation)
}

fn describe(data: &[u8]) -> String {
    let mut buf = data;
    let h = BincodeCodec(bincode::DefaultOptions::new()).decode_header(&mut buf).unwrap();
    format!(
        "{} -> {}: {:?}, {} bytes total, {} bytes after the header: {:02x?}",
        name(&h.src), name(&h.dst), h.message, data.len(), buf.len(), buf
    )
}

struct Rows(Vec<String>);

impl Observer for Rows {
    fn event(&mut self, event: Event<'_>) {
        let row = match event {
            Event::Setup(backlog) => format!("setup: X knows Y as Alive; Y has X as Down (partition); Y has {backlog} custom broadcasts queued"),
            Event::Period(period) => format!("**probe period {period}** (X's ProbeRandomMember timer fires)"),
            Event::Packet(data) => describe(data),
            Event::Handled(who, Ok(())) => format!("{who} handle_data -> Ok(())"),
            Event::Handled(who, Err(e)) => format!("{who} handle_data -> Err: {e}"),
            Event::IndirectFires => "X's SendIndirectProbe timer fires".to_string(),
            Event::Notified(n) => format!("X notification: {n:?}"),
            Event::EndOfPeriod(x, y_view) => format!(
                "end of period: X's identity {}, Y's view of address 1: {:?}",
                name(&x),
                y_view.map(|(id, state)| (name(&id), state))
            ),
        };
        self.0.push(row);
    }
}

fn main() {
    let mut rows = Rows(Vec::new());
    scenario::symptom_scenario(3, &mut rows);

    println!("# After the partition heals\n");
    println!("foca 0.17.1, two members, `Config::simple()` with `notify_down_members = true`, both");
    println!("with a custom broadcast handler (items are `[key, version, value..]`). Identities are");
    println!("`NAME#generation`. Only the probe timers (direct and indirect stage) are fired; suspicion");
    println!("timeouts are not.\n");
    for r in rows.0 {
        println!("- {r}");
    }
}
