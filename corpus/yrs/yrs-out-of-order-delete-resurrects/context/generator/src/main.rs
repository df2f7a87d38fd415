//! Regenerates `../replica-trace.md`: one writer's four edits delivered to two replicas, in
//! causal and in reverse order, with the replica state after every delivery.
//! Run: `cargo run --quiet > ../replica-trace.md`

use yrs::updates::decoder::Decode;
use yrs::{ClientID, Doc, GetString, Options, ReadTxn, Text, Transact, Update};

fn main() {
    let writer = Doc::with_client_id(7);
    let text = writer.get_or_insert_text("body");
    let edits = ["insert \"[\" at 0", "insert \"x\" at 1", "delete 1 char at 1", "delete 1 char at 0"];
    let mut updates = Vec::new();
    for (i, _) in edits.iter().enumerate() {
        let mut txn = writer.transact_mut();
        let before = txn.state_vector();
        match i {
            0 => text.insert(&mut txn, 0, "["),
            1 => text.insert(&mut txn, 1, "x"),
            2 => text.remove_range(&mut txn, 1, 1),
            _ => text.remove_range(&mut txn, 0, 1),
        }
        updates.push(txn.encode_state_as_update_v1(&before));
    }
    println!("# Replica trace\n");
    println!("Writer (client 7) makes four edits to the text `body`; each edit is sent as one update.\n");
    println!("| update | edit on the writer | bytes |");
    println!("|---|---|---|");
    for (i, e) in edits.iter().enumerate() {
        println!("| u{} | {e} | {} |", i + 1, updates[i].len());
    }
    println!("\nWriter's text after u4: {:?}\n", text.get_string(&writer.transact()));
    for (name, order) in [("replica B (in order)", [0, 1, 2, 3]), ("replica C (reverse order)", [3, 2, 1, 0])] {
        let doc = Doc::with_options(Options {
            skip_gc: true,
            ..Options::with_client_id(ClientID::new(if order[0] == 0 { 21 } else { 22 }))
        });
        let body = doc.get_or_insert_text("body");
        println!("## {name}\n");
        println!("| delivered | text after | state vector after | missing updates reported |");
        println!("|---|---|---|---|");
        for &i in &order {
            let mut txn = doc.transact_mut();
            txn.apply_update(Update::decode_v1(&updates[i]).unwrap()).unwrap();
            drop(txn);
            let txn = doc.transact();
            let sv: Vec<String> = txn
                .state_vector()
                .iter()
                .map(|(c, clock)| format!("{}:{clock}", c.get()))
                .collect();
            println!(
                "| u{} | {:?} | {{{}}} | {} |",
                i + 1,
                body.get_string(&txn),
                sv.join(", "),
                txn.has_missing_updates()
            );
        }
        println!();
    }
}
