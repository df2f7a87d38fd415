//! Produces context/victim-log.md: what the victim node and the pruning peer exchanged in the
//! reported run, and where the victim panicked. The run is the oracle's (`symptom_scenario`);
//! this program only adds a panic hook (the panic's location) and
//! the formatting. Run from context/generator: `cargo run -q > ../victim-log.md`.

#[path = "../../../oracle/tests/prune_backoff.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;

static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// `.../src/backoff.rs` -> `src/backoff.rs`, whatever directory the crate was built from.
fn short(file: &str) -> String {
    match file.rfind("/src/") {
        Some(i) => file[i + 1..].to_string(),
        None => file.to_string(),
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        // A location inside the standard library changes with the toolchain; name it only.
        let at = info
            .location()
            .map(|l| {
                if l.file().contains("/library/std/") {
                    "the standard library (`Instant` arithmetic)".to_string()
                } else {
                    format!("{}:{}", short(l.file()), l.line())
                }
            })
            .unwrap_or_default();
        *PANIC.lock().unwrap() = Some(at);
    }));

    let plan = scenario::symptom_plan();
    let out = scenario::symptom_scenario();
    println!("# Victim node: one run");
    println!();
    println!(
        "V runs libp2p-gossipsub with heartbeat_interval {} ms, backoff_slack {}, prune_backoff {} ms, \
         no peer scoring, subscribed to `blocks`. H1 is another node of ours. X is a third-party \
         client that connects to V and speaks gossipsub v1.1 (`/meshsub/1.1.0`). Lines are in the \
         order things happened; `A -> B` lines are control messages seen on the wire.",
        plan.heartbeat_ms, plan.backoff_slack, plan.prune_backoff_ms
    );
    println!();
    println!("| # | event |");
    println!("|---|---|");
    for (i, line) in out.log.iter().enumerate() {
        println!("| {} | {} |", i + 1, line);
    }
    println!();
    match PANIC.lock().unwrap().take() {
        Some(at) if out.crash.is_some() => {
            println!("## Panic");
            println!();
            println!("```text");
            println!("panicked at {at}:");
            println!("{}", out.crash.as_deref().unwrap_or(""));
            println!("```");
            println!();
            println!("Before the panic V handled X's PRUNE without any error or warning in its log.");
        }
        _ => println!("V did not panic in this run."),
    }
}
