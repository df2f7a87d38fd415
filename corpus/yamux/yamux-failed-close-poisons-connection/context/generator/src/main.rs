//! Produces context/shutdown-trace.md: the calls our application made on one connection in the
//! reported run, where the peer hung up, and where the node panicked. The run is the oracle's
//! (`symptom_scenario`); this program only adds a panic hook (the panic's location) and the
//! formatting. Run from context/generator: `cargo run -q > ../shutdown-trace.md`.

#[path = "../../../oracle/tests/hangup_during_close.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;

static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// `.../src/connection.rs` -> `src/connection.rs`, whatever directory the crate was built from.
fn short(file: &str) -> String {
    match file.rfind("/src/") {
        Some(i) => file[i + 1..].to_string(),
        None => file.to_string(),
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", short(l.file()), l.line()))
            .unwrap_or_default();
        *PANIC.lock().unwrap() = Some(at);
    }));
    let out = scenario::symptom_scenario();
    println!("# Shutting down one session while the peer goes away");
    println!();
    println!(
        "V is our node (yamux client side, default config) on a test transport. P is a test \
         peer that hangs up (its end of the transport goes away) after it has received five \
         bytes of what V sends once V starts closing. Lines are in the order they happened; \
         `V app` lines are calls our application made on the stream or the connection."
    );
    println!();
    for line in &out.log {
        println!("- {line}");
    }
    println!();
    if let (Some(msg), Some(at)) = (&out.crash, PANIC.lock().unwrap().take()) {
        println!("## Panic");
        println!();
        println!("```text");
        println!("panicked at yamux {at}:");
        println!("{msg}");
        println!("```");
    }
}
