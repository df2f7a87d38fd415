//! Produces ../history-view-trace.md: a writer (client 9) sends edits and, separately, the snapshot
//! of the version a user is looking at; a lagging replica (client 500) renders the text for that
//! snapshot with `diff_range`.

use yrs::types::text::YChange;
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{ClientID, Doc, GetString, Options, ReadTxn, Snapshot, Text, Transact, Update};

fn run(total: usize, delivered: usize) {
    let writer = Doc::with_options(Options { skip_gc: true, ..Options::with_client_id(ClientID::new(9)) });
    let wtext = writer.get_or_insert_text("doc");
    let replica = Doc::with_client_id(500);
    let rtext = replica.get_or_insert_text("doc");
    for i in 0..total {
        let c = char::from(b'k' + (i % 10) as u8);
        let mut txn = writer.transact_mut();
        let at = if i % 3 == 1 { 0 } else { wtext.len(&txn) };
        wtext.insert(&mut txn, at, &c.to_string());
        let update = txn.encode_update_v1();
        drop(txn);
        if i < delivered {
            replica.transact_mut().apply_update(Update::decode_v1(&update).unwrap()).unwrap();
        }
    }
    let wire = writer.transact().snapshot().encode_v1();
    let snapshot = Snapshot::decode_v1(&wire).unwrap();
    let replica_sv = replica.transact().state_vector();
    let replica_text = rtext.get_string(&replica.transact());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut txn = replica.transact_mut();
        rtext.diff_range(&mut txn, Some(&snapshot), None, YChange::identity).len()
    }));
    let outcome = match outcome {
        Ok(n) => format!("Ok, {n} chunk(s)"),
        Err(e) => format!(
            "panic: {}",
            e.downcast_ref::<String>().cloned().or(e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        ),
    };
    println!(
        "| {total} | {delivered} | {:?} | {:?} {:?} | {:?} | {} bytes | {outcome} |",
        writer.transact().state_vector(),
        replica_sv,
        replica_text,
        snapshot.state_map,
        wire.len()
    );
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        if let Some(loc) = info.location() {
            eprintln!("panicked at {}:{}:{}", loc.file().rsplit("registry/src/").next().unwrap(), loc.line(), loc.column());
        }
    }));
    println!("| writer edits | delivered to replica | writer state vector | replica state vector, text | snapshot state map | snapshot size | replica `diff_range(Some(&snapshot))` |");
    println!("|---|---|---|---|---|---|---|");
    for (total, delivered) in [(1, 1), (3, 3), (2, 2), (2, 1), (6, 1), (9, 2), (20, 3)] {
        run(total, delivered);
    }
}
