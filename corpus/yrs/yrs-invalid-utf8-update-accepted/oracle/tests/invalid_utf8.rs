//! Hidden oracle: an update whose string content is not valid UTF-8 must be refused (by decoding or
//! by applying it), in both update encodings, and the replica must stay consistent and keep
//! accepting valid updates afterwards.

use std::panic::{catch_unwind, AssertUnwindSafe};
use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, Map, ReadTxn, StateVector, Text, Transact, Update};

/// The writer's full state as a v1 update: one string inserted into the text `note`.
pub fn text_update(client: u64, content: &str) -> Vec<u8> {
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
pub fn splice(update: &[u8], needle: &[u8], bytes: &[u8]) -> Vec<u8> {
    assert_eq!(needle.len(), bytes.len());
    let at = update
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present in the update");
    let mut out = update.to_vec();
    out[at..at + bytes.len()].copy_from_slice(bytes);
    out
}

/// Returns Err(description) if the replica accepted the bytes (or broke on them); checks that it
/// still applies the writer's valid update afterwards.
fn deliver_text(bytes: &[u8]) -> Result<(), String> {
    deliver_text_as(bytes, Update::decode_v1)
}

fn deliver_text_as<E>(bytes: &[u8], decode: fn(&[u8]) -> Result<Update, E>) -> Result<(), String> {
    let replica = Doc::with_client_id(900);
    let text = replica.get_or_insert_text("note");
    if let Ok(update) = decode(bytes) {
        if replica.transact_mut().apply_update(update).is_ok() {
            let raw = text.get_string(&replica.transact()).into_bytes();
            let valid = std::str::from_utf8(&raw).is_ok();
            let edit = catch_unwind(AssertUnwindSafe(|| {
                let len = text.len(&replica.transact());
                text.remove_range(&mut replica.transact_mut(), 1, len.saturating_sub(2).max(1));
                text.insert(&mut replica.transact_mut(), 0, "ok ");
            }));
            return Err(format!(
                "accepted; text valid UTF-8: {valid}, later edit panicked: {}",
                edit.is_err()
            ));
        }
    }
    // Refused: the replica is untouched and takes a valid update as usual.
    let good = text_update(12, "fine text");
    replica
        .transact_mut()
        .apply_update(Update::decode_v1(&good).unwrap())
        .map_err(|e| format!("a valid update after the refused one failed: {e}"))?;
    let shown = text.get_string(&replica.transact());
    if shown != "fine text" {
        return Err(format!("after refusing, a valid update shows {shown:?}"));
    }
    Ok(())
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
        let Ok(update) = Update::decode_v1(&bad) else {
            continue;
        };
        let replica = Doc::with_client_id(901);
        replica.get_or_insert_map("props");
        assert!(
            replica.transact_mut().apply_update(update).is_err(),
            "accepted a map entry with invalid UTF-8"
        );
    }
}

#[test]
fn invalid_strings_in_v2_updates() {
    let doc = Doc::with_client_id(61);
    let text = doc.get_or_insert_text("note");
    text.insert(&mut doc.transact_mut(), 0, "v2 encoded words");
    let good = doc
        .transact()
        .encode_state_as_update_v2(&StateVector::default());
    assert!(
        deliver_text_as(&good, Update::decode_v2).is_err(),
        "a valid v2 update is refused"
    );
    for b in [0x80u8, 0xC0, 0xFF] {
        let bad = splice(&good, b"words", &[b'w', b, b'r', b'd', b's']);
        if let Err(e) = deliver_text_as(&bad, Update::decode_v2) {
            panic!("v2 update with byte {b:#04x}: {e}");
        }
    }
}
