//! Regenerates `../catchup-trace.md`: a node applies two catch-up snapshots of the same peer,
//! received out of order, and prints the peer's state after each one, the crate's log lines,
//! and the panic. Run: `cargo run --quiet > ../catchup-trace.md`
//! The crate's log lines (INFO and above) are captured without timestamps or ANSI colours, and the
//! registry path in front of `chitchat-0.11.0/` is cut from the panic location; nothing else is trimmed.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitchat::{Chitchat, ChitchatConfig, ChitchatId, DeletionStatus, FailureDetectorConfig, VersionedValue};
use tokio::sync::watch;

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

fn addr(port: u16) -> SocketAddr {
    ([10, 0, 0, (port - 7000) as u8], port).into()
}

fn kv(key: &str, value: &str, version: u64) -> (String, VersionedValue) {
    (key.to_string(), VersionedValue { value: value.to_string(), version, status: DeletionStatus::Set })
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
        // The registry path in front of the crate directory is cut off; the rest is verbatim.
        let loc = info.location().map(|l| {
            let f = l.file();
            let f = f.find("chitchat-").map(|i| &f[i..]).unwrap_or(f);
            format!("{f}:{}:{}", l.line(), l.column())
        });
        let msg = info.payload().downcast_ref::<&str>().map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *pm.lock().unwrap() = format!("panicked at {}:\n{msg}", loc.unwrap_or_default());
    }));

    let self_id = ChitchatId::new("indexer-1", 1717000000, addr(7001));
    let config = ChitchatConfig {
        listen_addr: self_id.gossip_advertise_addr,
        chitchat_id: self_id,
        cluster_id: "prod".to_string(),
        gossip_interval: Duration::from_millis(500),
        seed_nodes: vec!["10.0.0.2:7002".to_string()],
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let (_seeds_tx, seeds) = watch::channel(HashSet::new());
    let mut chitchat = Chitchat::with_chitchat_id_and_seeds(config, seeds, Vec::new());
    let peer = ChitchatId::new("searcher-3", 1717000042, addr(7003));

    // Two catch-up responses about searcher-3, fetched from two different nodes.
    let snapshots = [
        ("via indexer-2", vec![kv("grpc_addr", "10.0.0.3:7281", 12), kv("indexes", "logs,traces", 80)], 80u64, 100u64),
        ("via searcher-4", vec![kv("grpc_addr", "10.0.0.3:7281", 12), kv("indexes", "logs", 100)], 100u64, 50u64),
    ];

    println!("# Catch-up trace on indexer-1\n");
    println!("Catch-up snapshots of `searcher-3` as returned by our RPC, in the order they were applied:\n");
    println!("| # | source | max_version | last_gc_version | key-values |");
    println!("|---|---|---|---|---|");
    for (i, (src, kvs, max, gc)) in snapshots.iter().enumerate() {
        let keys: Vec<String> = kvs.iter().map(|(k, v)| format!("{k}={}@{}", v.value, v.version)).collect();
        println!("| {} | {src} | {max} | {gc} | {} |", i + 1, keys.join(", "));
    }
    println!("\n## searcher-3 as seen by indexer-1\n");
    println!("| after | max_version | last_gc_version | #keys | key-values |");
    println!("|---|---|---|---|---|");
    println!("| start {}", describe(&chitchat, &peer));
    for (i, (_, kvs, max, gc)) in snapshots.iter().enumerate() {
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            chitchat.reset_node_state_if_update(&peer, kvs.clone().into_iter(), *max, *gc);
        }));
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
