//! Writers edit a shared document and broadcast one update per transaction; a replica receives
//! those updates in another order (some before the updates they build on, some twice). Whatever
//! the order, once everything has arrived the replica must show exactly what a replica that got
//! every update in order shows, its encoded state must load to the same document, and it must
//! keep applying the writers' later updates.

use std::cell::RefCell;
use std::rc::Rc;

use yrs::updates::decoder::Decode;
use yrs::types::ToJson;
use yrs::{Doc, GetString, Map, ReadTxn, StateVector, Text, Transact, Update};

/// A small deterministic generator (splitmix64), so that a seed always replays the same history.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x6a09e667f3bcc909)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// What the scenarios tell an observer (the bundle generator prints it; the tests ignore it).
pub trait Observer {
    fn note(&mut self, _line: String) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// One broadcast update: who wrote it, its position in that writer's sequence, and its bytes.
#[derive(Clone)]
pub struct Sent {
    pub writer: usize,
    pub seq: usize,
    pub label: String,
    pub bytes: Vec<u8>,
}

pub struct Writer {
    pub doc: Doc,
    pub outbox: Rc<RefCell<Vec<Vec<u8>>>>,
    _sub: yrs::Subscription,
}

impl Writer {
    pub fn new(client: u64) -> Writer {
        let doc = Doc::with_client_id(client);
        let outbox = Rc::new(RefCell::new(Vec::new()));
        let sink = outbox.clone();
        let sub = doc
            .observe_update_v1(move |_, e| sink.borrow_mut().push(e.update.clone()))
            .unwrap();
        Writer { doc, outbox, _sub: sub }
    }
    /// Takes the updates this writer produced since the last call.
    pub fn drain(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.outbox.borrow_mut())
    }
}

pub fn apply(doc: &Doc, bytes: &[u8]) {
    let update = Update::decode_v1(bytes).expect("a writer's update decodes");
    doc.transact_mut().apply_update(update);
}

/// What a replica shows: the shared text and the shared map.
pub fn view(doc: &Doc) -> String {
    let text = doc.get_or_insert_text("t");
    let map = doc.get_or_insert_map("m");
    let txn = doc.transact();
    let mut entries: Vec<String> = map
        .iter(&txn)
        .map(|(k, v)| format!("{k}: {}", v.to_json(&txn)))
        .collect();
    entries.sort();
    format!("text={:?} map={{{}}}", text.get_string(&txn), entries.join(", "))
}

/// Checks the replica against the in-order one, and its encoded state in a fresh replica.
pub fn same_as(reference: &Doc, replica: &Doc, what: &str) -> Result<(), String> {
    let want = view(reference);
    let got = view(replica);
    if want != got {
        return Err(format!("{what}: the replica shows {got} but the in-order replica shows {want}"));
    }
    let state = replica.transact().encode_state_as_update_v1(&StateVector::default());
    let fresh = Doc::new();
    apply(&fresh, &state);
    let loaded = view(&fresh);
    if loaded != want {
        return Err(format!("{what}: the replica's encoded state loads as {loaded}, expected {want}"));
    }
    Ok(())
}

/// The reported session: one writer makes three map edits; the replica gets the first, the third,
/// then the second.
pub fn reported(obs: &mut dyn Observer) -> Result<(), String> {
    let w = Writer::new(1);
    let map = w.doc.get_or_insert_map("m");
    map.insert(&mut w.doc.transact_mut(), "title", "draft");
    map.insert(&mut w.doc.transact_mut(), "title", "final");
    map.insert(&mut w.doc.transact_mut(), "owner", "ana");
    let u = w.drain();
    obs.note(format!("writer (client 1): u1 sets title=draft, u2 sets title=final, u3 sets owner=ana ({} updates)", u.len()));
    let replica = Doc::with_client_id(9);
    for (name, i) in [("u1", 0usize), ("u3", 2), ("u2", 1)] {
        apply(&replica, &u[i]);
        obs.note(format!("replica applies {name}: shows {}", view(&replica)));
    }
    let first = same_as(&w.doc, &replica, "after u1, u3, u2");
    // The writer keeps editing; the replica must keep up.
    map.insert(&mut w.doc.transact_mut(), "status", "done");
    for b in w.drain() {
        apply(&replica, &b);
    }
    obs.note(format!("writer: u4 sets status=done; replica applies u4: shows {}", view(&replica)));
    obs.note(format!("writer shows {}", view(&w.doc)));
    first.and(same_as(&w.doc, &replica, "after the writer's next edit"))
}

/// Two writers: while the replica waits for writer A's second update, a complete update from
/// writer B arrives in between.
pub fn interleaved(obs: &mut dyn Observer) -> Result<(), String> {
    let a = Writer::new(1);
    let b = Writer::new(2);
    let ta = a.doc.get_or_insert_text("t");
    ta.insert(&mut a.doc.transact_mut(), 0, "ab");
    ta.insert(&mut a.doc.transact_mut(), 2, "cd");
    ta.insert(&mut a.doc.transact_mut(), 4, "ef");
    let ua = a.drain();
    let mb = b.doc.get_or_insert_map("m");
    mb.insert(&mut b.doc.transact_mut(), "cursor", 3);
    let ub = b.drain();
    let reference = Doc::with_client_id(8);
    for x in ua.iter().chain(ub.iter()) {
        apply(&reference, x);
    }
    let replica = Doc::with_client_id(9);
    apply(&replica, &ua[0]);
    apply(&replica, &ua[2]);
    apply(&replica, &ub[0]);
    obs.note(format!("replica applies A1, A3, B1: shows {}", view(&replica)));
    apply(&replica, &ua[1]);
    obs.note(format!("replica applies A2: shows {}", view(&replica)));
    same_as(&reference, &replica, "after A1, A3, B1, A2")
}

/// One seeded session: two or three writers editing a text and a map concurrently, each
/// broadcasting one update per transaction. The replica receives the merged stream in order,
/// except that now and then one update is held back: the same writer's next update arrives
/// first, zero to two complete updates of other writers (or repeats of updates already applied)
/// arrive while it waits, and then the held-back update. Then every writer edits once more and the
/// replica must follow.
pub fn session(seed: u64, obs: &mut dyn Observer) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let n = 2 + rng.below(2) as usize;
    let writers: Vec<Writer> = (0..n).map(|i| Writer::new(i as u64 + 1)).collect();
    let mut sent: Vec<Sent> = Vec::new();
    let mut seqs = vec![0usize; n];
    let steps = 8 + rng.below(12);
    for _ in 0..steps {
        let i = rng.below(n as u64) as usize;
        let w = &writers[i];
        if rng.below(3) == 0 {
            let m = w.doc.get_or_insert_map("m");
            let key = format!("k{}", rng.below(3));
            m.insert(&mut w.doc.transact_mut(), key, rng.below(100) as i64);
        } else {
            let t = w.doc.get_or_insert_text("t");
            let len = t.len(&w.doc.transact());
            let mut txn = w.doc.transact_mut();
            if len > 2 && rng.below(4) == 0 {
                let at = rng.below(len as u64 - 1) as u32;
                t.remove_range(&mut txn, at, 1);
            } else {
                let at = rng.below(len as u64 + 1) as u32;
                let c = (b'a' + rng.below(26) as u8) as char;
                t.insert(&mut txn, at, &c.to_string());
            }
        }
        for bytes in w.drain() {
            seqs[i] += 1;
            sent.push(Sent { writer: i, seq: seqs[i], label: format!("w{}#{}", i + 1, seqs[i]), bytes });
        }
    }
    // The in-order replica.
    let reference = Doc::with_client_id(100);
    for s in &sent {
        apply(&reference, &s.bytes);
    }
    // Delivery order.
    let mut order: Vec<usize> = Vec::new();
    let mut delivered = vec![false; sent.len()];
    let mut k = 0;
    while k < sent.len() {
        if delivered[k] {
            k += 1;
            continue;
        }
        let next_same = (k + 1..sent.len()).find(|&j| sent[j].writer == sent[k].writer && !delivered[j]);
        match next_same {
            Some(j) if rng.below(2) == 0 => {
                // Hold k back: its writer's next update first, then up to two others, then k.
                order.push(j);
                delivered[j] = true;
                for _ in 0..rng.below(3) {
                    let others: Vec<usize> = (k + 1..sent.len())
                        .filter(|&x| !delivered[x] && sent[x].writer != sent[k].writer)
                        .take(1)
                        .collect();
                    let applied: Vec<usize> = (0..sent.len()).filter(|&x| delivered[x] && x != j).collect();
                    if let Some(&o) = others.first() {
                        if rng.below(4) != 0 || applied.is_empty() {
                            order.push(o);
                            delivered[o] = true;
                            continue;
                        }
                    }
                    if !applied.is_empty() {
                        let d = applied[rng.below(applied.len() as u64) as usize];
                        order.push(d);
                    }
                }
                order.push(k);
                delivered[k] = true;
            }
            _ => {
                order.push(k);
                delivered[k] = true;
            }
        }
        k += 1;
    }
    let replica = Doc::with_client_id(200);
    let labels: Vec<&str> = order.iter().map(|&x| sent[x].label.as_str()).collect();
    obs.note(format!("seed {seed}: delivery order {}", labels.join(" ")));
    for &x in &order {
        apply(&replica, &sent[x].bytes);
    }
    same_as(&reference, &replica, &format!("seed {seed}, order {}", labels.join(" ")))?;
    // Every writer edits once more; the replica gets those in order and must follow.
    for (i, w) in writers.iter().enumerate() {
        let t = w.doc.get_or_insert_text("t");
        t.insert(&mut w.doc.transact_mut(), 0, &format!("{}", i));
        for bytes in w.drain() {
            apply(&reference, &bytes);
            apply(&replica, &bytes);
        }
    }
    same_as(&reference, &replica, &format!("seed {seed}, after the writers' next edits"))
}

#[test]
fn reversed_pair_from_one_writer() {
    reported(&mut Quiet).unwrap();
}

#[test]
fn other_writer_arrives_while_waiting() {
    interleaved(&mut Quiet).unwrap();
}

#[test]
fn seeded_shuffled_deliveries() {
    let base = seed();
    for k in 0..200 {
        if let Err(e) = session(base.wrapping_mul(65_537).wrapping_add(k), &mut Quiet) {
            panic!("session {k} of seed {base}: {e}");
        }
    }
}
