//! Produces context/link-trace.md: two runs between nodes A and B, the reported one (a short
//! congestion while A sends a request) and one with large requests crossing over a small
//! link, with what each node still held at the end. The runs are the oracle's; this program
//! only formats them. Run from context/generator: `cargo run -q > ../link-trace.md`.

#[path = "../../../oracle/tests/stalled_flush.rs"]
#[allow(dead_code)]
mod scenario;

fn show(title: &str, out: &scenario::Outcome) {
    println!("## {title}");
    println!();
    for line in &out.log {
        println!("- {line}");
    }
    println!();
    if let Some(c) = &out.crash {
        println!("A node panicked: `{c}`");
        println!();
    }
}

fn main() {
    println!("# Two nodes, one link");
    println!();
    println!(
        "A and B run our service (yamux, default config; A is the client side). The link between \
         them is a test transport that behaves like our encrypted sessions: what a node writes \
         stays in its session buffer until the node flushes it, and a flush can be refused while \
         the link is congested; the transport wakes the node when it can go on. Each request is \
         a new stream: the request, the end of the requester's side, then the reply and the end \
         of the stream. Both nodes run on an executor that polls a task only after it was woken."
    );
    println!();
    show("Run 1: a short congestion while A sends a request", &scenario::symptom_scenario());
    show(
        &format!(
            "Run 2: large requests both ways over a {} byte link, no congestion",
            scenario::crossing_plan().capacity
        ),
        &scenario::run(&scenario::crossing_plan()),
    );
}
