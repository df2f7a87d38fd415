//! Hidden oracle: rendering a text against a snapshot taken on a peer that is further ahead than
//! this replica must not crash; the replica shows what it has.

use yrs::types::text::YChange;
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{ClientID, Doc, GetString, Options, Out, ReadTxn, Snapshot, Text, Transact, Update};

/// A writer makes `total` single-character edits (alternating front and back); the replica receives
/// only the first `delivered` of them. Returns the replica and the writer's snapshot after all edits,
/// as it would arrive over the wire.
pub fn lagging_replica(total: usize, delivered: usize, writer_id: u64) -> (Doc, Snapshot, String) {
    let writer = Doc::with_options(Options {
        skip_gc: true,
        ..Options::with_client_id(ClientID::new(writer_id))
    });
    let wtext = writer.get_or_insert_text("doc");
    let replica = Doc::with_client_id(500);
    let mut expected = String::new();
    for i in 0..total {
        let c = char::from(b'k' + (i % 10) as u8);
        let mut txn = writer.transact_mut();
        let at = if i % 3 == 1 { 0 } else { wtext.len(&txn) };
        wtext.insert(&mut txn, at, &c.to_string());
        let update = txn.encode_update_v1();
        drop(txn);
        if i < delivered {
            replica
                .transact_mut()
                .apply_update(Update::decode_v1(&update).unwrap())
                .unwrap();
            expected = wtext.get_string(&writer.transact());
        }
    }
    let wire = writer.transact().snapshot().encode_v1();
    (replica, Snapshot::decode_v1(&wire).unwrap(), expected)
}

pub fn render(replica: &Doc, snapshot: &Snapshot) -> String {
    let text = replica.get_or_insert_text("doc");
    let mut txn = replica.transact_mut();
    let chunks = text.diff_range(&mut txn, Some(snapshot), None, YChange::identity);
    chunks
        .iter()
        .map(|d| match &d.insert {
            Out::Any(yrs::Any::String(s)) => s.to_string(),
            other => panic!("unexpected chunk {other:?}"),
        })
        .collect()
}

#[test]
fn snapshot_from_peer_one_edit_ahead() {
    let (replica, snapshot, expected) = lagging_replica(2, 1, 3);
    assert_eq!(render(&replica, &snapshot), expected);
}

#[test]
fn snapshot_from_peer_far_ahead() {
    for (total, delivered) in [(9, 2), (12, 3), (25, 4), (40, 7), (5, 1)] {
        let (replica, snapshot, expected) = lagging_replica(total, delivered, 9);
        assert_eq!(render(&replica, &snapshot), expected, "total {total}, delivered {delivered}");
    }
}

#[test]
fn snapshot_from_peer_in_sync() {
    // Sanity check of the rendering helper on an up-to-date replica.
    let (replica, snapshot, expected) = lagging_replica(4, 4, 3);
    assert_eq!(render(&replica, &snapshot), expected);
}

#[test]
fn own_snapshot_of_a_short_document() {
    for edits in 1..=4 {
        let doc = Doc::with_options(Options {
            skip_gc: true,
            ..Options::with_client_id(ClientID::new(21))
        });
        let text = doc.get_or_insert_text("doc");
        for i in 0..edits {
            let mut txn = doc.transact_mut();
            let at = if i % 3 == 1 { 0 } else { text.len(&txn) };
            text.insert(&mut txn, at, "q");
        }
        let snapshot = doc.transact().snapshot();
        let expected = text.get_string(&doc.transact());
        assert_eq!(render(&doc, &snapshot), expected, "{edits} edit(s)");
    }
}

#[test]
fn snapshot_taken_before_a_delete_still_shows_the_deleted_text() {
    for typed in ["ab", "abcde"] {
        let writer = Doc::with_options(Options {
            skip_gc: true,
            ..Options::with_client_id(ClientID::new(4))
        });
        let replica = Doc::with_options(Options {
            skip_gc: true,
            ..Options::with_client_id(ClientID::new(77))
        });
        let wtext = writer.get_or_insert_text("doc");
        for (i, c) in typed.chars().enumerate() {
            wtext.insert(&mut writer.transact_mut(), i as u32, &c.to_string());
        }
        let wire = writer.transact().snapshot().encode_v1();
        wtext.remove_range(&mut writer.transact_mut(), 1, 1);
        let update = writer.transact().encode_state_as_update_v1(&yrs::StateVector::default());
        replica
            .transact_mut()
            .apply_update(Update::decode_v1(&update).unwrap())
            .unwrap();
        let snapshot = Snapshot::decode_v1(&wire).unwrap();
        assert_eq!(render(&replica, &snapshot), typed, "the version before the delete of {typed:?}");
        let now = replica.get_or_insert_text("doc").get_string(&replica.transact());
        assert_eq!(now.len(), typed.len() - 1, "rendering a version does not change the text");
    }
}
