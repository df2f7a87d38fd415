//! Hidden oracle: an element inserted at index i of a List is found at index i of the replica that
//! made the insert, also after concurrent inserts from other replicas were merged, and all replicas
//! agree once every op is delivered.
//!
//! The seed (`FAULTLINE_SEED`) picks the number of replicas, their actor ids, the edits (inserts and
//! deletes at random indices) and when each replica catches up with the others' ops.

use crdts::list::Op;
use crdts::{CmRDT, List};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The seed of this run: `FAULTLINE_SEED`, 1 when unset.
pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

pub fn broadcast(replicas: &mut [List<char, u8>], op: &Op<char, u8>) {
    for r in replicas.iter_mut() {
        r.apply(op.clone());
    }
}

/// The symptom's two replicas (actors 10 and 20) after each inserted its first character into the
/// empty list concurrently, both ops delivered everywhere.
pub fn after_concurrent_first_inserts() -> Vec<List<char, u8>> {
    let mut replicas = vec![List::new(), List::new()];
    let p = replicas[0].insert_index(0, 'p', 10);
    let q = replicas[1].insert_index(0, 'q', 20);
    broadcast(&mut replicas, &p);
    broadcast(&mut replicas, &q);
    replicas
}

/// The symptom's later typing: (replica, index, character, actor), each op broadcast at once.
pub const SYMPTOM_STEPS: [(usize, usize, char, u8); 4] =
    [(0, 1, 'm', 10), (0, 1, 'n', 10), (0, 1, 'o', 10), (1, 1, 'z', 20)];

#[test]
fn insert_next_to_concurrent_first_elements() {
    let mut replicas = after_concurrent_first_inserts();
    assert_eq!(replicas[0].read::<String>(), "pq");
    let mut expected = String::from("pq");
    for (r, ix, c, actor) in SYMPTOM_STEPS {
        let op = replicas[r].insert_index(ix, c, actor);
        broadcast(&mut replicas, &op);
        expected.insert(ix, c);
        assert_eq!(replicas[r].read::<String>(), expected, "after inserting {c:?} at index {ix}");
    }
    assert_eq!(replicas[0].read::<String>(), replicas[1].read::<String>());
}

/// One seeded session: 2 to 4 replicas edit concurrently; every replica applies its own op at once
/// and, at random moments, catches up with all ops made so far (in the order they were made, which
/// respects causality). Checks every insert and delete on the replica that made it and convergence
/// at the end.
pub fn session(seed: u64) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = rng.gen_range(2..=4usize);
    let mut actors: Vec<u8> = Vec::new();
    while actors.len() < n {
        let a = rng.gen_range(1..=250u8);
        if !actors.contains(&a) {
            actors.push(a);
        }
    }
    let mut replicas: Vec<List<u32, u8>> = vec![List::new(); n];
    let mut log: Vec<(usize, Op<u32, u8>)> = Vec::new();
    let mut delivered = vec![0usize; n];
    let mut next = 0u32;
    for step in 0..rng.gen_range(40..=120) {
        let r = rng.gen_range(0..n);
        if rng.gen_bool(0.2) {
            for (_, op) in log[delivered[r]..].iter().filter(|(from, _)| *from != r) {
                replicas[r].apply(op.clone());
            }
            delivered[r] = log.len();
            continue;
        }
        let actor = actors[r];
        let mut expected: Vec<u32> = replicas[r].iter().copied().collect();
        let len = expected.len();
        let op = if len > 0 && rng.gen_bool(0.15) {
            let ix = rng.gen_range(0..len);
            expected.remove(ix);
            replicas[r].delete_index(ix, actor).expect("index in range")
        } else {
            let ix = rng.gen_range(0..=len);
            next += 1;
            expected.insert(ix, next);
            replicas[r].insert_index(ix, next, actor)
        };
        replicas[r].apply(op.clone());
        log.push((r, op));
        let after: Vec<u32> = replicas[r].iter().copied().collect();
        if after != expected {
            return Err(format!(
                "session {seed} step {step}: replica {r} (actor {actor}) expected {expected:?}, got {after:?}"
            ));
        }
    }
    for (r, rep) in replicas.iter_mut().enumerate() {
        for (_, op) in log[delivered[r]..].iter().filter(|(from, _)| *from != r) {
            rep.apply(op.clone());
        }
    }
    let first: Vec<u32> = replicas[0].iter().copied().collect();
    for (i, rep) in replicas.iter().enumerate() {
        let other: Vec<u32> = rep.iter().copied().collect();
        if other != first {
            return Err(format!("session {seed}: replica {i} differs after full delivery"));
        }
    }
    Ok(())
}

#[test]
fn concurrent_editing_sessions_keep_insert_positions() {
    let seed = seed();
    let failures: Vec<String> = (0..400u64)
        .filter_map(|k| session(seed.wrapping_mul(1000).wrapping_add(k)).err())
        .collect();
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of 400 sessions misplaced an element; first: {}",
        failures.len(),
        failures[0]
    );
}
