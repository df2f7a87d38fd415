//! Produces context/stalled-peer-trace.md: what the node and the stalled peer exchanged in the
//! reported run, sampled after each batch of the peer's pings. The run is the oracle's
//! (`symptom_scenario`); this program only formats it.
//! Run from context/generator: `cargo run -q > ../stalled-peer-trace.md`.

#[path = "../../../oracle/tests/stalled_peer.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let plan = scenario::symptom_plan();
    let out = scenario::symptom_scenario();
    println!("# One run: node V and a peer P that stops reading");
    println!();
    println!(
        "V is our service (yamux server side, default config). P is a client we reimplemented from \
         a capture: it opens a stream, then stops reading (its side of the connection holds only {} \
         unread bytes) while it keeps sending ping frames in batches of {}, {} in all. Afterwards P \
         reads everything that is waiting. Numbers are counted outside V, at the socket.",
        plan.cap, plan.batch, plan.pings
    );
    println!();
    println!("## While P is not reading");
    println!();
    println!("| round | pings sent by P | frames read by V | bytes waiting for P |");
    println!("|---|---|---|---|");
    let n = out.timeline.len();
    for (i, (sent, read, waiting, _)) in out.timeline.iter().enumerate() {
        if i < 5 || i + 3 >= n || i % 5 == 4 {
            println!("| {} | {} | {} | {} |", i + 1, sent, read, waiting);
        }
    }
    println!();
    println!("## Steps");
    println!();
    for line in &out.log {
        println!("- {line}");
    }
    println!();
    if let Some(c) = &out.crash {
        println!("V panicked: `{c}`");
        println!();
    }
    println!("## What we expected but did not get");
    println!();
    if out.violations.is_empty() {
        println!("- nothing: the run looked fine");
    }
    for v in &out.violations {
        println!("- {v}");
    }
}
