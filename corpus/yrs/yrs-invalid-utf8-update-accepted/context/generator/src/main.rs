//! Produces ../replica-trace.md: updates from a writer (client 12) reach a replica (client 900)
//! with some string bytes altered, as they arrived from a third-party client; the replica decodes,
//! applies and then edits the text. The surrogate case aborts the process, so it runs in a child.

use std::panic::{catch_unwind, AssertUnwindSafe};
use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

fn update_with(content: &str, needle: &[u8], bytes: &[u8]) -> Vec<u8> {
    let doc = Doc::with_client_id(12);
    let text = doc.get_or_insert_text("note");
    text.insert(&mut doc.transact_mut(), 0, content);
    let mut u = doc.transact().encode_state_as_update_v1(&StateVector::default());
    let at = u.windows(needle.len()).position(|w| w == needle).unwrap();
    u[at..at + bytes.len()].copy_from_slice(bytes);
    u
}

fn msg(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn deliver(label: &str, writer_text: &str, bytes: &[u8]) {
    let decoded = Update::decode_v1(bytes);
    let decoded_str = match &decoded { Ok(_) => "Ok".to_string(), Err(e) => format!("Err({e:?})") };
    let Ok(update) = decoded else {
        println!("| {label} | {decoded_str} | | | | |");
        return;
    };
    let replica = Doc::with_client_id(900);
    let text = replica.get_or_insert_text("note");
    let applied = format!("{:?}", replica.transact_mut().apply_update(update));
    let raw = text.get_string(&replica.transact()).into_bytes();
    let len = text.len(&replica.transact());
    let edit = catch_unwind(AssertUnwindSafe(|| {
        text.insert(&mut replica.transact_mut(), 3, "x");
        text.insert(&mut replica.transact_mut(), 1, "x");
        text.remove_range(&mut replica.transact_mut(), 1, 2);
    }))
        .map(|_| "Ok".to_string())
        .unwrap_or_else(|e| format!("panic: {}", msg(e)));
    println!(
        "| {label} | {decoded_str} | {applied} | {raw:?} (UTF-8 check: {}) | {len} (writer: {}) | {edit} |",
        if std::str::from_utf8(&raw).is_ok() { "ok" } else { "invalid" },
        writer_text.encode_utf16().count()
    );
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("surrogate") {
        let bytes = update_with("emoji: xyz!", b"xyz", &[0xED, 0xA0, 0xBD]);
        let update = Update::decode_v1(&bytes).unwrap();
        eprintln!("decode_v1: Ok; applying");
        let replica = Doc::with_client_id(900);
        let _ = replica.transact_mut().apply_update(update);
        eprintln!("applied");
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location() {
            eprintln!("  (panic at {}:{})", l.file().rsplit("registry/src/").next().unwrap(), l.line());
        }
    }));
    println!("| writer text, bytes changed in transit | decode_v1 | apply_update | replica get_string bytes | replica len | insert(3), insert(1), remove_range(1, 2) |");
    println!("|---|---|---|---|---|---|");
    deliver("\"héllo wörld\", é = C3 A9 -> C3 41", "héllo wörld", &update_with("héllo wörld", "é".as_bytes(), &[0xC3, 0x41]));
    deliver("\"plain ascii text\", s -> 80", "plain ascii text", &update_with("plain ascii text", b"ascii", &[b'a', 0x80, b'c', b'i', b'i']));
    deliver("\"plain ascii text\" unchanged", "plain ascii text", &update_with("plain ascii text", b"ascii", b"ascii"));
    let out = std::process::Command::new(std::env::current_exe().unwrap()).arg("surrogate").output().unwrap();
    println!("\nchild process, \"emoji: xyz!\" with xyz -> ED A0 BD: exit {:?}", out.status);
    println!("{}", String::from_utf8_lossy(&out.stderr));
}
