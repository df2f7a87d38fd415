//! Regenerates `../compaction-trace.md` from the oracle's symptom scenario: a writer (client 1)
//! creates a text, two peers (clients 2 and 3) concurrently delete overlapping ranges; the storage
//! service compacts the update log with `merge_updates_v1` and a new client loads the result.
//! Run: `cargo run --quiet > ../compaction-trace.md`

#[path = "../../../oracle/tests/merged_deletes.rs"]
#[allow(dead_code)]
mod scenario;

use yrs::merge_updates_v1;
use yrs::updates::decoder::Decode;
use yrs::Update;

/// An update's Display text with runs of spaces collapsed.
fn shown(update: &[u8]) -> String {
    let text = format!("{}", Update::decode_v1(update).unwrap());
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The delete set part of an update's Display text.
fn delete_set(update: &[u8]) -> String {
    let text = shown(update);
    text.split_once("delete set: ")
        .and_then(|(_, rest)| rest.strip_suffix(" }"))
        .map_or(text.clone(), str::to_string)
}

fn main() {
    println!("# Update log compaction\n");
    println!("The writer (client 1) creates the text; two peers that both had that state delete overlapping");
    println!("ranges at the same time. The storage service keeps every update in a log and, once in a while,");
    println!("replaces the log with `merge_updates_v1(&log)`. A new client then loads the text from the log (one");
    println!("`apply_update` per entry) or from the merged update. `Update` values are shown with their Display.\n");
    let base = vec![scenario::base_update()];
    println!("- client 1: insert {:?} -> update {} bytes", scenario::BASE, base[0].len());
    let mut peer = |id: u64, index: u32, len: u32| {
        let u = scenario::delete_update(&base, id, index, len);
        println!(
            "- client {id}: `remove_range({index}, {len})` -> update {} bytes: `{}`",
            u.len(),
            shown(&u)
        );
        u
    };
    let a = peer(2, 0, 10);
    let b = peer(3, 2, 3);
    println!();
    println!("| log order | text, log applied one by one | merged size | delete set of the merged update | text, merged update loaded |");
    println!("|---|---|---|---|---|");
    for (label, parts) in [
        ("1, 2, 3", [&base[0][..], &a[..], &b[..]]),
        ("1, 3, 2", [&base[0][..], &b[..], &a[..]]),
    ] {
        let merged = merge_updates_v1(&parts).unwrap();
        println!(
            "| {label} | {:?} | {} bytes | `{}` | {:?} |",
            scenario::load(&parts),
            merged.len(),
            delete_set(&merged),
            scenario::load(&[&merged])
        );
    }
}
