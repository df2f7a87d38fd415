//! Produces ../compaction-trace.md: a writer (client 1) creates a text, two peers (clients 2 and 3)
//! concurrently delete overlapping ranges; the storage service compacts the update log with
//! merge_updates_v1 and a new client loads the compacted update.

use yrs::updates::decoder::Decode;
use yrs::{merge_updates_v1, Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

fn load(updates: &[&[u8]]) -> String {
    let doc = Doc::with_client_id(99);
    let text = doc.get_or_insert_text("t");
    for u in updates {
        doc.transact_mut().apply_update(Update::decode_v1(u).unwrap());
    }
    let s = text.get_string(&doc.transact());
    s
}

fn main() {
    let writer = Doc::with_client_id(1);
    let text = writer.get_or_insert_text("t");
    text.insert(&mut writer.transact_mut(), 0, "the quick brown fox!");
    let base = writer.transact().encode_state_as_update_v1(&StateVector::default());
    let peer = |id: u64, index: u32, len: u32| {
        let doc = Doc::with_client_id(id);
        let t = doc.get_or_insert_text("t");
        doc.transact_mut().apply_update(Update::decode_v1(&base).unwrap());
        let before = doc.transact().state_vector();
        t.remove_range(&mut doc.transact_mut(), index, len);
        let u = doc.transact().encode_state_as_update_v1(&before);
        println!("- client {id}: remove_range({index}, {len}) -> update {} bytes: `{}`", u.len(), Update::decode_v1(&u).unwrap());
        u
    };
    println!("- client 1: insert \"the quick brown fox!\" -> update {} bytes", base.len());
    let a = peer(2, 0, 10);
    let b = peer(3, 2, 3);
    println!();
    println!("| update log order | text after applying the log one by one | merged size | merged update | text after loading the merged update |");
    println!("|---|---|---|---|---|");
    for (label, parts) in [("1, 2, 3", [&base[..], &a[..], &b[..]]), ("1, 3, 2", [&base[..], &b[..], &a[..]])] {
        let merged = merge_updates_v1(&parts).unwrap();
        let decoded = Update::decode_v1(&merged).unwrap();
        let ds = format!("{decoded}");
        let ds = ds.split("delete set").nth(1).map(|s| format!("delete set{s}")).unwrap_or(ds);
        println!(
            "| {label} | {:?} | {} bytes | `{}` | {:?} |",
            load(&parts),
            merged.len(),
            ds,
            load(&[&merged])
        );
    }
}
