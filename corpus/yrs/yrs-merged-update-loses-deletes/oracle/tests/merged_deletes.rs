//! Hidden oracle: a merged update has the same effect as the updates it was merged from, applied one
//! by one, however the deletions in them overlap and in whatever order and grouping they are merged.
//!
//! The seed (`FAULTLINE_SEED`) picks the writers of the base text, the peers and the ranges they
//! delete concurrently, the order of the log and how the compaction job groups and re-merges it.

use yrs::updates::decoder::Decode;
use yrs::{merge_updates_v1, Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

/// The symptom's base text.
pub const BASE: &str = "the quick brown fox!";

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
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
}

/// The full state of a writer that typed `BASE`, as one update.
pub fn base_update() -> Vec<u8> {
    let writer = Doc::with_client_id(1);
    let text = writer.get_or_insert_text("t");
    text.insert(&mut writer.transact_mut(), 0, BASE);
    let txn = writer.transact();
    txn.encode_state_as_update_v1(&StateVector::default())
}

/// A peer that has loaded `log` deletes `len` characters at `index`; returns its update.
pub fn delete_update(log: &[Vec<u8>], peer: u64, index: u32, len: u32) -> Vec<u8> {
    let doc = Doc::with_client_id(peer);
    let text = doc.get_or_insert_text("t");
    for u in log {
        doc.transact_mut().apply_update(Update::decode_v1(u).unwrap());
    }
    let before = doc.transact().state_vector();
    text.remove_range(&mut doc.transact_mut(), index, len);
    let txn = doc.transact();
    txn.encode_state_as_update_v1(&before)
}

/// The text of a fresh document that applied `updates` one by one.
pub fn load(updates: &[&[u8]]) -> String {
    let doc = Doc::with_client_id(99);
    let text = doc.get_or_insert_text("t");
    for u in updates {
        doc.transact_mut().apply_update(Update::decode_v1(u).unwrap());
    }
    let txn = doc.transact();
    text.get_string(&txn)
}

/// A seeded document log: the base text typed in appended chunks by one or two writers, then
/// the updates of 2 to 4 peers that each deleted a range of it concurrently (all ranges overlap one
/// region). Returns the log (base updates first) and the text every peer shows after all of it.
pub fn seeded_log(rng: &mut Rng) -> (Vec<Vec<u8>>, String) {
    let writers: Vec<Doc> = (0..rng.range(1, 2))
        .map(|i| Doc::with_client_id(10 + u64::from(i)))
        .collect();
    let mut base = String::new();
    let mut log: Vec<Vec<u8>> = Vec::new();
    for _ in 0..rng.range(2, 5) {
        let doc = &writers[rng.range(0, writers.len() as u32 - 1) as usize];
        for u in &log {
            doc.transact_mut().apply_update(Update::decode_v1(u).unwrap());
        }
        let text = doc.get_or_insert_text("t");
        let chunk: String = (0..rng.range(3, 9))
            .map(|_| char::from(b'a' + rng.range(0, 25) as u8))
            .collect();
        let mut txn = doc.transact_mut();
        let before = txn.state_vector();
        let end = text.len(&txn);
        text.insert(&mut txn, end, &chunk);
        log.push(txn.encode_state_as_update_v1(&before));
        base.push_str(&chunk);
    }
    let n = base.len() as u32;
    let hot = rng.range(0, n - 2);
    let mut deleted = vec![false; base.len()];
    let mut deletes = Vec::new();
    for peer in 0..rng.range(2, 4) {
        let start = rng.range(hot.saturating_sub(6), hot);
        let end = rng.range(hot + 1, n.min(hot + 8));
        deletes.push(delete_update(&log, 20 + u64::from(peer), start, end - start));
        for d in &mut deleted[start as usize..end as usize] {
            *d = true;
        }
    }
    for i in (1..deletes.len()).rev() {
        deletes.swap(i, rng.range(0, i as u32) as usize);
    }
    log.extend(deletes);
    let expected = base
        .chars()
        .zip(&deleted)
        .filter(|(_, d)| !**d)
        .map(|(c, _)| c)
        .collect();
    (log, expected)
}

/// Compacts `log` as a job running over time would: merges consecutive groups of it, sometimes with
/// an update repeated, then merges the results again.
pub fn compact(rng: &mut Rng, log: &[Vec<u8>]) -> Vec<u8> {
    let mut groups: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while i < log.len() {
        let end = (i + rng.range(1, 3) as usize).min(log.len());
        let mut parts: Vec<&[u8]> = log[i..end].iter().map(|u| u.as_slice()).collect();
        if rng.range(0, 3) == 0 {
            parts.push(parts[0]);
        }
        groups.push(merge_updates_v1(&parts).unwrap());
        i = end;
    }
    let parts: Vec<&[u8]> = groups.iter().map(|u| u.as_slice()).collect();
    merge_updates_v1(&parts).unwrap()
}

#[test]
fn seeded_compactions_keep_every_deletion() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    for session in 0..30 {
        let (log, expected) = seeded_log(&mut rng);
        let parts: Vec<&[u8]> = log.iter().map(|u| u.as_slice()).collect();
        assert_eq!(load(&parts), expected, "seed {seed} session {session}: the log applied one by one");
        let merged = merge_updates_v1(&parts).unwrap();
        assert_eq!(load(&[&merged]), expected, "seed {seed} session {session}: the log merged at once");
        let compacted = compact(&mut rng, &log);
        assert_eq!(load(&[&compacted]), expected, "seed {seed} session {session}: the log merged in groups");
        let again = merge_updates_v1(&[&compacted, &merged]).unwrap();
        assert_eq!(load(&[&again]), expected, "seed {seed} session {session}: two compactions merged");
    }
}

#[test]
fn wide_delete_then_narrow_delete() {
    let base = vec![base_update()];
    let wide = delete_update(&base, 2, 0, 10);
    let narrow = delete_update(&base, 3, 2, 3);
    let parts: [&[u8]; 3] = [&base[0], &wide, &narrow];
    let merged = merge_updates_v1(&parts).unwrap();
    assert_eq!(load(&parts), "brown fox!");
    assert_eq!(load(&[&merged]), "brown fox!");
}

#[test]
fn overlapping_deletes_in_any_order() {
    let base = vec![base_update()];
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
                for parts in [[&base[0][..], &a[..], &b[..]], [&base[0][..], &b[..], &a[..]]] {
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
    let base = vec![base_update()];
    let a = delete_update(&base, 2, 4, 11);
    let b = delete_update(&base, 3, 5, 4);
    let c = delete_update(&base, 4, 14, 2);
    let ab = merge_updates_v1(&[&a, &b]).unwrap();
    let all = merge_updates_v1(&[&base[0], &ab, &c]).unwrap();
    let expected = load(&[&base[0], &a, &b, &c]);
    assert_eq!(load(&[&all]), expected);
    assert_eq!(load(&[&base[0], &ab, &c]), expected);
}
