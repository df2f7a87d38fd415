//! Replicas that exchange edits through the sync protocol, some of which only ever make edits that
//! change nothing, save their documents and restart from those saves. Every save must load, to the
//! same heads and values, and a restarted replica must keep syncing with the others.

use automerge::sync::{self, SyncDoc};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ChangeHash, ObjType, ReadDoc, ROOT};

/// A small deterministic generator (splitmix64), so that a seed always replays the same history.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5deece66d)
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

/// What the scenario tells an observer (the bundle generator prints it; the tests ignore it).
pub trait Observer {
    fn note(&mut self, _line: String) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// The edits of a replica that change nothing but still go through the editing API.
#[derive(Clone, Copy, Debug)]
pub enum Idle {
    /// A commit with nothing pending (an autosave that commits first).
    CommitOnly,
    /// The editor writes back the text it shows, unchanged.
    SameText,
    /// A delete of a map key that is not there.
    DeleteMissing,
    /// A local edit that is rolled back before it is committed.
    RolledBack,
}

pub struct Replica {
    pub name: String,
    pub actor: ActorId,
    pub doc: AutoCommit,
}

pub fn actor_from(bytes: &[u8]) -> ActorId {
    ActorId::from(bytes.to_vec())
}

fn text_obj(doc: &AutoCommit) -> Option<automerge::ObjId> {
    match doc.get(ROOT, "text").ok()?? {
        (automerge::Value::Object(ObjType::Text), id) => Some(id),
        _ => None,
    }
}

fn map_obj(doc: &AutoCommit) -> Option<automerge::ObjId> {
    match doc.get(ROOT, "meta").ok()?? {
        (automerge::Value::Object(ObjType::Map), id) => Some(id),
        _ => None,
    }
}

/// Runs the sync protocol between two replicas over a fresh connection until both are quiet.
pub fn sync_pair(a: &mut AutoCommit, b: &mut AutoCommit) -> Result<(), String> {
    let mut sa = sync::State::new();
    let mut sb = sync::State::new();
    for _ in 0..50 {
        let m1 = a.sync().generate_sync_message(&mut sa);
        if let Some(m) = &m1 {
            b.sync().receive_sync_message(&mut sb, m.clone()).map_err(|e| format!("receive failed: {e}"))?;
        }
        let m2 = b.sync().generate_sync_message(&mut sb);
        if let Some(m) = &m2 {
            a.sync().receive_sync_message(&mut sa, m.clone()).map_err(|e| format!("receive failed: {e}"))?;
        }
        if m1.is_none() && m2.is_none() {
            return Ok(());
        }
    }
    Err("sync did not go quiet".into())
}

pub fn idle_edit(doc: &mut AutoCommit, kind: Idle) -> Result<(), String> {
    match kind {
        Idle::CommitOnly => {
            doc.commit();
        }
        Idle::SameText => {
            let t = text_obj(doc).ok_or("no text yet")?;
            let current = doc.text(&t).map_err(|e| e.to_string())?;
            doc.update_text(&t, current).map_err(|e| e.to_string())?;
            doc.commit();
        }
        Idle::DeleteMissing => {
            let m = map_obj(doc).ok_or("no map yet")?;
            doc.delete(&m, "no-such-key").map_err(|e| e.to_string())?;
            doc.commit();
        }
        Idle::RolledBack => {
            let t = text_obj(doc).ok_or("no text yet")?;
            doc.splice_text(&t, 0, 0, "draft").map_err(|e| e.to_string())?;
            doc.rollback();
        }
    }
    Ok(())
}

fn sorted(mut h: Vec<ChangeHash>) -> Vec<ChangeHash> {
    h.sort();
    h
}

/// Saves a replica and loads the save as a restarted replica with the same actor id; the loaded
/// document must hold the same heads and values.
pub fn restart(r: &mut Replica, obs: &mut dyn Observer) -> Result<(), String> {
    let bytes = r.doc.save();
    let loaded = AutoCommit::load(&bytes).map_err(|e| {
        obs.note(format!("{}: save of {} bytes, load failed: {e}", r.name, bytes.len()));
        format!("the save of {} does not load: {e}", r.name)
    })?;
    let mut loaded = loaded.with_actor(r.actor.clone());
    if sorted(loaded.get_heads()) != sorted(r.doc.get_heads()) {
        return Err(format!("{} restarted with other heads than it saved", r.name));
    }
    let before = r.doc.hydrate(&ROOT, None).map_err(|e| e.to_string())?;
    let after = loaded.hydrate(&ROOT, None).map_err(|e| e.to_string())?;
    if before != after {
        return Err(format!("{} restarted with other values than it saved", r.name));
    }
    obs.note(format!("{}: save of {} bytes loads, same heads and values", r.name, bytes.len()));
    r.doc = loaded;
    Ok(())
}

fn value_of(doc: &AutoCommit) -> Result<automerge::hydrate::Value, String> {
    doc.hydrate(&ROOT, None).map_err(|e| e.to_string())
}

/// Syncs everyone along a ring twice, then checks that all replicas hold the same heads and values,
/// that every save loads, and that restarted replicas keep editing and syncing.
pub fn settle(rs: &mut [Replica], obs: &mut dyn Observer) -> Result<(), String> {
    let n = rs.len();
    for _ in 0..2 {
        for i in 0..n {
            let j = (i + 1) % n;
            let (a, b) = two(rs, i, j);
            sync_pair(&mut a.doc, &mut b.doc)?;
        }
    }
    let heads = sorted(rs[0].doc.get_heads());
    let value = value_of(&rs[0].doc)?;
    for r in rs.iter_mut() {
        if sorted(r.doc.get_heads()) != heads || value_of(&r.doc)? != value {
            return Err(format!("{} did not converge with {}", r.name, "the first replica"));
        }
    }
    for i in 0..n {
        restart(&mut rs[i], obs)?;
    }
    // The restarted replicas keep working: each writes, and everyone converges again.
    for i in 0..n {
        if let Some(t) = text_obj(&rs[i].doc) {
            let len = rs[i].doc.length(&t);
            rs[i].doc.splice_text(&t, len, 0, &format!("<{i}>")).map_err(|e| e.to_string())?;
            rs[i].doc.commit();
        }
    }
    for _ in 0..2 {
        for i in 0..n {
            let j = (i + 1) % n;
            let (a, b) = two(rs, i, j);
            sync_pair(&mut a.doc, &mut b.doc)?;
        }
    }
    let heads = sorted(rs[0].doc.get_heads());
    for r in rs.iter_mut() {
        if sorted(r.doc.get_heads()) != heads {
            return Err(format!("{} did not converge after the restarts", r.name));
        }
        let bytes = r.doc.save();
        AutoCommit::load(&bytes).map_err(|e| format!("the final save of {} does not load: {e}", r.name))?;
    }
    Ok(())
}

pub fn two(rs: &mut [Replica], i: usize, j: usize) -> (&mut Replica, &mut Replica) {
    assert!(i != j);
    if i < j {
        let (l, r) = rs.split_at_mut(j);
        (&mut l[i], &mut r[0])
    } else {
        let (l, r) = rs.split_at_mut(i);
        (&mut r[0], &mut l[j])
    }
}

/// The reported session: two writers and a viewer whose app commits before every autosave. The
/// viewer's actor id sorts between the writers' ids.
pub fn reported(obs: &mut dyn Observer) -> Result<(), String> {
    let ids = [actor_from(&[0x1a; 16]), actor_from(&[0x5c; 16]), actor_from(&[0x9e; 16])];
    let mut writer_a = Replica { name: "writer-a".into(), actor: ids[0].clone(), doc: AutoCommit::new().with_actor(ids[0].clone()) };
    let mut viewer = Replica { name: "viewer".into(), actor: ids[1].clone(), doc: AutoCommit::new().with_actor(ids[1].clone()) };
    let mut writer_b = Replica { name: "writer-b".into(), actor: ids[2].clone(), doc: AutoCommit::new().with_actor(ids[2].clone()) };
    for r in [&writer_a, &viewer, &writer_b] {
        obs.note(format!("{}: actor {}", r.name, r.actor));
    }
    let t = writer_a.doc.put_object(ROOT, "text", ObjType::Text).map_err(|e| e.to_string())?;
    writer_a.doc.put_object(ROOT, "meta", ObjType::Map).map_err(|e| e.to_string())?;
    writer_a.doc.splice_text(&t, 0, 0, "Meeting notes").map_err(|e| e.to_string())?;
    writer_a.doc.commit();
    obs.note("writer-a: creates the text and types \"Meeting notes\", commit".into());
    sync_pair(&mut writer_a.doc, &mut viewer.doc)?;
    obs.note("writer-a <-> viewer: sync until quiet".into());
    idle_edit(&mut viewer.doc, Idle::CommitOnly)?;
    obs.note("viewer: autosave: commit() (nothing pending), save, reload".into());
    restart(&mut viewer, obs)?;
    idle_edit(&mut viewer.doc, Idle::CommitOnly)?;
    obs.note("viewer: commit() (nothing pending)".into());
    sync_pair(&mut writer_a.doc, &mut writer_b.doc)?;
    obs.note("writer-a <-> writer-b: sync until quiet".into());
    let tb = text_obj(&writer_b.doc).ok_or("writer-b has no text")?;
    writer_b.doc.splice_text(&tb, 13, 0, ", 3 May").map_err(|e| e.to_string())?;
    writer_b.doc.commit();
    obs.note("writer-b: types \", 3 May\" at the end, commit".into());
    sync_pair(&mut writer_b.doc, &mut viewer.doc)?;
    obs.note("writer-b <-> viewer: sync until quiet".into());
    let shown = viewer.doc.text(&text_obj(&viewer.doc).ok_or("viewer has no text")?).map_err(|e| e.to_string())?;
    obs.note(format!("viewer: shows {shown:?}, {} head(s)", viewer.doc.get_heads().len()));
    idle_edit(&mut viewer.doc, Idle::CommitOnly)?;
    obs.note("viewer: autosave: commit() (nothing pending), save, reload".into());
    restart(&mut viewer, obs)?;
    let mut rs = vec![writer_a, viewer, writer_b];
    settle(&mut rs, obs)
}

/// One seeded history: three to five replicas, writers and viewers, some created by forking
/// another replica, editing, making edits that change nothing, syncing pairwise and restarting
/// from their saves.
pub fn history(seed: u64, obs: &mut dyn Observer) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let target = 3 + rng.below(3) as usize;
    let fresh_actor = |rng: &mut Rng| {
        let mut b = [0u8; 16];
        for x in b.iter_mut() {
            *x = rng.below(256) as u8;
        }
        actor_from(&b)
    };
    let a0 = fresh_actor(&mut rng);
    let mut first = AutoCommit::new().with_actor(a0.clone());
    let t = first.put_object(ROOT, "text", ObjType::Text).map_err(|e| e.to_string())?;
    first.put_object(ROOT, "meta", ObjType::Map).map_err(|e| e.to_string())?;
    first.splice_text(&t, 0, 0, "abc").map_err(|e| e.to_string())?;
    first.commit();
    let mut rs = vec![Replica { name: "r0".into(), actor: a0, doc: first }];
    let mut writer = vec![true];
    let steps = 14 + rng.below(14);
    for _ in 0..steps {
        let roll = rng.below(100);
        if rs.len() < target && (roll < 20 || rs.len() < 2) {
            // A new replica: a fork of an existing one, or an empty one that syncs in.
            let actor = fresh_actor(&mut rng);
            let name = format!("r{}", rs.len());
            let from = rng.below(rs.len() as u64) as usize;
            let doc = if rng.below(2) == 0 {
                rs[from].doc.fork().with_actor(actor.clone())
            } else {
                let mut d = AutoCommit::new().with_actor(actor.clone());
                sync_pair(&mut rs[from].doc, &mut d)?;
                d
            };
            rs.push(Replica { name, actor, doc });
            writer.push(rng.below(2) == 0);
            continue;
        }
        let i = rng.below(rs.len() as u64) as usize;
        if roll < 45 {
            if writer[i] {
                let doc = &mut rs[i].doc;
                if rng.below(3) == 0 {
                    let m = map_obj(doc).ok_or("no map")?;
                    let key = format!("k{}", rng.below(4));
                    doc.put(&m, key, rng.below(100) as i64).map_err(|e| e.to_string())?;
                } else {
                    let tt = text_obj(doc).ok_or("no text")?;
                    let len = doc.length(&tt);
                    let pos = rng.below(len as u64 + 1) as usize;
                    let c = (b'a' + rng.below(26) as u8) as char;
                    doc.splice_text(&tt, pos, 0, &c.to_string()).map_err(|e| e.to_string())?;
                }
                doc.commit();
            } else {
                let kind = match rng.below(4) {
                    0 => Idle::SameText,
                    3 => Idle::CommitOnly,
                    1 => Idle::DeleteMissing,
                    _ => Idle::RolledBack,
                };
                idle_edit(&mut rs[i].doc, kind)?;
            }
        } else if roll < 85 {
            let mut j = rng.below(rs.len() as u64 - 1) as usize;
            if j >= i {
                j += 1;
            }
            let (a, b) = two(&mut rs, i, j);
            sync_pair(&mut a.doc, &mut b.doc)?;
        } else {
            restart(&mut rs[i], obs)?;
        }
    }
    settle(&mut rs, obs)
}

/// A replica forked from a viewer that made an idle edit, with the viewer's actor id sorting before
/// every other one: the fork starts from the viewer's state, writes, and syncs with a writer.
pub fn forked_viewer(seed: u64, obs: &mut dyn Observer) -> Result<(), String> {
    let mut rng = Rng::new(seed ^ 0xf0f0_f0f0);
    let mut ids: Vec<Vec<u8>> = (0..3)
        .map(|_| (0..16).map(|_| rng.below(256) as u8).collect())
        .collect();
    ids.sort();
    let (v, f, w) = if rng.below(2) == 0 { (0, 1, 2) } else { (0, 2, 1) };
    let mut writer = Replica { name: "writer".into(), actor: actor_from(&ids[w]), doc: AutoCommit::new().with_actor(actor_from(&ids[w])) };
    let mut viewer = Replica { name: "viewer".into(), actor: actor_from(&ids[v]), doc: AutoCommit::new().with_actor(actor_from(&ids[v])) };
    let t = writer.doc.put_object(ROOT, "text", ObjType::Text).map_err(|e| e.to_string())?;
    writer.doc.put_object(ROOT, "meta", ObjType::Map).map_err(|e| e.to_string())?;
    writer.doc.splice_text(&t, 0, 0, "xyz").map_err(|e| e.to_string())?;
    writer.doc.commit();
    sync_pair(&mut writer.doc, &mut viewer.doc)?;
    let kind = match rng.below(3) {
        0 => Idle::SameText,
        1 => Idle::DeleteMissing,
        _ => Idle::RolledBack,
    };
    idle_edit(&mut viewer.doc, kind)?;
    obs.note(format!("viewer: idle edit {kind:?}"));
    let fork_doc = viewer.doc.fork().with_actor(actor_from(&ids[f]));
    let mut fork = Replica { name: "fork".into(), actor: actor_from(&ids[f]), doc: fork_doc };
    let tf = text_obj(&fork.doc).ok_or("fork has no text")?;
    fork.doc.splice_text(&tf, 0, 0, "F").map_err(|e| e.to_string())?;
    fork.doc.commit();
    writer.doc.splice_text(&t, 3, 0, "W").map_err(|e| e.to_string())?;
    writer.doc.commit();
    sync_pair(&mut fork.doc, &mut writer.doc)?;
    restart(&mut fork, obs)?;
    let mut rs = vec![writer, viewer, fork];
    settle(&mut rs, obs)
}

/// How many seeded histories one run of the test plays.
pub const HISTORIES: u64 = 60;

#[test]
fn viewer_save_loads_after_peer_edits() {
    reported(&mut Quiet).unwrap();
}

#[test]
fn seeded_histories_save_and_restart() {
    let base = seed();
    for k in 0..HISTORIES {
        let s = base.wrapping_mul(1_000_003).wrapping_add(k);
        if let Err(e) = history(s, &mut Quiet) {
            panic!("history {k} of seed {base}: {e}");
        }
    }
}

#[test]
fn fork_of_viewer_saves_and_restarts() {
    let base = seed();
    for k in 0..8 {
        let s = base.wrapping_mul(7_919).wrapping_add(k);
        if let Err(e) = forked_viewer(s, &mut Quiet) {
            panic!("fork {k} of seed {base}: {e}");
        }
    }
}
