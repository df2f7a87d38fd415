//! Hidden oracle: replicas that receive the same updates in any order must show the same text.

use yrs::updates::decoder::Decode;
use yrs::{ClientID, Doc, GetString, Options, ReadTxn, Text, Transact, Update};

/// Edits made by one writer, each captured as the update it produced.
fn writer_updates() -> Vec<Vec<u8>> {
    let doc = Doc::with_client_id(7);
    let text = doc.get_or_insert_text("body");
    let mut updates = Vec::new();
    let mut step = |edit: &dyn Fn(&mut yrs::TransactionMut)| {
        let mut txn = doc.transact_mut();
        let before = txn.state_vector();
        edit(&mut txn);
        updates.push(txn.encode_state_as_update_v1(&before));
    };
    step(&|txn| text.insert(txn, 0, "["));
    step(&|txn| text.insert(txn, 1, "x"));
    step(&|txn| text.remove_range(txn, 1, 1));
    step(&|txn| text.remove_range(txn, 0, 1));
    updates
}

fn replay(updates: &[Vec<u8>], order: &[usize]) -> String {
    let doc = Doc::with_options(Options { skip_gc: true, ..Options::with_client_id(ClientID::new(99)) });
    let text = doc.get_or_insert_text("body");
    // Each update arrives in its own transaction, as from a network.
    for &i in order {
        let mut txn = doc.transact_mut();
        txn.apply_update(Update::decode_v1(&updates[i]).unwrap()).unwrap();
    }
    let txn = doc.transact();
    text.get_string(&txn)
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for pos in 0..=p.len() {
            let mut q = p.clone();
            q.insert(pos, n - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn every_delivery_order_converges() {
    let updates = writer_updates();
    let expected = replay(&updates, &[0, 1, 2, 3]);
    assert_eq!(expected, "");
    for order in permutations(updates.len()) {
        assert_eq!(replay(&updates, &order), expected, "delivery order {order:?}");
    }
}
