//! Produces context/crash-trace.md: the frames the client sent in the reported run and where
//! the node panicked. The run is the oracle's (`symptom_scenario`); this program only adds a
//! panic hook (the panic's location) and the formatting.
//! Run from context/generator: `cargo run -q > ../crash-trace.md`.

#[path = "../../../oracle/tests/oversized_open.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;

static PANIC: Mutex<Option<String>> = Mutex::new(None);

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
    println!("# One connection from the upload client");
    println!();
    println!(
        "V is our node (yamux server side, default config). P replays the frames the client \
         sent, decoded from a capture (12-byte yamux headers, data frames with their sizes). \
         Lines are in the order things happened."
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
