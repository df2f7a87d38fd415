//! Hidden oracle: a replica that receives a writer's inserts out of order (each one after the
//! characters it was typed next to, but possibly before the same writer's earlier inserts) shows,
//! after every delivery, exactly the writers' characters it has received, in the writers' order;
//! it ends with the writers' text and state vector, and a peer that loads its state or receives
//! its later edits sees the same text.
//!
//! The seed (`FAULTLINE_SEED`) picks the writers (one to three), their inserts (runs of one to
//! three letters anywhere in the text), the number of replicas and each replica's delivery order;
//! one replica per session always takes the newest insert it can take.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;
use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

/// The seed of this run: `FAULTLINE_SEED`, 1 when unset.
pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same session everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// A character's id: (writer, clock).
pub type CharId = (u64, u32);

/// One insert as its writer made it and the update it sent.
pub struct Edit {
    pub writer: u64,
    pub label: String,
    pub update: Vec<u8>,
    /// The earlier edits holding the characters this one was typed next to: a receiver that has
    /// them can place this edit even while other edits of the same writer are missing.
    pub needs: Vec<usize>,
    /// The ids of the characters it typed.
    pub chars: Vec<CharId>,
}

/// The edits in the order they were made, the writers' final text as (character, id) pairs and
/// their final state vector.
pub struct Session {
    pub edits: Vec<Edit>,
    pub text: Vec<(char, CharId)>,
    pub state_vector: StateVector,
}

impl Session {
    pub fn final_text(&self) -> String {
        self.text.iter().map(|(c, _)| *c).collect()
    }

    /// The writers' final text restricted to the characters of the delivered edits.
    pub fn text_of(&self, delivered: &[usize]) -> String {
        let ids: HashSet<CharId> = delivered
            .iter()
            .flat_map(|&i| self.edits[i].chars.iter().copied())
            .collect();
        self.text
            .iter()
            .filter(|(_, id)| ids.contains(id))
            .map(|(c, _)| *c)
            .collect()
    }
}

/// Brings `to` up to date with everything `from` has.
pub fn sync(from: &Doc, to: &Doc) {
    let sv = to.transact().state_vector();
    let update = from.transact().encode_state_as_update_v1(&sv);
    to.transact_mut()
        .apply_update(Update::decode_v1(&update).unwrap())
        .unwrap();
}

/// Writers take turns inserting into the text `doc`, each catching up with the others first.
/// Every insert runs in its own transaction and is sent as one update, encoded against the
/// writer's state vector before the insert. `script` holds (writer index, position, letters).
pub fn session(writer_ids: &[u64], script: &[(usize, usize, &str)]) -> Session {
    let writers: Vec<Doc> = writer_ids.iter().map(|&id| Doc::with_client_id(id)).collect();
    let mut edits: Vec<Edit> = Vec::new();
    let mut text: Vec<(char, CharId)> = Vec::new();
    for &(w, at, run) in script {
        for other in &writers {
            sync(other, &writers[w]);
        }
        let doc = &writers[w];
        let body = doc.get_or_insert_text("doc");
        let mut txn = doc.transact_mut();
        let before = txn.state_vector();
        let clock = before.get(&doc.client_id());
        body.insert(&mut txn, at as u32, run);
        let update = txn.encode_state_as_update_v1(&before);
        drop(txn);
        let writer = doc.client_id().get();
        let neighbours = [at.checked_sub(1).map(|i| text[i].1), text.get(at).map(|c| c.1)];
        let mut needs: Vec<usize> = neighbours
            .iter()
            .flatten()
            .map(|id| edits.iter().position(|e| e.chars.contains(id)).unwrap())
            .collect();
        needs.dedup();
        let chars: Vec<CharId> = (0..run.chars().count() as u32)
            .map(|k| (writer, clock + k))
            .collect();
        for (k, c) in run.chars().enumerate() {
            text.insert(at + k, (c, chars[k]));
        }
        edits.push(Edit {
            writer,
            label: format!("insert {run:?} at {at}"),
            update,
            needs,
            chars,
        });
    }
    for a in &writers {
        for b in &writers {
            sync(a, b);
        }
    }
    let state_vector = writers[0].transact().state_vector();
    let session = Session { edits, text, state_vector };
    for w in &writers {
        assert_eq!(read_text(w), session.final_text(), "the writers disagree");
    }
    session
}

/// The symptom's writer: client 7 types "ab", appends "c", puts "d" after the "a" and "e" in
/// front: four updates, the writer ends with "eadbc".
pub fn symptom_session() -> Session {
    session(&[7], &[(0, 0, "ab"), (0, 2, "c"), (0, 1, "d"), (0, 0, "e")])
}

/// A seeded session: 1 to 3 writers, 6 to 14 inserts of 1 to 3 letters at random positions.
pub fn random_session(rng: &mut Rng) -> Session {
    let writers: Vec<u64> = (0..rng.range(1, 3))
        .map(|i| 1000 + rng.range(0, 1 << 16) as u64 * 4 + i as u64)
        .collect();
    let mut len = 0;
    let mut script: Vec<(usize, usize, String)> = Vec::new();
    for _ in 0..rng.range(6, 14) {
        let run: String = (0..rng.range(1, 3))
            .map(|_| (b'a' + rng.range(0, 25) as u8) as char)
            .collect();
        let at = rng.range(0, len);
        len += run.len();
        script.push((rng.range(0, writers.len() - 1), at, run));
    }
    let script: Vec<(usize, usize, &str)> =
        script.iter().map(|(w, a, r)| (*w, *a, r.as_str())).collect();
    session(&writers, &script)
}

/// A delivery order in which every edit arrives after the edits it was typed next to, otherwise
/// shuffled; `newest_first` always delivers the newest edit that can be delivered.
pub fn delivery_order(rng: &mut Rng, s: &Session, newest_first: bool) -> Vec<usize> {
    let n = s.edits.len();
    let mut done = vec![false; n];
    let mut order = Vec::new();
    while order.len() < n {
        let ready: Vec<usize> = (0..n)
            .filter(|&i| !done[i] && s.edits[i].needs.iter().all(|&d| done[d]))
            .collect();
        let pick = if newest_first {
            *ready.last().unwrap()
        } else {
            ready[rng.range(0, ready.len() - 1)]
        };
        done[pick] = true;
        order.push(pick);
    }
    order
}

/// Every delivery order in which each edit arrives after the edits it was typed next to.
pub fn all_orders(s: &Session) -> Vec<Vec<usize>> {
    fn extend(s: &Session, order: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if order.len() == s.edits.len() {
            out.push(order.clone());
            return;
        }
        for i in 0..s.edits.len() {
            if !order.contains(&i) && s.edits[i].needs.iter().all(|d| order.contains(d)) {
                order.push(i);
                extend(s, order, out);
                order.pop();
            }
        }
    }
    let mut out = Vec::new();
    extend(s, &mut Vec::new(), &mut out);
    out
}

/// Reads the text on another thread and gives up after a few seconds, so that a replica whose
/// text can no longer be walked fails the check instead of hanging it.
pub fn read_text(doc: &Doc) -> String {
    let doc = doc.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let s = doc.get_or_insert_text("doc").get_string(&doc.transact());
        let _ = tx.send(s);
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(s) => s,
        Err(_) => panic!("reading the replica's text did not finish within 5 s, or panicked"),
    }
}

/// A fresh replica that applies the edits in `order`, each in its own transaction as from a
/// network; `observe` sees it after every delivery.
pub fn replay(s: &Session, order: &[usize], client: u64, observe: &mut dyn FnMut(usize, &Doc)) -> Doc {
    let doc = Doc::with_client_id(client);
    doc.get_or_insert_text("doc");
    for &i in order {
        doc.transact_mut()
            .apply_update(Update::decode_v1(&s.edits[i].update).unwrap())
            .unwrap();
        observe(i, &doc);
    }
    doc
}

/// Loads the full state of `doc` into a fresh peer and returns the peer.
pub fn load_into_peer(doc: &Doc, client: u64) -> Doc {
    let full = doc.transact().encode_state_as_update_v1(&StateVector::default());
    let peer = Doc::with_client_id(client);
    peer.transact_mut()
        .apply_update(Update::decode_v1(&full).unwrap())
        .unwrap();
    peer
}

/// Delivers `order` to a fresh replica and checks it after every delivery and at the end.
pub fn check_replica(s: &Session, order: &[usize], client: u64, what: &str) {
    let mut delivered = Vec::new();
    let doc = replay(s, order, client, &mut |i, doc| {
        delivered.push(i);
        let want = s.text_of(&delivered);
        let got = read_text(doc);
        assert_eq!(got, want, "{what}: the replica's text after delivering {delivered:?}");
        let peer = load_into_peer(doc, 7_000);
        let seen = read_text(&peer);
        assert_eq!(seen, want, "{what}: a peer loading the replica after {delivered:?}");
    });
    let expected = s.final_text();
    let txn = doc.transact();
    assert!(txn.store().pending_update().is_none(), "{what}: an update is still pending");
    assert_eq!(txn.state_vector(), s.state_vector, "{what}: the replica's state vector");
    drop(txn);
    let body = doc.get_or_insert_text("doc");
    body.insert(&mut doc.transact_mut(), 0, "!");
    let peer = Doc::with_client_id(7_001);
    sync(&doc, &peer);
    assert_eq!(
        read_text(&peer),
        format!("!{expected}"),
        "{what}: a peer syncing from the replica after its own edit"
    );
}

#[test]
fn seeded_sessions_converge_when_inserts_arrive_out_of_order() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    for session in 0..40 {
        let s = random_session(&mut rng);
        let in_order: Vec<usize> = (0..s.edits.len()).collect();
        check_replica(&s, &in_order, 500, &format!("seed {seed} session {session} in order"));
        for replica in 0..rng.range(2, 4) {
            let order = delivery_order(&mut rng, &s, replica == 0);
            let what = format!("seed {seed} session {session} replica {replica}, order {order:?}");
            check_replica(&s, &order, 501 + replica as u64, &what);
        }
    }
}

#[test]
fn symptom_edits_converge_in_every_possible_order() {
    let s = symptom_session();
    for order in all_orders(&s) {
        check_replica(&s, &order, 50, &format!("delivery order {order:?}"));
    }
}

#[test]
fn longer_runs_filling_a_gap_converge() {
    // Client 11 types runs of two and three letters, most of them next to its first run, so a
    // replica can take them before the runs typed earlier and land them inside the gap.
    let s = session(
        &[11],
        &[(0, 0, "mn"), (0, 2, "opq"), (0, 1, "rs"), (0, 0, "tuv"), (0, 8, "wx")],
    );
    for order in all_orders(&s) {
        check_replica(&s, &order, 60, &format!("delivery order {order:?}"));
    }
}
