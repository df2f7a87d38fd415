//! Hidden oracle: replicas that receive the same updates show the writers' text, whether a delete
//! arrives before, inside or after the run of text it removes, duplicated or not, and keep working
//! afterwards.
//!
//! The seed (`FAULTLINE_SEED`) picks the writers, their edits (inserts and multi-character deletes
//! over text typed by several writers), the number of replicas and where each replica receives
//! each delete; one replica per session receives everything newest first.

use yrs::updates::decoder::Decode;
use yrs::{ClientID, Doc, GetString, Options, ReadTxn, StateVector, Text, Transact, Update};

/// The seed of this run: `FAULTLINE_SEED`, 1 when unset.
pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same schedule everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
}

/// One edit as the writer made it and the update it sent.
pub struct Edit {
    pub writer: u64,
    pub label: String,
    /// A delete-only update (no new content).
    pub delete: bool,
    pub update: Vec<u8>,
}

/// Runs `edit` on `doc` in its own transaction and returns the update it produced, encoded
/// against the state vector before the edit (as the symptom's application does).
fn capture(doc: &Doc, edit: &dyn Fn(&mut yrs::TransactionMut)) -> Vec<u8> {
    let mut txn = doc.transact_mut();
    let before = txn.state_vector();
    edit(&mut txn);
    txn.encode_state_as_update_v1(&before)
}

/// The symptom's writer: client 7 types two characters and deletes both, four updates.
pub fn symptom_edits() -> Vec<Edit> {
    let doc = Doc::with_client_id(7);
    let text = doc.get_or_insert_text("body");
    let mut edits = Vec::new();
    let mut step = |label: &str, edit: &dyn Fn(&mut yrs::TransactionMut)| {
        edits.push(Edit {
            writer: 7,
            label: label.to_string(),
            delete: label.starts_with("delete"),
            update: capture(&doc, edit),
        });
    };
    step("insert \"[\" at 0", &|txn| text.insert(txn, 0, "["));
    step("insert \"x\" at 1", &|txn| text.insert(txn, 1, "x"));
    step("delete 1 char at 1", &|txn| text.remove_range(txn, 1, 1));
    step("delete 1 char at 0", &|txn| text.remove_range(txn, 0, 1));
    edits
}

/// A seeded editing session: 1 to 3 writers take turns (each first catching up with the others),
/// typing runs of 1 to 4 characters and deleting runs of 1 to 6. Returns the edits and the text
/// every writer ends with.
pub fn writer_session(rng: &mut Rng) -> (Vec<Edit>, String) {
    let writers: Vec<Doc> = (0..rng.range(1, 3))
        .map(|i| Doc::with_client_id((1 << 24) + u64::from(rng.range(1, 1 << 20)) * 4 + u64::from(i)))
        .collect();
    let mut edits = Vec::new();
    for n in 0..rng.range(8, 16) {
        let w = rng.range(0, writers.len() as u32 - 1) as usize;
        for other in &writers {
            sync(other, &writers[w]);
        }
        let doc = &writers[w];
        let text = doc.get_or_insert_text("body");
        let len = text.len(&doc.transact());
        let delete = len > 0 && (n % 3 == 2 || rng.range(0, 3) == 0);
        let (label, update) = if delete {
            let at = rng.range(0, len - 1);
            let count = rng.range(1, 6).min(len - at);
            let update = capture(doc, &|txn| text.remove_range(txn, at, count));
            (format!("delete {count} at {at}"), update)
        } else {
            let at = rng.range(0, len);
            let run: String = (0..rng.range(1, 4))
                .map(|_| char::from(b'a' + rng.range(0, 25) as u8))
                .collect();
            let update = capture(doc, &|txn| text.insert(txn, at, &run));
            (format!("insert {run:?} at {at}"), update)
        };
        edits.push(Edit {
            writer: doc.client_id().get(),
            label,
            delete,
            update,
        });
    }
    for a in &writers {
        for b in &writers {
            sync(a, b);
        }
    }
    let final_text = writers[0]
        .get_or_insert_text("body")
        .get_string(&writers[0].transact());
    (edits, final_text)
}

/// Brings `to` up to date with everything `from` has.
pub fn sync(from: &Doc, to: &Doc) {
    let sv = to.transact().state_vector();
    let update = from.transact().encode_state_as_update_v1(&sv);
    to.transact_mut()
        .apply_update(Update::decode_v1(&update).unwrap())
        .unwrap();
}

/// A delivery order: the inserts in the order they were made, every delete (a delete-only update)
/// moved to a random point, possibly before the text it removes exists, and some updates
/// delivered a second time later on. `reverse` delivers everything newest first instead.
pub fn delivery_order(rng: &mut Rng, edits: &[Edit], reverse: bool) -> Vec<usize> {
    let n = edits.len();
    let mut order: Vec<usize> = (0..n).filter(|&i| reverse || !edits[i].delete).collect();
    if reverse {
        order.reverse();
    } else {
        for i in (0..n).filter(|&i| edits[i].delete) {
            let at = rng.range(0, order.len() as u32) as usize;
            order.insert(at, i);
        }
    }
    for _ in 0..rng.range(0, 3) {
        let from = rng.range(0, n as u32 - 1) as usize;
        let dup = order[from];
        let at = rng.range(from as u32 + 1, order.len() as u32) as usize;
        order.insert(at, dup);
    }
    order
}

/// A fresh replica that applies `edits` in `order`, each update in its own transaction as from a
/// network; `observe` sees the replica after every delivery.
pub fn replay(edits: &[Edit], order: &[usize], client: u64, observe: &mut dyn FnMut(usize, &Doc)) -> Doc {
    let doc = Doc::with_options(Options {
        skip_gc: true,
        ..Options::with_client_id(ClientID::new(client))
    });
    doc.get_or_insert_text("body");
    for &i in order {
        doc.transact_mut()
            .apply_update(Update::decode_v1(&edits[i].update).unwrap())
            .unwrap();
        observe(i, &doc);
    }
    doc
}

pub fn text_of(doc: &Doc) -> String {
    doc.get_or_insert_text("body").get_string(&doc.transact())
}

/// Checks a replica that has received every update: the writers' text, nothing left pending, and
/// an edit it makes afterwards reaches a peer intact.
fn check_replica(doc: &Doc, expected: &str, what: &str) -> Result<(), String> {
    let got = text_of(doc);
    if got != expected {
        return Err(format!("{what}: shows {got:?}, the writers show {expected:?}"));
    }
    let txn = doc.transact();
    if txn.store().pending_update().is_some() || txn.store().pending_ds().is_some() {
        return Err(format!("{what}: still holds pending updates after all were delivered"));
    }
    drop(txn);
    let text = doc.get_or_insert_text("body");
    text.insert(&mut doc.transact_mut(), 0, "!");
    let peer = Doc::with_client_id(3);
    sync(doc, &peer);
    let seen = text_of(&peer);
    if seen != format!("!{expected}") {
        return Err(format!("{what}: after a local edit a peer syncing from it shows {seen:?}"));
    }
    Ok(())
}

#[test]
fn seeded_sessions_converge_in_every_delivery_order() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    for session in 0..12 {
        let (edits, expected) = writer_session(&mut rng);
        let causal: Vec<usize> = (0..edits.len()).collect();
        let doc = replay(&edits, &causal, 1000, &mut |_, _| {});
        check_replica(&doc, &expected, &format!("seed {seed} session {session} causal order")).unwrap();
        for replica in 0..rng.range(2, 4) {
            let order = delivery_order(&mut rng, &edits, replica == 0);
            let doc = replay(&edits, &order, 1001 + u64::from(replica), &mut |_, _| {});
            let what = format!("seed {seed} session {session} replica {replica}, order {order:?}");
            check_replica(&doc, &expected, &what).unwrap();
        }
    }
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
fn symptom_edits_converge_in_every_order() {
    let edits = symptom_edits();
    for order in permutations(edits.len()) {
        let doc = replay(&edits, &order, 99, &mut |_, _| {});
        check_replica(&doc, "", &format!("delivery order {order:?}")).unwrap();
    }
}

#[test]
fn replica_state_matches_the_writer() {
    let edits = symptom_edits();
    let doc = replay(&edits, &[3, 2, 1, 0], 99, &mut |_, _| {});
    let writer = Doc::with_client_id(7);
    for e in &edits {
        writer
            .transact_mut()
            .apply_update(Update::decode_v1(&e.update).unwrap())
            .unwrap();
    }
    assert_eq!(doc.transact().state_vector(), writer.transact().state_vector());
    let from_replica = doc.transact().encode_state_as_update_v1(&StateVector::default());
    let fresh = Doc::with_client_id(5);
    fresh
        .transact_mut()
        .apply_update(Update::decode_v1(&from_replica).unwrap())
        .unwrap();
    assert_eq!(text_of(&fresh), "", "a peer loading the replica's full state");
}
