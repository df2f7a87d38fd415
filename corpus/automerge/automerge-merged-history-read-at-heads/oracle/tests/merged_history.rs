//! Hidden oracle: after a server merges many short-lived client sessions (one actor per session),
//! the document's own heads must describe its whole history: nothing is "newer" than the heads,
//! and reading at the heads shows the same values as reading the current state; reading at the
//! heads it had right after the merge, or after any later edit, shows the state it had then.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ChangeHash, ReadDoc, ROOT};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// Draws fresh actor ids.
pub struct Actors(pub SmallRng);

impl Actors {
    pub fn next(&mut self) -> ActorId {
        let bytes: [u8; 16] = self.0.gen();
        ActorId::from(bytes)
    }
}

/// The server document, a copy of it taken right after the merge (before the later edits), and
/// the heads it had after each later edit.
pub struct Built {
    pub server: AutoCommit,
    pub merged: AutoCommit,
    pub merged_heads: Vec<ChangeHash>,
    pub later_heads: Vec<Vec<ChangeHash>>,
}

/// Builds the server document: `before` edits, then `clients` clients that each fork it and make
/// `sessions` edits, each in a new session (new actor), then the merge and `after` more edits.
/// `named` hears every actor with its role ("server", "client-3/session-1").
pub fn server_doc(
    actors: &mut Actors,
    shape: Shape,
    named: &mut dyn FnMut(&ActorId, String),
) -> Built {
    let Shape { before, clients, sessions, after } = shape;
    let mut server = AutoCommit::new().with_actor(actors.next());
    named(server.get_actor(), "server".to_string());
    for i in 0..before {
        server.put(ROOT, format!("setup-{i}"), i as i64).unwrap();
        server.commit();
    }
    let mut replicas: Vec<AutoCommit> = (0..clients).map(|_| server.fork().with_actor(actors.next())).collect();
    for (c, doc) in replicas.iter_mut().enumerate() {
        for s in 0..sessions {
            named(doc.get_actor(), format!("client-{c}/session-{s}"));
            doc.put(ROOT, format!("client-{c}-session-{s}"), s as i64).unwrap();
            doc.commit();
            let next = actors.next();
            doc.set_actor(next);
        }
    }
    for doc in replicas.iter_mut() {
        server.merge(doc).unwrap();
    }
    let mut merged = server.fork();
    let merged_heads = merged.get_heads();
    let mut later_heads = Vec::new();
    for i in 0..after {
        server.put(ROOT, format!("later-{i}"), i as i64).unwrap();
        server.commit();
        later_heads.push(server.get_heads());
    }
    Built { server, merged, merged_heads, later_heads }
}

/// How many edits, clients and sessions a server document is built from.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub before: usize,
    pub clients: usize,
    pub sessions: usize,
    pub after: usize,
}

/// The report's shape: 60 edits, 24 clients x 2 sessions, merge, 50 edits.
pub const REPORTED: Shape = Shape { before: 60, clients: 24, sessions: 2, after: 50 };

/// Reading `doc` at `heads` must show exactly `expected`'s current state, and exactly `newer`
/// changes must be reported as not covered by `heads`.
fn check_at(doc: &mut AutoCommit, heads: &[ChangeHash], expected: &mut AutoCommit, newer: usize, what: &str) -> Result<(), String> {
    let stray = doc.get_changes(heads).len();
    if stray != newer {
        return Err(format!("{what}: {stray} change(s) reported as not covered by the heads, expected {newer}"));
    }
    let want = expected.length(ROOT);
    let at = doc.length_at(ROOT, heads);
    if want != at {
        return Err(format!("{what}: {want} keys expected but {at} keys when read at the heads"));
    }
    for key in expected.keys(ROOT).collect::<Vec<_>>() {
        let a = expected.get(ROOT, &key).unwrap().map(|(v, _)| v.to_string());
        let b = doc.get_at(ROOT, &key, heads).unwrap().map(|(v, _)| v.to_string());
        if a != b {
            return Err(format!("{what}: key {key}: {a:?} expected, {b:?} at the heads"));
        }
    }
    Ok(())
}

/// The document's own heads describe its whole history, its heads right after the merge describe
/// the state it had then, and so do the heads it had after each later edit (the later edits add
/// one key each).
pub fn check(built: &mut Built, after: usize, what: &str) -> Result<(), String> {
    let heads = built.server.get_heads();
    let mut current = built.server.fork();
    check_at(&mut built.server, &heads, &mut current, 0, &format!("{what} at its own heads"))?;
    let merged_heads = built.merged_heads.clone();
    check_at(&mut built.server, &merged_heads, &mut built.merged, after, &format!("{what} at the heads right after the merge"))?;
    let merged_len = built.merged.length(ROOT);
    for (i, heads) in built.later_heads.iter().enumerate() {
        let stray = built.server.get_changes(heads).len();
        if stray != after - 1 - i {
            return Err(format!(
                "{what} at the heads after later edit {i}: {stray} change(s) reported as not covered by the heads, expected {}",
                after - 1 - i
            ));
        }
        let at = built.server.length_at(ROOT, heads);
        if at != merged_len + i + 1 {
            return Err(format!("{what} at the heads after later edit {i}: {at} keys, expected {}", merged_len + i + 1));
        }
    }
    Ok(())
}

#[test]
fn two_dozen_clients_two_sessions_each() {
    let mut actors = Actors(SmallRng::seed_from_u64(11));
    let mut built = server_doc(&mut actors, REPORTED, &mut |_, _| {});
    check(&mut built, REPORTED.after, "server").unwrap();
    let mut loaded = Built {
        server: AutoCommit::load(&built.server.save()).unwrap(),
        merged: built.merged.fork(),
        merged_heads: built.merged_heads.clone(),
        later_heads: built.later_heads.clone(),
    };
    check(&mut loaded, REPORTED.after, "reloaded copy").unwrap();
}

#[test]
fn seeded_merge_shapes() {
    let seed = seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    for round in 0..TRIALS {
        let shape = Shape {
            before: rng.gen_range(20..80),
            clients: rng.gen_range(8..100),
            sessions: rng.gen_range(1..6),
            after: rng.gen_range(20..60),
        };
        let mut actors = Actors(SmallRng::seed_from_u64(rng.gen()));
        let mut built = server_doc(&mut actors, shape, &mut |_, _| {});
        if let Err(e) = check(&mut built, shape.after, "server") {
            panic!("seed {seed} round {round} of {TRIALS} {shape:?}: {e}");
        }
    }
}

const TRIALS: usize = 12;
