//! Produces context/after-partition.md: X and Y each declared the other down during a partition
//! (both still see Z). After the partition heals X announces to Y. Every packet between X and Y
//! is delivered (packets for Z are dropped) and shown with the receiver's foca log lines
//! (DEBUG and up, plain formatter). Stops after 8 deliveries.
//! Run from context/generator: `cargo run -q > ../after-partition.md`. The run is the oracle's
//! (`symptom_scenario`); this program only captures and formats it. Output is not edited.

#[path = "../../../oracle/tests/mutual_down.rs"]
#[allow(dead_code)]
mod scenario;

use std::io::Write;
use std::sync::{Arc, Mutex};

use foca::{BincodeCodec, Codec, Notification};
use scenario::{Node, Observer};

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

/// Prints one table row per delivery, with the receiver's log captured around it.
struct Table {
    logs: Vec<String>,
}

impl Observer for Table {
    fn deliver(&mut self, call: &mut dyn FnMut()) {
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, call);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        self.logs = text
            .lines()
            .map(|l| {
                // Drop the span prefix (it repeats the decoded header shown in the table).
                let l = match l.find("}: ") {
                    Some(i) if l.contains("handle_data{") => {
                        format!("{} {}", l.split_whitespace().next().unwrap(), &l[i + 3..])
                    }
                    _ => l.to_string(),
                };
                l.replace("Node { addr: 1, generation: 0 }", "X#0")
                    .replace("Node { addr: 2, generation: 0 }", "Y#0")
            })
            .collect();
    }

    fn delivered(&mut self, n: usize, data: &[u8], result: &Result<(), foca::Error>, notes: Vec<Notification<Node>>) {
        let mut b = data;
        let h = BincodeCodec(bincode::DefaultOptions::new()).decode_header(&mut b).unwrap();
        let notes = notes.into_iter().map(|n| format!("notify {n:?}"));
        println!(
            "| {n} | {} -> {}: {:?} ({} bytes) | {:?} | {} |",
            name(&h.src),
            name(&h.dst),
            h.message,
            data.len(),
            result,
            self.logs.drain(..).chain(notes).collect::<Vec<_>>().join("<br>")
        );
    }
}

fn main() {
    println!("# X and Y after the partition heals\n");
    println!("foca 0.11.0, `Config::simple()` with `notify_down_members = true`. Identities are");
    println!("`NAME#generation`; `renew()` bumps the generation. Before: X has Z alive and Y down;");
    println!("Y has Z alive and X down. X then calls `announce(Y#0)`.\n");
    println!("| # | packet | receiver: handle_data | receiver log |\n|---|---|---|---|");
    let out = scenario::symptom_scenario(8, &mut Table { logs: Vec::new() });
    println!(
        "\nAfter {} deliveries: {} packet(s) still queued; X's identity {}, Y's identity {};",
        out.delivered,
        out.queued,
        name(&out.identities[0]),
        name(&out.identities[1])
    );
    println!(
        "X's active members: {:?}; Y's active members: {:?}",
        out.active_members[0].iter().map(name).collect::<Vec<_>>(),
        out.active_members[1].iter().map(name).collect::<Vec<_>>()
    );
}
