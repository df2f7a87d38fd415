//! Hidden oracle: an update whose string content is not valid UTF-8 must be refused (by decoding or
//! by applying it); if a replica accepts it anyway, its text must still be valid UTF-8 and editable.

use std::panic::{catch_unwind, AssertUnwindSafe};
use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, Map, ReadTxn, StateVector, Text, Transact, Update};

fn text_update(client: u64, content: &str) -> Vec<u8> {
    let doc = Doc::with_client_id(client);
    let text = doc.get_or_insert_text("note");
    text.insert(&mut doc.transact_mut(), 0, content);
    let txn = doc.transact();
    txn.encode_state_as_update_v1(&StateVector::default())
}

fn map_update(client: u64, key: &str, value: &str) -> Vec<u8> {
    let doc = Doc::with_client_id(client);
    let map = doc.get_or_insert_map("props");
    map.insert(&mut doc.transact_mut(), key, value);
    let txn = doc.transact();
    txn.encode_state_as_update_v1(&StateVector::default())
}

/// Replaces the bytes of `needle` inside `update` with `bytes` (same length).
fn splice(update: &[u8], needle: &[u8], bytes: &[u8]) -> Vec<u8> {
    assert_eq!(needle.len(), bytes.len());
    let at = update
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present in the update");
    let mut out = update.to_vec();
    out[at..at + bytes.len()].copy_from_slice(bytes);
    out
}

/// Returns Err(description) if the replica accepted the bytes and ended up in a broken state.
fn deliver_text(bytes: &[u8]) -> Result<(), String> {
    let update = match Update::decode_v1(bytes) {
        Err(_) => return Ok(()),
        Ok(u) => u,
    };
    let replica = Doc::with_client_id(900);
    let text = replica.get_or_insert_text("note");
    if replica.transact_mut().apply_update(update).is_err() {
        return Ok(());
    }
    let raw = text.get_string(&replica.transact()).into_bytes();
    if std::str::from_utf8(&raw).is_err() {
        return Err(format!("accepted; the text is now the invalid UTF-8 bytes {raw:?}"));
    }
    let edit = catch_unwind(AssertUnwindSafe(|| {
        let len = text.len(&replica.transact());
        text.remove_range(&mut replica.transact_mut(), 1, len.saturating_sub(2).max(1));
        text.insert(&mut replica.transact_mut(), 0, "ok ");
    }));
    edit.map_err(|_| "accepted; a later edit panicked".to_string())
}

#[test]
fn broken_two_byte_sequence_in_text() {
    let good = text_update(12, "héllo wörld");
    let bad = splice(&good, "é".as_bytes(), &[0xC3, 0x41]);
    deliver_text(&bad).unwrap();
}

#[test]
fn stray_continuation_bytes() {
    for (i, b) in [0x80u8, 0xBF, 0xFF, 0xFE].into_iter().enumerate() {
        let good = text_update(40 + i as u64, "plain ascii text");
        let bad = splice(&good, b"ascii", &[b'a', b, b'c', b'i', b'i']);
        if let Err(e) = deliver_text(&bad) {
            panic!("byte {b:#04x}: {e}");
        }
    }
}

#[test]
fn invalid_map_key_and_value() {
    let good = map_update(77, "title", "draft");
    for bad in [
        splice(&good, b"title", &[b't', 0xFF, b't', b'l', b'e']),
        splice(&good, b"draft", &[b'd', b'r', 0xC0, b'f', b't']),
    ] {
        let Ok(update) = Update::decode_v1(&bad) else { continue };
        let replica = Doc::with_client_id(901);
        let map = replica.get_or_insert_map("props");
        if replica.transact_mut().apply_update(update).is_err() {
            continue;
        }
        let txn = replica.transact();
        for (key, value) in map.iter(&txn) {
            assert!(std::str::from_utf8(key.as_bytes()).is_ok(), "accepted a key with invalid UTF-8");
            let rendered = value.to_string(&txn).into_bytes();
            assert!(std::str::from_utf8(&rendered).is_ok(), "accepted a value with invalid UTF-8");
        }
    }
}
