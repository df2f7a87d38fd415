//! The memo of configurations already explored: the set of completed operations linearized,
//! the model state, and the set of never-returned operations linearized.
//!
//! Two search paths that linearized the same completed operations and reached equal states
//! have the same obligations left. If the first had linearized no more never-returned
//! operations than the second (a subset), it had every option the second has, since those
//! operations are optional and never block the search; so the second is cut. With no
//! never-returned operation this is the plain (set, state) memo of Lowe's algorithm.
//!
//! The sets are bitsets; the completed set's hash is kept up to date in O(1) per step by
//! XOR-ing a fixed random word per operation (Zobrist hashing), so a lookup costs one hash of
//! the state plus comparisons within a bucket.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A set of operation positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bitset {
    words: Vec<u64>,
    len: usize,
}

impl Bitset {
    /// The empty set over positions `0..len`.
    pub(crate) fn new(len: usize) -> Self {
        Bitset {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub(crate) fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of positions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether every member of `self` is in `other` (both over the same positions).
    fn is_subset(&self, other: &Bitset) -> bool {
        self.words
            .iter()
            .zip(&other.words)
            .all(|(a, b)| a & !b == 0)
    }
}

/// The fixed random word of position `i` (SplitMix64 of `i`), XOR-ed into a set's hash when
/// `i` joins or leaves it.
pub(crate) fn zobrist(i: usize) -> u64 {
    let mut z = (i as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fast, fixed (unkeyed) hasher for model states; collisions only cost comparisons.
#[derive(Default)]
struct StateHasher(u64);

impl StateHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for StateHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        zobrist(self.0 as usize)
    }
}

/// Hash of a model state.
pub(crate) fn state_hash<S: Hash>(state: &S) -> u64 {
    let mut h = StateHasher::default();
    state.hash(&mut h);
    h.finish()
}

/// Passes an already mixed `u64` key through.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The configurations seen with one completed set and one state: the never-returned sets
/// they were reached with, none a subset of another seen before it.
struct Entry<S> {
    done: Bitset,
    state: S,
    optional: Vec<Bitset>,
}

/// The configurations seen, bucketed by the combined hash of completed set and state.
pub(crate) struct Cache<S> {
    buckets: HashMap<u64, Vec<Entry<S>>, BuildHasherDefault<Identity>>,
}

impl<S: Eq + Clone> Cache<S> {
    pub(crate) fn new() -> Self {
        Cache {
            buckets: HashMap::default(),
        }
    }

    /// Records the configuration; `false` when one with the same completed set and state and
    /// a subset of its never-returned set was already there.
    pub(crate) fn insert(&mut self, key: u64, done: &Bitset, state: &S, optional: &Bitset) -> bool {
        let bucket = self.buckets.entry(key).or_default();
        match bucket
            .iter_mut()
            .find(|e| e.done == *done && e.state == *state)
        {
            Some(entry) => {
                if entry.optional.iter().any(|seen| seen.is_subset(optional)) {
                    return false;
                }
                entry.optional.push(optional.clone());
            }
            None => bucket.push(Entry {
                done: done.clone(),
                state: state.clone(),
                optional: vec![optional.clone()],
            }),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_new_once() {
        let mut cache = Cache::new();
        let none = Bitset::new(0);
        let mut set = Bitset::new(70);
        set.set(3);
        set.set(69);
        let key = zobrist(3) ^ zobrist(69) ^ state_hash(&"s".to_string());
        assert!(cache.insert(key, &set, &"s".to_string(), &none));
        assert!(!cache.insert(key, &set, &"s".to_string(), &none));
        assert!(cache.insert(key, &set, &"t".to_string(), &none));
        set.clear(69);
        assert!(cache.insert(key, &set, &"s".to_string(), &none));
    }

    #[test]
    fn more_optional_operations_for_the_same_completed_set_and_state_are_cut() {
        let mut cache = Cache::new();
        let done = Bitset::new(3);
        let (mut a, mut ab, mut b) = (Bitset::new(2), Bitset::new(2), Bitset::new(2));
        a.set(0);
        ab.set(0);
        ab.set(1);
        b.set(1);
        assert!(cache.insert(1, &done, &0, &a));
        assert!(!cache.insert(1, &done, &0, &ab), "a superset of one seen");
        assert!(cache.insert(1, &done, &0, &b), "not a superset");
        assert!(!cache.insert(1, &done, &0, &b));
        assert!(cache.insert(1, &done, &1, &ab), "another state");
    }

    #[test]
    fn state_hashes_tell_close_strings_apart() {
        let a = state_hash(&"x 0 1 yx 0 2 y".to_string());
        let b = state_hash(&"x 0 2 yx 0 1 y".to_string());
        assert_ne!(a, b);
        assert_eq!(a, state_hash(&"x 0 1 yx 0 2 y".to_string()));
    }
}
