//! Regenerates `../history-view-trace.md` from the oracle's scenario: a writer (client 9) sends
//! edits and, separately, the snapshot of the version a user is looking at; a replica that applied
//! the first N edits renders the text for that snapshot with `diff_range`.
//! Run: `cargo run --quiet > ../history-view-trace.md`

#[path = "../../../oracle/tests/snapshot_ahead.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;
use yrs::updates::encoder::Encode;
use yrs::{GetString, ReadTxn, Transact};

/// Where the last panic happened, as `file:line:column` relative to the crate's `src/`.
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

fn main() {
    std::panic::set_hook(Box::new(|info| {
        if let Some(loc) = info.location() {
            let file = loc.file().rsplit("src/").next().unwrap_or_default();
            *LAST_PANIC.lock().unwrap() = format!("{file}:{}:{}", loc.line(), loc.column());
        }
    }));
    println!("# History view on a replica\n");
    println!("Writer: client 9, `skip_gc: true`, single-character edits to the text `doc` (alternating append and");
    println!("prepend), each in its own transaction, each sent as `encode_update_v1`. The replica (client 500,");
    println!("default options) applies the first N of them. The writer then sends its `snapshot()` as");
    println!("`encode_v1` bytes; the replica decodes it and calls");
    println!("`text.diff_range(&mut txn, Some(&snapshot), None, YChange::identity)`.\n");
    println!("| writer edits | applied on replica | replica state vector | replica text | snapshot state map | replica's diff_range |");
    println!("|---|---|---|---|---|---|");
    let mut sizes = Vec::new();
    for (total, delivered) in [(1, 1), (2, 2), (3, 3), (2, 1), (6, 1), (9, 2), (20, 3)] {
        let (replica, snapshot, _) = scenario::lagging_replica(total, delivered, 9);
        sizes.push(snapshot.encode_v1().len());
        let sv = replica.transact().state_vector();
        let text = replica.get_or_insert_text("doc").get_string(&replica.transact());
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scenario::render(&replica, &snapshot)
        }));
        let outcome = match outcome {
            Ok(_) => "Ok, 1 chunk".to_string(),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                format!("panic: {msg} ({})", LAST_PANIC.lock().unwrap())
            }
        };
        let map = |v: &yrs::StateVector| {
            let mut entries: Vec<String> = v.iter().map(|(c, k)| format!("{}: {k}", c.get())).collect();
            entries.sort();
            format!("{{{}}}", entries.join(", "))
        };
        println!(
            "| {total} | {delivered} | {} | {text:?} | {} | {outcome} |",
            map(&sv),
            map(&snapshot.state_map)
        );
    }
    sizes.dedup();
    println!(
        "\nSnapshots are {} bytes each. All panics are in `yrs-0.27.3/src/block_store.rs`; the replica's",
        sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("/")
    );
    println!("`apply_update` calls all returned `Ok(())` before that.");
}
