//! Hidden oracle: a merged update must have the same effect as applying its parts one by one,
//! in particular when the parts delete overlapping ranges of the same client's content.

use yrs::updates::decoder::Decode;
use yrs::{merge_updates_v1, Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

const BASE: &str = "the quick brown fox!";

fn base_update() -> Vec<u8> {
    let writer = Doc::with_client_id(1);
    let text = writer.get_or_insert_text("t");
    text.insert(&mut writer.transact_mut(), 0, BASE);
    let txn = writer.transact();
    txn.encode_state_as_update_v1(&StateVector::default())
}

/// A peer that got the base state deletes `len` characters at `index`; returns its update.
fn delete_update(base: &[u8], peer: u64, index: u32, len: u32) -> Vec<u8> {
    let doc = Doc::with_client_id(peer);
    let text = doc.get_or_insert_text("t");
    doc.transact_mut().apply_update(Update::decode_v1(base).unwrap());
    let before = doc.transact().state_vector();
    text.remove_range(&mut doc.transact_mut(), index, len);
    let txn = doc.transact();
    txn.encode_state_as_update_v1(&before)
}

fn load(updates: &[&[u8]]) -> String {
    let doc = Doc::with_client_id(99);
    let text = doc.get_or_insert_text("t");
    for u in updates {
        doc.transact_mut().apply_update(Update::decode_v1(u).unwrap());
    }
    let txn = doc.transact();
    text.get_string(&txn)
}

#[test]
fn wide_delete_then_narrow_delete() {
    let base = base_update();
    let wide = delete_update(&base, 2, 0, 10);
    let narrow = delete_update(&base, 3, 2, 3);
    let parts: [&[u8]; 3] = [&base, &wide, &narrow];
    let merged = merge_updates_v1(&parts).unwrap();
    assert_eq!(load(&parts), "brown fox!");
    assert_eq!(load(&[&merged]), "brown fox!");
}

#[test]
fn overlapping_deletes_in_any_order() {
    let base = base_update();
    let n = BASE.len() as u32;
    let mut checked = 0;
    for a_start in [0u32, 3, 7] {
        for a_len in [4u32, 9, 13] {
            for (b_start, b_len) in [(a_start, 1u32), (a_start + 1, 2), (a_start + 2, a_len), (1, 3)] {
                if a_start + a_len > n || b_start + b_len > n {
                    continue;
                }
                let a = delete_update(&base, 2, a_start, a_len);
                let b = delete_update(&base, 3, b_start, b_len);
                for parts in [[&base[..], &a[..], &b[..]], [&base[..], &b[..], &a[..]]] {
                    let merged = merge_updates_v1(&parts).unwrap();
                    let expected = load(&parts);
                    assert_eq!(
                        load(&[&merged]),
                        expected,
                        "deletes {a_start}+{a_len} and {b_start}+{b_len}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 30);
}

#[test]
fn merged_pairwise_then_merged_again() {
    let base = base_update();
    let a = delete_update(&base, 2, 4, 11);
    let b = delete_update(&base, 3, 5, 4);
    let c = delete_update(&base, 4, 14, 2);
    let ab = merge_updates_v1(&[&a, &b]).unwrap();
    let all = merge_updates_v1(&[&base, &ab, &c]).unwrap();
    let expected = load(&[&base, &a, &b, &c]);
    assert_eq!(load(&[&all]), expected);
    assert_eq!(load(&[&base, &ab, &c]), expected);
}
