//! Produces context/session-trace.md: the frames the peer sent on one stream in the reported
//! run and what our handler did. The run is the oracle's (`symptom_scenario`); this program
//! only formats it. Run from context/generator: `cargo run -q > ../session-trace.md`.

#[path = "../../../oracle/tests/half_close.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let out = scenario::symptom_scenario();
    println!("# One request from the gateway peer");
    println!();
    println!(
        "V is our service (yamux server side, default config); its handler for each inbound \
         stream reads the request until end-of-stream, writes a reply and closes the stream. P is \
         a test client that replays the frames the gateway sent (headers decoded from a capture). \
         V's tasks run on an executor that polls a task only after it was woken; between P's \
         frames V ran until no task was woken."
    );
    println!();
    println!("## Frames and outcome");
    println!();
    for line in &out.log {
        println!("- {line}");
    }
    println!();
    if let Some(c) = &out.crash {
        println!("V panicked: `{c}`");
        println!();
    }
    println!("## Unexpected");
    println!();
    if out.violations.is_empty() {
        println!("- nothing: the run looked fine");
    }
    for v in &out.violations {
        println!("- {v}");
    }
}
