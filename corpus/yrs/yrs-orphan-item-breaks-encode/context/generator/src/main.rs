//! Regenerates `../server-trace.md` from the oracle's symptom scenario: owner (11) and editor (33)
//! edit a shared map while the server (22) relays; the server receives the owner's removal before
//! the editor's typing, then a new client asks it for the full state.
//! Run: `cargo run --quiet > ../server-trace.md`

#[path = "../../../oracle/tests/orphan_insert.rs"]
#[allow(dead_code, unused_imports)]
mod scenario;

use std::sync::Mutex;
use yrs::types::ToJson;
use yrs::{Doc, Map, ReadTxn, Transact};

/// Where and why the last panic happened.
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

fn state_vector(doc: &Doc) -> String {
    let mut entries: Vec<(u64, u32)> = doc.transact().state_vector().iter().map(|(c, k)| (*c, *k)).collect();
    entries.sort();
    let shown: Vec<String> = entries.iter().map(|(c, k)| format!("{c}: {k}")).collect();
    format!("{{{}}}", shown.join(", "))
}

/// The `notes` map on `doc` as `{key: value}`, keys sorted, strings quoted.
fn notes(doc: &Doc) -> String {
    let json = doc.get_or_insert_map("notes").to_json(&doc.transact());
    let yrs::Any::Map(entries) = json else {
        return json.to_string();
    };
    let mut shown: Vec<String> = entries
        .iter()
        .map(|(k, v)| match v {
            yrs::Any::String(s) => format!("{k}: {s:?}"),
            other => format!("{k}: {other}"),
        })
        .collect();
    shown.sort();
    format!("{{{}}}", shown.join(", "))
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map_or(String::new(), |l| {
            let file = l.file();
            // The crate's own path differs between machines: keep it from `src/` on.
            let file = file.rfind("/src/").map_or(file, |i| &file[i + 1..]);
            format!("{file}:{}:{}", l.line(), l.column())
        });
        let msg = info.payload().downcast_ref::<&str>().map(|s| s.to_string()).unwrap_or_default();
        *LAST_PANIC.lock().unwrap() = format!("thread 'main' panicked at {at}:\n{msg}");
    }));
    println!("# Relay server trace\n");
    println!("Three docs: owner (client 11), relay server (client 22), editor (client 33). The root map `notes`");
    println!("holds a nested text under `draft`. The owner and the editor change it concurrently; the server gets");
    println!("the owner's update first. Every update is `encode_state_as_update_v1` against the state vector taken");
    println!("before the edit, applied with `apply_update` in its own transaction.\n");
    println!("| step on the server | apply_update | `notes` on the server after | state vector after |");
    println!("|---|---|---|---|");
    let relay = scenario::removal_before_late_typing(&mut |step, bytes, server| {
        let label = match step {
            "initial" => format!("initial state from 11 ({bytes} bytes): `draft` = empty text"),
            "removed" => format!("11 removed `draft` ({bytes} bytes)"),
            _ => format!("33 had typed \"hello\" into the empty `draft` before it saw the removal ({bytes} bytes)"),
        };
        println!("| {label} | returned `()` | `{}` | `{}` |", notes(server), state_vector(server));
    });
    println!("\nServer block store after the last step (the store's `Display` output):\n");
    println!("```text\n{}\n```\n", relay.server.transact().store());
    println!("A fourth client connects and asks the server for the full state");
    println!("(`encode_state_as_update_v1(&StateVector::default())`):\n");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario::full_state(&relay.server).len()));
    match outcome {
        Ok(n) => println!("```text\nencoded {n} bytes\n```\n"),
        Err(_) => println!("```text\n{}\n```\n", LAST_PANIC.lock().unwrap()),
    }
    println!("Every later attempt to encode the server's document (full state or diff against an empty state");
    println!("vector) panics the same way. Owner and editor, which never had this ordering, encode fine.");
}
