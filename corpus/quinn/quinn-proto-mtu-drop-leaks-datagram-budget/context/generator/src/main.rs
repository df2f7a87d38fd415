//! Produces context/lab-runs.md: the two lab runs of the report (a unit that queues with
//! drop-oldest sends, and one that queues without dropping), replayed on the oracle's simulated
//! path (`run_into` with the plans of seed 1). This program adds only a panic hook and the
//! per-second summary. Run from context/generator: `cargo run -q > ../lab-runs.md`.

#[path = "../../../oracle/tests/path_mtu_drop.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{Outcome, Plan, SendMode};
use std::sync::Mutex;

static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// `.../src/connection/datagrams.rs` -> `src/connection/datagrams.rs`, whatever directory the
/// crate was built from.
fn short(file: &str) -> String {
    match file.rfind("/src/") {
        Some(i) => file[i + 1..].to_string(),
        None => file.to_string(),
    }
}

fn table(plan: &Plan, out: &Outcome, until_ms: u64, step: u64) {
    println!("| time (ms) | client UDP payloads sent | largest | dropped by the path | max_size() at end | send_buffer_space() at end |");
    println!("|---|---|---|---|---|---|");
    let mut t = 0;
    while t < until_ms {
        let hops: Vec<_> = out.hops.iter().filter(|h| h.sent_ms >= t && h.sent_ms < t + step).collect();
        let largest = hops.iter().map(|h| h.len).max().unwrap_or(0);
        let dropped = hops.iter().filter(|h| !h.delivered).count();
        let max_size = out
            .max_size_changes
            .iter()
            .filter(|(m, _)| *m < t + step)
            .last()
            .map(|(_, s)| s.to_string())
            .unwrap_or_else(|| "-".into());
        let space = out
            .space_samples
            .iter()
            .filter(|(m, _)| *m < t + step)
            .last()
            .map(|(_, s)| s.to_string())
            .unwrap_or_else(|| "-".into());
        let mark = if plan.shrink_at_ms >= t && plan.shrink_at_ms < t + step { " (path shrinks)" } else { "" };
        println!(
            "| {}-{}{} | {} | {} | {} | {} | {} |",
            t,
            t + step,
            mark,
            hops.len(),
            largest,
            dropped,
            max_size,
            space
        );
        t += step;
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", short(l.file()), l.line(), l.column()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *PANIC.lock().unwrap() = Some(format!("panicked at {at}: {msg}"));
    }));

    println!("# Lab runs: link simulator, path MTU shrinks under a live connection\n");
    println!("Client = field unit (queues one datagram per ms, sized to max_size() minus 0-39 bytes); server = collector.");
    println!("Times are simulated ms since connect. \"Dropped by the path\": UDP payloads larger than the path's MTU after the change.\n");

    for (title, mode) in [
        ("Run A: unit queueing with drop-oldest (`drop = true`)", SendMode::DropOldest),
        ("Run B: unit queueing without dropping (`drop = false`)", SendMode::NoDrop),
    ] {
        let seed = if mode == SendMode::DropOldest { 1_000 } else { 1_500 };
        let plan = Plan::from_seed(seed, mode);
        let mut out = Outcome::default();
        *PANIC.lock().unwrap() = None;
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario::run_into(plan, &mut out)));
        println!("## {title}\n");
        println!(
            "Path: one-way delay {} ms + up to {} ms jitter; MTU 1500, then {} from t={} ms. datagram_send_buffer_size = {} bytes.\n",
            plan.delay_ms, plan.jitter_ms, plan.mtu_after, plan.shrink_at_ms, plan.send_buffer
        );
        let until = out.hops.iter().map(|h| h.sent_ms).max().unwrap_or(0) + 1;
        table(&plan, &out, until.min(plan.stop_at_ms), 1_000);
        println!();
        println!("datagrams queued: {}, refused as Blocked: {}", out.queued, out.blocked);
        let late = out.received_queued_ms.iter().filter(|&&q| q >= plan.shrink_at_ms).count();
        println!("datagrams received by the collector: {} in total, {} of them queued after the path shrank", out.received_queued_ms.len(), late);
        match res {
            Err(_) => println!("\nThe unit's application thread (quinn-proto 0.11.8) {}", PANIC.lock().unwrap().clone().unwrap_or_default()),
            Ok(()) => {
                println!("black holes detected (client stats): {}; connection alive at the end: {}", out.black_holes, out.alive);
                println!(
                    "after 4 s without producing: send_buffer_space() = {}; a 64-byte drop=false send: {}",
                    out.space_after_drain,
                    match out.small_send_after_drain.as_deref() {
                        Some("") => "accepted".to_string(),
                        Some(e) => format!("refused ({e})"),
                        None => "not tried".to_string(),
                    }
                );
            }
        }
        println!();
    }
}
