//! Hidden oracle: an element inserted at index i of a List must be found at index i of the
//! replica that made the insert, also after concurrent inserts from other replicas were merged.

use crdts::list::Op;
use crdts::{CmRDT, List};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn broadcast(replicas: &mut [List<char, u8>], op: &Op<char, u8>) {
    for r in replicas.iter_mut() {
        r.apply(op.clone());
    }
}

#[test]
fn insert_next_to_concurrent_first_elements() {
    // Two users start typing into the same empty list at the same time.
    let mut replicas = vec![List::new(), List::new()];
    let p = replicas[0].insert_index(0, 'p', 10);
    let q = replicas[1].insert_index(0, 'q', 20);
    broadcast(&mut replicas, &p);
    broadcast(&mut replicas, &q);
    assert_eq!(replicas[0].read::<String>(), "pq");

    // User 10 now types between the two, each time at index 1.
    let mut expected = String::from("pq");
    for c in ['m', 'n', 'o'] {
        let op = replicas[0].insert_index(1, c, 10);
        broadcast(&mut replicas, &op);
        expected.insert(1, c);
        assert_eq!(replicas[0].read::<String>(), expected, "after inserting {c:?} at index 1");
    }
    // And user 20 types right after the first character too.
    let op = replicas[1].insert_index(1, 'z', 20);
    broadcast(&mut replicas, &op);
    expected.insert(1, 'z');
    assert_eq!(replicas[1].read::<String>(), expected);
    assert_eq!(replicas[0].read::<String>(), replicas[1].read::<String>());
}

/// Three replicas edit concurrently; every so often all pending operations are delivered everywhere,
/// in the order they were made (which respects causality).
fn session(seed: u64) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = 3usize;
    let mut replicas: Vec<List<u32, u8>> = vec![List::new(); n];
    let mut log: Vec<Op<u32, u8>> = Vec::new();
    let mut delivered = vec![0usize; n];
    let mut next = 0u32;
    for step in 0..60 {
        let r = rng.gen_range(0..n);
        if rng.gen_bool(0.25) {
            for (i, rep) in replicas.iter_mut().enumerate() {
                for op in &log[delivered[i]..] {
                    rep.apply(op.clone());
                }
                delivered[i] = log.len();
            }
            continue;
        }
        let actor = r as u8 + 1;
        let len = replicas[r].len();
        if len > 0 && rng.gen_bool(0.15) {
            let ix = rng.gen_range(0..len);
            let mut before: Vec<u32> = replicas[r].iter().copied().collect();
            let op = replicas[r].delete_index(ix, actor).expect("index in range");
            replicas[r].apply(op.clone());
            log.push(op);
            before.remove(ix);
            let after: Vec<u32> = replicas[r].iter().copied().collect();
            if after != before {
                return Err(format!("seed {seed} step {step}: delete at {ix} on replica {r} gave {after:?}"));
            }
            continue;
        }
        let ix = rng.gen_range(0..=len);
        next += 1;
        let mut expected: Vec<u32> = replicas[r].iter().copied().collect();
        expected.insert(ix, next);
        let op = replicas[r].insert_index(ix, next, actor);
        replicas[r].apply(op.clone());
        log.push(op);
        let after: Vec<u32> = replicas[r].iter().copied().collect();
        if after != expected {
            return Err(format!(
                "seed {seed} step {step}: replica {r} inserted {next} at index {ix}; expected {expected:?}, got {after:?}"
            ));
        }
    }
    for (i, rep) in replicas.iter_mut().enumerate() {
        for op in &log[delivered[i]..] {
            rep.apply(op.clone());
        }
    }
    let first: Vec<u32> = replicas[0].iter().copied().collect();
    for (i, rep) in replicas.iter().enumerate() {
        let other: Vec<u32> = rep.iter().copied().collect();
        if other != first {
            return Err(format!("seed {seed}: replica {i} differs after full delivery"));
        }
    }
    Ok(())
}

#[test]
fn concurrent_editing_sessions_keep_insert_positions() {
    let failures: Vec<String> = (0..200u64).filter_map(|seed| session(seed).err()).collect();
    assert!(failures.is_empty(), "{} of 200 sessions misplaced an element; first: {}", failures.len(), failures[0]);
}
