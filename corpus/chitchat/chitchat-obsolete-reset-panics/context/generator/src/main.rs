//! Regenerates `../catchup-trace.md`: a node applies the two catch-up snapshots of the oracle's
//! reported scenario (same peer, received out of order), and prints the peer's state after each one, the crate's log lines,
//! and the panic. Run: `cargo run --quiet > ../catchup-trace.md`
//! The crate's log lines (INFO and above) are captured without timestamps or ANSI colours, and the
//! panic location is shown relative to the crate's published directory `chitchat-0.11.0/`, wherever
//! the crate was built from; nothing else is trimmed.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use chitchat::{Chitchat, ChitchatId};

/// The oracle's scenario: the node, the peer and the two answers of the report.
#[path = "../../../oracle/tests/catchup_reset.rs"]
#[allow(dead_code)]
mod scenario;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn describe(chitchat: &Chitchat, peer: &ChitchatId) -> String {
    match chitchat.node_state(peer) {
        None => "| (absent) | | | |".to_string(),
        Some(s) => {
            let keys: Vec<String> = s
                .key_values_including_deleted()
                .map(|(k, v)| format!("{k}={}@{}", v.value, v.version))
                .collect();
            format!("| {} | {} | {} | {} |", s.max_version(), s.last_gc_version(), s.num_key_values(), keys.join(", "))
        }
    }
}

fn main() {
    let logs = Buf::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(move || writer.clone())
        .init();
    let panic_msg = Arc::new(Mutex::new(String::new()));
    let pm = panic_msg.clone();
    panic::set_hook(Box::new(move |info| {
        // Wherever the crate is built from, the location is shown as in its published directory.
        let loc = info.location().map(|l| {
            let f = l.file();
            let f = f.rfind("src/").map(|i| &f[i..]).unwrap_or(f);
            format!("chitchat-0.11.0/{f}:{}:{}", l.line(), l.column())
        });
        let msg = info.payload().downcast_ref::<&str>().map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *pm.lock().unwrap() = format!("panicked at {}:\n{msg}", loc.unwrap_or_default());
    }));

    let mut chitchat = scenario::catchup_node();
    let peer = scenario::reported_peer();
    let snapshots = scenario::reported_snapshots();

    println!("# Catch-up trace on indexer-1\n");
    println!("Catch-up snapshots of `searcher-3` as returned by our RPC, in the order they were applied:\n");
    println!("| # | source | max_version | last_gc_version | key-values |");
    println!("|---|---|---|---|---|");
    for (i, s) in snapshots.iter().enumerate() {
        let keys: Vec<String> = s.key_values.iter().map(|(k, v)| format!("{k}={}@{}", v.value, v.version)).collect();
        println!("| {} | {} | {} | {} | {} |", i + 1, s.source, s.max_version, s.last_gc_version, keys.join(", "));
    }
    println!("\n## searcher-3 as seen by indexer-1\n");
    println!("| after | max_version | last_gc_version | #keys | key-values |");
    println!("|---|---|---|---|---|");
    println!("| start {}", describe(&chitchat, &peer));
    for (i, s) in snapshots.iter().enumerate() {
        let res = panic::catch_unwind(AssertUnwindSafe(|| s.apply(&mut chitchat, &peer)));
        match res {
            Ok(()) => println!("| snapshot {} {}", i + 1, describe(&chitchat, &peer)),
            Err(_) => {
                println!("| snapshot {} | (panicked) | | | |", i + 1);
                break;
            }
        }
    }
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    println!("\n## Log output and panic\n\n```text");
    print!("{logs}");
    println!("{}", panic_msg.lock().unwrap());
    println!("```");
}
