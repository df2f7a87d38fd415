//! Peers edit nested maps and mergeable child containers; a fresh replica receives every
//! commit as its own update, in a shuffled order. It must hold early updates as pending,
//! never fail, and end with the same document as everyone else.

use loro::{ContainerTrait, ExportMode, ImportStatus, LoroDoc, LoroMap, LoroValue, VersionVector};

/// splitmix64: small, deterministic, no dependency.
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
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// The kind of a container a peer can edit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// The root map "doc".
    Root,
    /// An ordinary child map, created with `insert_container`.
    Map,
    MergeableMap,
    MergeableText,
    MergeableList,
    MergeableMovableList,
    MergeableCounter,
}

impl Kind {
    pub fn is_map(self) -> bool {
        matches!(self, Kind::Root | Kind::Map | Kind::MergeableMap)
    }
}

#[derive(Clone, Debug)]
pub struct Slot {
    pub kind: Kind,
    /// Index of the parent slot and the key under it (none for the root).
    pub parent: Option<(usize, String)>,
}

/// One commit of one peer, exported on its own.
#[derive(Clone, Debug)]
pub struct Update {
    pub peer: u64,
    pub label: String,
    pub bytes: Vec<u8>,
}

pub struct History {
    pub peers: Vec<LoroDoc>,
    pub updates: Vec<Update>,
    pub slots: Vec<Slot>,
}

pub fn new_peer(id: u64) -> LoroDoc {
    let d = LoroDoc::new();
    d.set_peer_id(id).unwrap();
    d
}

/// A handle to map slot `i` in `doc`.
pub fn map_at(doc: &LoroDoc, slots: &[Slot], i: usize, created: &[Option<loro::ContainerID>]) -> LoroMap {
    match slots[i].kind {
        Kind::Root => doc.get_map("doc"),
        Kind::Map => doc.get_map(created[i].clone().unwrap()),
        Kind::MergeableMap => {
            let (p, key) = slots[i].parent.clone().unwrap();
            map_at(doc, slots, p, created).ensure_mergeable_map(&key).unwrap()
        }
        k => panic!("slot {i} is a {k:?}, not a map"),
    }
}

/// Writes one small edit into slot `i` of `doc`.
pub fn edit(doc: &LoroDoc, slots: &[Slot], created: &[Option<loro::ContainerID>], i: usize, n: u64) {
    let kind = slots[i].kind;
    if kind.is_map() {
        map_at(doc, slots, i, created)
            .insert(&format!("v{}", n % 3), n as i64)
            .unwrap();
        return;
    }
    let (p, key) = slots[i].parent.clone().unwrap();
    let parent = map_at(doc, slots, p, created);
    match kind {
        Kind::MergeableText => {
            let t = parent.ensure_mergeable_text(&key).unwrap();
            let at = (n as usize) % (t.len_unicode() + 1);
            t.insert(at, &format!("<{n}>")).unwrap();
        }
        Kind::MergeableList => {
            let l = parent.ensure_mergeable_list(&key).unwrap();
            let at = (n as usize) % (l.len() + 1);
            l.insert(at, n as i64).unwrap();
        }
        Kind::MergeableMovableList => {
            let l = parent.ensure_mergeable_movable_list(&key).unwrap();
            let at = (n as usize) % (l.len() + 1);
            l.insert(at, n as i64).unwrap();
        }
        Kind::MergeableCounter => {
            parent.ensure_mergeable_counter(&key).unwrap().increment(n as f64).unwrap();
        }
        _ => unreachable!(),
    }
}

/// The key a slot lives under ("doc" for the root map).
pub fn name_of(slots: &[Slot], i: usize) -> String {
    slots[i].parent.as_ref().map_or("doc".to_string(), |(_, k)| k.clone())
}

/// Builds a history: `npeers` peers take `steps` turns; in each turn a peer may first catch up
/// with another peer, then commits one change that creates a child container (an ordinary map
/// or a mergeable one) under a map it knows and writes into it, or edits a container it knows.
pub fn build_history(rng: &mut Rng, npeers: usize, steps: usize) -> History {
    let peers: Vec<LoroDoc> = (0..npeers).map(|i| new_peer(i as u64 + 1)).collect();
    let mut slots = vec![Slot { kind: Kind::Root, parent: None }];
    let mut created: Vec<Option<loro::ContainerID>> = vec![None];
    // known[p][s]: peer p has the change that made slot s.
    let mut known: Vec<Vec<bool>> = vec![vec![true]; npeers];
    let mut updates = Vec::new();
    for step in 0..steps {
        let p = rng.below(npeers);
        if npeers > 1 && rng.below(3) > 0 {
            let mut q = rng.below(npeers - 1);
            if q >= p {
                q += 1;
            }
            let all = peers[q].export(ExportMode::all_updates()).unwrap();
            peers[p].import(&all).unwrap();
            for s in 0..slots.len() {
                if known[q][s] {
                    known[p][s] = true;
                }
            }
        }
        let doc = &peers[p];
        let before = doc.oplog_vv();
        let maps: Vec<usize> = (0..slots.len())
            .filter(|&s| known[p][s] && slots[s].kind.is_map())
            .collect();
        let mine: Vec<usize> = (0..slots.len()).filter(|&s| known[p][s]).collect();
        let n = rng.next() % 1000;
        let what;
        if slots.len() < 3 || rng.below(3) > 0 {
            // A new child under a known map; prefer ordinary maps as parents.
            let ordinary: Vec<usize> = maps
                .iter()
                .copied()
                .filter(|&s| slots[s].kind == Kind::Map)
                .collect();
            let parent = if !ordinary.is_empty() && rng.below(3) > 0 {
                ordinary[rng.below(ordinary.len())]
            } else {
                maps[rng.below(maps.len())]
            };
            let kind = [
                Kind::Map,
                Kind::Map,
                Kind::MergeableMap,
                Kind::MergeableText,
                Kind::MergeableList,
                Kind::MergeableMovableList,
                Kind::MergeableCounter,
            ][rng.below(7)];
            let key = format!("{kind:?}{}", slots.len()).to_lowercase();
            let pm = map_at(doc, &slots, parent, &created);
            slots.push(Slot { kind, parent: Some((parent, key.clone())) });
            let id = if kind == Kind::Map {
                Some(pm.insert_container(&key, LoroMap::new()).unwrap().id())
            } else {
                None
            };
            created.push(id);
            for k in known.iter_mut() {
                k.push(false);
            }
            known[p][slots.len() - 1] = true;
            edit(doc, &slots, &created, slots.len() - 1, n);
            what = format!("creates {key} ({kind:?}) under {}", name_of(&slots, parent));
        } else {
            let s = mine[rng.below(mine.len())];
            edit(doc, &slots, &created, s, n);
            what = format!("edits {} ({:?})", name_of(&slots, s), slots[s].kind);
        }
        doc.commit();
        let bytes = doc.export(ExportMode::updates(&before)).unwrap();
        updates.push(Update {
            peer: p as u64 + 1,
            label: format!("u{step}: peer {} {what}", p + 1),
            bytes,
        });
    }
    History { peers, updates, slots }
}

/// The document every replica must end with: all updates applied in the order they were made.
pub fn reference(h: &History) -> LoroValue {
    let r = new_peer(1000);
    for u in &h.updates {
        r.import(&u.bytes).unwrap();
    }
    r.get_deep_value()
}

pub fn union_vv(h: &History) -> VersionVector {
    let mut vv = VersionVector::default();
    for p in &h.peers {
        vv.merge(&p.oplog_vv());
    }
    vv
}

/// Every container both documents hold sits at the same depth and path in each.
pub fn same_layout(got: &LoroDoc, want: &LoroDoc, what: &str) {
    let g = got.analyze();
    let w = want.analyze();
    let mut ids: Vec<_> = g.containers.keys().filter(|id| w.containers.contains_key(*id)).collect();
    ids.sort_by_key(|id| id.to_string());
    for id in ids {
        assert_eq!(
            g.containers[id].depth, w.containers[id].depth,
            "{what}: container {id} reported at the wrong depth"
        );
        assert_eq!(
            got.get_path_to_container(id),
            want.get_path_to_container(id),
            "{what}: container {id} has a different path"
        );
    }
}

/// Delivers `order` (indices into the history's updates) to a fresh replica, calling `before`
/// ahead of every import and `after` with what the import reported.
pub fn deliver_observed(
    h: &History,
    order: &[usize],
    replica_id: u64,
    before: &mut dyn FnMut(&Update),
    after: &mut dyn FnMut(&Update, &LoroDoc, &ImportStatus),
) -> LoroDoc {
    let r = new_peer(replica_id);
    for &i in order {
        let u = &h.updates[i];
        before(u);
        let status = r
            .import(&u.bytes)
            .unwrap_or_else(|e| panic!("import of {} failed: {e}", u.label));
        after(u, &r, &status);
    }
    r
}

pub fn deliver(h: &History, order: &[usize], replica_id: u64) -> LoroDoc {
    deliver_observed(h, order, replica_id, &mut |_| {}, &mut |_, _, _| {})
}

/// A shuffled delivery order, with one update now and then delivered twice.
pub fn shuffled_order(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    if rng.below(2) == 0 {
        let d = order[rng.below(order.len())];
        let at = rng.below(order.len() + 1);
        order.insert(at, d);
    }
    order
}

/// The whole property for one seeded trial.
pub fn trial(rng: &mut Rng, npeers: usize, steps: usize) {
    let h = build_history(rng, npeers, steps);
    let want = reference(&h);
    let all = union_vv(&h);
    let order = shuffled_order(rng, h.updates.len());
    let r = deliver(&h, &order, 500);
    assert_eq!(r.oplog_vv(), all, "replica is missing updates after receiving all of them");
    assert_eq!(r.get_deep_value(), want, "replica diverged for order {order:?}");
    let in_order = new_peer(1000);
    for u in &h.updates {
        in_order.import(&u.bytes).unwrap();
    }
    same_layout(&r, &in_order, "shuffled replica");
    // A peer that starts from the replica's snapshot sees the same document and layout.
    let s = new_peer(600);
    s.import(&r.export(ExportMode::Snapshot).unwrap()).unwrap();
    assert_eq!(s.get_deep_value(), want, "snapshot of the replica differs");
    same_layout(&s, &in_order, "peer loaded from the replica's snapshot");
    // The replica keeps working: it edits, and a peer that syncs with it converges.
    let map = r.get_map("doc");
    map.ensure_mergeable_text("late").unwrap().insert(0, "x").unwrap();
    r.commit();
    let p = &h.peers[0];
    for u in &h.updates {
        p.import(&u.bytes).unwrap();
    }
    p.import(&r.export(ExportMode::updates(&p.oplog_vv())).unwrap())
        .unwrap();
    assert_eq!(p.get_deep_value(), r.get_deep_value(), "peer and replica diverged after sync");
}

/// The report's scenario: peer 1 adds an ordinary map, peer 2 syncs and writes into a
/// mergeable text under it; a third replica gets peer 2's update first.
pub fn report_scenario() -> (LoroDoc, LoroDoc, Vec<u8>, Vec<u8>) {
    let a = new_peer(1);
    a.get_map("doc")
        .insert_container("settings", LoroMap::new())
        .unwrap();
    a.commit();
    let from_a = a.export(ExportMode::all_updates()).unwrap();
    let b = new_peer(2);
    b.import(&from_a).unwrap();
    let before = b.oplog_vv();
    let settings = b
        .get_map("doc")
        .get("settings")
        .unwrap()
        .into_container()
        .unwrap()
        .into_map()
        .unwrap();
    settings.ensure_mergeable_text("title").unwrap().insert(0, "hello").unwrap();
    b.commit();
    let from_b = b.export(ExportMode::updates(&before)).unwrap();
    (a, b, from_a, from_b)
}

#[test]
fn early_edit_is_held_until_its_parent_arrives() {
    let (_a, b, from_a, from_b) = report_scenario();
    let c = new_peer(3);
    let status = c.import(&from_b).unwrap();
    assert!(status.pending.is_some(), "an update that depends on a missing one is pending");
    let status = c.import(&from_a).unwrap();
    assert!(status.pending.is_none());
    assert_eq!(c.get_deep_value(), b.get_deep_value());
    assert_eq!(c.oplog_vv(), b.oplog_vv());
    same_layout(&c, &b, "receiver");
}

#[test]
fn shuffled_updates_converge() {
    let mut rng = Rng::new(seed());
    for t in 0..24 {
        let npeers = 2 + t % 3;
        let steps = 10 + rng.below(10);
        trial(&mut rng, npeers, steps);
    }
}
