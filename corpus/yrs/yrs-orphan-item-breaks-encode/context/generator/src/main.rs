//! Produces the trace in ../server-trace.md: owner (11) and editor (33) edit a shared map while
//! the server (22) relays; the server receives the owner's removal before the editor's typing.

use yrs::types::ToJson;
use yrs::updates::decoder::Decode;
use yrs::{Doc, Map, MapRef, ReadTxn, StateVector, Text, TextPrelim, TextRef, Transact, Update};

fn apply(doc: &Doc, update: &[u8]) -> String {
    let mut txn = doc.transact_mut();
    let res = txn.apply_update(Update::decode_v1(update).unwrap());
    format!("{res:?}")
}

fn server_row(step: &str, server: &Doc, result: &str) {
    let notes = server.get_or_insert_map("notes");
    let txn = server.transact();
    println!(
        "| {step} | {result} | {} | {:?} |",
        notes.to_json(&txn),
        txn.state_vector()
    );
}

fn main() {
    let owner = Doc::with_client_id(11);
    let server = Doc::with_client_id(22);
    let editor = Doc::with_client_id(33);
    let notes: MapRef = owner.get_or_insert_map("notes");
    notes.insert(&mut owner.transact_mut(), "draft", TextPrelim::new(""));
    let init = owner.transact().encode_state_as_update_v1(&StateVector::default());
    println!("| step on the server | apply_update | notes (server) | state vector |");
    println!("|---|---|---|---|");
    let r = apply(&server, &init);
    server_row(&format!("initial state from 11 ({} bytes)", init.len()), &server, &r);
    apply(&editor, &init);

    let before = editor.transact().state_vector();
    let draft: TextRef = {
        let m = editor.get_or_insert_map("notes");
        let txn = editor.transact();
        m.get(&txn, "draft").unwrap().cast().unwrap()
    };
    draft.insert(&mut editor.transact_mut(), 0, "hello");
    let typed = editor.transact().encode_state_as_update_v1(&before);

    let before = owner.transact().state_vector();
    notes.remove(&mut owner.transact_mut(), "draft");
    let removed = owner.transact().encode_state_as_update_v1(&before);

    let r = apply(&server, &removed);
    server_row(&format!("11 removed `draft` ({} bytes)", removed.len()), &server, &r);
    let r = apply(&server, &typed);
    server_row(&format!("33 typed \"hello\" into `draft` earlier ({} bytes)", typed.len()), &server, &r);

    println!();
    println!("server store after the last step:");
    println!("{}", server.transact().store());
    println!();
    println!("new client asks the server for the full state:");
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.transact().encode_state_as_update_v1(&StateVector::default()).len()
    }));
    println!("{res:?}");
}
