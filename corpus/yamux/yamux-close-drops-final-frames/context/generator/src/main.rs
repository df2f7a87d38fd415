//! Produces context/close-trace.md: what our node's application did before closing the
//! connection and what the peer received, in the reported run. The run is the oracle's
//! (`symptom_scenario`); this program only formats it.
//! Run from context/generator: `cargo run -q > ../close-trace.md`.

#[path = "../../../oracle/tests/graceful_close.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let out = scenario::symptom_scenario();
    println!("# Closing a session: what the node did and what the peer received");
    println!();
    println!(
        "V is our node (yamux client side, default config). P is a test peer that decodes \
         every frame V writes until V closes the transport. Before the run below, each stream \
         carried a short greeting from V, which P received. `V app` lines are calls our \
         application made, in order, with nothing else running in between."
    );
    println!();
    for line in &out.log {
        println!("- {line}");
    }
    println!();
    if let Some(c) = &out.crash {
        println!("V panicked: `{c}`");
        println!();
    }
    println!("## Expected but missing on P's side");
    println!();
    if out.violations.is_empty() {
        println!("- nothing: the run looked fine");
    }
    for v in &out.violations {
        println!("- {v}");
    }
}
