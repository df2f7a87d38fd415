//! Hidden oracle: after a server merges many short-lived client sessions (one actor per session),
//! the document's own heads must describe its whole history: nothing is "newer" than the heads,
//! and reading at the heads shows the same values as reading the current state.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

struct Actors(SmallRng);

impl Actors {
    fn next(&mut self) -> ActorId {
        let bytes: [u8; 16] = self.0.gen();
        ActorId::from(bytes)
    }
}

/// Builds the server document: `before` edits, then `clients` clients that each fork it and make
/// `sessions` edits, each in a new session (new actor), then the merge and `after` more edits.
fn server_doc(actors: &mut Actors, before: usize, clients: usize, sessions: usize, after: usize) -> AutoCommit {
    let mut server = AutoCommit::new().with_actor(actors.next());
    for i in 0..before {
        server.put(ROOT, format!("setup-{i}"), i as i64).unwrap();
        server.commit();
    }
    let mut replicas: Vec<AutoCommit> = (0..clients).map(|_| server.fork().with_actor(actors.next())).collect();
    for (c, doc) in replicas.iter_mut().enumerate() {
        for s in 0..sessions {
            doc.put(ROOT, format!("client-{c}-session-{s}"), s as i64).unwrap();
            doc.commit();
            let next = actors.next();
            doc.set_actor(next);
        }
    }
    for doc in replicas.iter_mut() {
        server.merge(doc).unwrap();
    }
    for i in 0..after {
        server.put(ROOT, format!("later-{i}"), i as i64).unwrap();
        server.commit();
    }
    server
}

fn check(doc: &mut AutoCommit, what: &str) -> Result<(), String> {
    let heads = doc.get_heads();
    let stray = doc.get_changes(&heads);
    if !stray.is_empty() {
        return Err(format!("{what}: {} change(s) reported as not covered by the document's own heads", stray.len()));
    }
    let now = doc.length(ROOT);
    let at = doc.length_at(ROOT, &heads);
    if now != at {
        return Err(format!("{what}: {now} keys now but {at} keys when read at the current heads"));
    }
    for key in doc.keys(ROOT).collect::<Vec<_>>() {
        let a = doc.get(ROOT, &key).unwrap().map(|(v, _)| v.to_string());
        let b = doc.get_at(ROOT, &key, &heads).unwrap().map(|(v, _)| v.to_string());
        if a != b {
            return Err(format!("{what}: key {key}: {a:?} now, {b:?} at the current heads"));
        }
    }
    Ok(())
}

#[test]
fn two_dozen_clients_two_sessions_each() {
    let mut actors = Actors(SmallRng::seed_from_u64(11));
    let mut doc = server_doc(&mut actors, 60, 24, 2, 50);
    check(&mut doc, "server").unwrap();
    let mut loaded = AutoCommit::load(&doc.save()).unwrap();
    check(&mut loaded, "reloaded copy").unwrap();
}

#[test]
fn seeded_merge_shapes() {
    let seed = seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for round in 0..TRIALS {
        let before = rng.gen_range(20..80);
        let clients = rng.gen_range(8..30);
        let sessions = rng.gen_range(1..4);
        let after = rng.gen_range(20..60);
        let mut actors = Actors(SmallRng::seed_from_u64(rng.gen()));
        let mut doc = server_doc(&mut actors, before, clients, sessions, after);
        if let Err(e) = check(&mut doc, "server") {
            failures.push(format!("seed {seed} round {round} ({before} edits, {clients} clients x {sessions} sessions, {after} edits): {e}"));
        }
    }
    assert!(failures.is_empty(), "{} of {TRIALS} rounds failed; first: {}", failures.len(), failures[0]);
}

const TRIALS: usize = 24;
