//! Produces context/stale-packet-trace.md: node A's view of the cluster while node B restarts
//! under a new identity and a gossip packet from B's previous process reaches A late.
//! Run: `cargo run -q > ../stale-packet-trace.md` (from context/generator). The scenario is the
//! oracle's own (`symptom_scenario`); this program only captures node A's foca tracing output
//! (TRACE) with a plain formatter and formats the steps. Nothing is edited by hand.

#[path = "../../../oracle/tests/stale_identity.rs"]
#[allow(dead_code)]
mod scenario;

use std::io::Write;
use std::sync::{Arc, Mutex};

use scenario::{Agent, Node, Observer};

fn name(n: &Node) -> String {
    let letter = match n.addr {
        1 => "A",
        2 => "B",
        3 => "C",
        4 => "D",
        _ => "?",
    };
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

fn view(a: &Agent) -> String {
    let mut v: Vec<String> = a
        .iter_membership_state()
        .map(|m| format!("{} {:?} inc {}", name(m.id()), m.state(), m.incarnation()))
        .collect();
    v.sort();
    v.join(", ")
}

/// Captures node A's log and the table rows.
struct Capture {
    log: Buf,
    rows: Vec<(String, String)>,
}

impl Observer for Capture {
    fn on_a(&mut self, call: &mut dyn FnMut()) {
        let w = self.log.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, call)
    }

    fn step(&mut self, what: String, a: &Agent) {
        self.rows.push((what, view(a)));
    }
}

fn main() {
    let mut cap = Capture {
        log: Buf::default(),
        rows: Vec::new(),
    };
    scenario::symptom_scenario(&mut cap);

    println!("# Node A during B's restart\n");
    println!("Identities are `ADDR#generation`; a higher generation wins an address conflict.\n");
    println!("| step | A's membership state after |\n|---|---|");
    for (s, v) in &cap.rows {
        println!("| {s} | {v} |");
    }
    println!("\n## A's foca log (TRACE)\n\n```text");
    print!("{}", String::from_utf8(cap.log.0.lock().unwrap().clone()).unwrap());
    println!("```");
}
