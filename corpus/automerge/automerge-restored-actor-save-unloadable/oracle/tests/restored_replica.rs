//! A device (d) edits a document and its changes reach a relay; another editor (e) edits too.
//! The device then loses its storage and restores an older save, keeping its actor id, and goes
//! on editing. The relay forwards the changes it holds to the device one at a time, in an order
//! drawn from the seed: d's own changes made after the restored save (which conflict with what
//! d wrote since, so they are refused or can never apply) and e's changes (which must apply).
//!
//! The property: whatever the order of the forwarded changes and the device's own edits in
//! between, after every step the device's document saves to bytes that load into the same
//! document: same heads, same values, same changes waiting for missing dependencies; the
//! device's own edits keep working; and e's changes all apply once delivered.
//!
//! The seeded test runs three plans per seed, sizes and orders drawn from the seed: any order;
//! the first conflicting change of d delivered before the later ones; the first conflicting
//! change never delivered. `symptom_plan`
//! is the reported run, which the bundle generator replays.

use std::collections::BTreeSet;

use automerge::{
    transaction::{CommitOptions, Transactable},
    ActorId, AutoCommit, Change, ReadDoc, ROOT,
};
use rand::{seq::SliceRandom, Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One editor: its document and a counter that names its edits.
pub struct Editor {
    pub name: &'static str,
    pub doc: AutoCommit,
    next: i64,
}

impl Editor {
    pub fn new(name: &'static str, actor: u8) -> Editor {
        Editor { name, doc: AutoCommit::new().with_actor(ActorId::from([actor; 16].as_slice())), next: 0 }
    }

    /// One change that puts a new key (`<name><k>`), with a fixed commit time so change hashes
    /// are the same on every run. Returns the key.
    pub fn edit(&mut self) -> String {
        self.next += 1;
        let key = format!("{}{}", self.name, self.next);
        self.doc.put(ROOT, key.clone(), self.next).expect("put");
        self.doc.commit_with(CommitOptions::default().with_time(self.next));
        key
    }
}

/// What the relay forwards to the restored device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// The device's own change with this sequence number, from before the crash.
    Old(usize),
    /// e's change with this sequence number.
    Other(usize),
    /// The device makes one edit.
    Edit,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Changes d made before the crash, and how many of them the restored save holds.
    pub before_crash: usize,
    pub in_save: usize,
    /// e's changes, none of which d had.
    pub other: usize,
    /// d's edits right after the restore.
    pub fresh: usize,
    /// The relay's deliveries and d's edits, in order.
    pub steps: Vec<Item>,
}

/// One line of the run's log: what happened and what the device's document looked like.
#[derive(Clone, Debug)]
pub struct Line {
    pub step: String,
    pub outcome: String,
    pub keys: usize,
    pub waiting: usize,
    pub reload: String,
}

#[derive(Default)]
pub struct Trace {
    pub lines: Vec<Line>,
    pub violations: Vec<String>,
}

fn key_set(doc: &AutoCommit) -> BTreeSet<String> {
    doc.keys(ROOT).collect()
}

/// Saves `doc`, loads the bytes, and compares what a reader of each sees; with `waiting`, also
/// the changes each waits for.
fn reload_check(doc: &mut AutoCommit, waiting: bool) -> Result<(), String> {
    let bytes = doc.save();
    let mut copy = AutoCommit::load(&bytes).map_err(|e| format!("load failed: {e}"))?;
    if copy.get_heads() != doc.get_heads() {
        return Err("reloaded heads differ".into());
    }
    if key_set(&copy) != key_set(doc) {
        return Err("reloaded values differ".into());
    }
    if waiting && copy.get_missing_deps(&[]) != doc.get_missing_deps(&[]) {
        return Err("reloaded document waits for different changes".into());
    }
    Ok(())
}

/// Runs one plan; every step is logged and checked. `full` adds the comparison of the changes
/// the saved and the live document wait for (the reported run checks what the user saw).
pub fn run(plan: &Plan, full: bool) -> Trace {
    let mut t = Trace::default();
    let mut d = Editor::new("d", 1);
    let mut e = Editor::new("e", 2);
    let mut backup = Vec::new();
    for i in 1..=plan.before_crash {
        d.edit();
        if i == plan.in_save {
            backup = d.doc.save();
        }
    }
    for _ in 0..plan.other {
        e.edit();
    }
    let old: Vec<Change> = d.doc.get_changes(&[]);
    let others: Vec<Change> = e.doc.get_changes(&[]);

    let actor = d.doc.get_actor().clone();
    let mut r = Editor {
        name: "d",
        doc: AutoCommit::load(&backup).expect("restore").with_actor(actor),
        next: 100,
    };
    let mut expected: BTreeSet<String> = key_set(&r.doc);
    t.lines.push(Line {
        step: format!("d restored from its save after change {} of {}", plan.in_save, plan.before_crash),
        outcome: "-".into(),
        keys: expected.len(),
        waiting: 0,
        reload: "-".into(),
    });
    let mut steps: Vec<Item> = vec![Item::Edit; plan.fresh];
    steps.extend(plan.steps.iter().copied());
    for item in steps {
        let (step, outcome) = match item {
            Item::Edit => {
                let k = r.edit();
                expected.insert(k.clone());
                (format!("d edits: {k}"), "ok".to_string())
            }
            Item::Old(seq) => {
                let res = r.doc.apply_changes(vec![old[seq - 1].clone()]);
                (format!("relay -> d: d's old change seq {seq}"), outcome_of(res))
            }
            Item::Other(seq) => {
                let res = r.doc.apply_changes(vec![others[seq - 1].clone()]);
                if res.is_err() {
                    t.violations.push(format!("e's change {seq} was refused: {res:?}"));
                }
                (format!("relay -> d: e's change seq {seq}"), outcome_of(res))
            }
        };
        let reload = match reload_check(&mut r.doc, full) {
            Ok(()) => "ok".to_string(),
            Err(msg) => {
                t.violations.push(format!("after `{step}`: {msg}"));
                msg
            }
        };
        let waiting = r.doc.get_missing_deps(&[]).len();
        let keys = key_set(&r.doc).len();
        t.lines.push(Line { step, outcome, keys, waiting, reload });
    }
    let delivered: BTreeSet<usize> =
        plan.steps.iter().filter_map(|i| if let Item::Other(s) = i { Some(*s) } else { None }).collect();
    for s in 1..=plan.other {
        if delivered.contains(&s) {
            expected.insert(format!("e{s}"));
        }
    }
    let have = key_set(&r.doc);
    let missing: Vec<_> = expected.difference(&have).cloned().collect();
    if !missing.is_empty() {
        t.violations.push(format!("d's document lacks {missing:?}"));
    }
    let stale: Vec<_> = have.iter().filter(|k| k.starts_with('d') && !expected.contains(*k)).cloned().collect();
    if !stale.is_empty() {
        t.violations.push(format!("d's document shows changes from before the crash it had lost: {stale:?}"));
    }
    t
}

fn outcome_of(res: Result<(), automerge::AutomergeError>) -> String {
    match res {
        Ok(()) => "ok".into(),
        Err(e) => format!("error: {e}"),
    }
}

/// The reported run: d made 3 changes, its save holds the first; after the restore it edits
/// once; the relay forwards d's old change 3, then its old change 2, then e's change; d edits
/// again.
pub fn symptom_plan() -> Plan {
    Plan {
        before_crash: 3,
        in_save: 1,
        other: 1,
        fresh: 1,
        steps: vec![Item::Old(3), Item::Old(2), Item::Other(1), Item::Edit],
    }
}

/// d's edits after the deliveries: enough to take every sequence number the lost changes had.
fn closing_edits(plan: &Plan) -> usize {
    let edits = plan.fresh + plan.steps.iter().filter(|i| **i == Item::Edit).count();
    (plan.before_crash + 1).saturating_sub(plan.in_save + edits).max(1)
}

/// The three plans a seed stands for. In each, d edits fewer times after the restore than it
/// had lost, so its last lost change arrives ahead of d's own numbering and has to wait; d's
/// edits in between come only once all of its old changes were forwarded.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for shape in 0..3 {
        let before_crash = r.gen_range(3..=6);
        let in_save = r.gen_range(1..=before_crash - 2);
        let lost = before_crash - in_save;
        let other = r.gen_range(1..=3);
        let fresh = if shape == 0 { r.gen_range(1..=(lost - 1).min(2)) } else { 1 };
        let mut old: Vec<usize> = (in_save + 1..=before_crash).collect();
        match shape {
            // Any order.
            0 => old.shuffle(&mut r),
            // The first conflicting change first, the later ones after it, in any order.
            1 => old[1..].shuffle(&mut r),
            // The first conflicting change never arrives.
            _ => {
                old.remove(0);
                old.shuffle(&mut r);
            }
        }
        let mut others: Vec<usize> = (1..=other).collect();
        others.shuffle(&mut r);
        // Interleave d's old changes and e's changes, keeping each list's order; d edits now
        // and then once its old changes are all through.
        let mut steps = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < others.len() {
            let take_old = j == others.len() || (i < old.len() && r.gen_bool(0.5));
            if take_old {
                steps.push(Item::Old(old[i]));
                i += 1;
            } else {
                steps.push(Item::Other(others[j]));
                j += 1;
            }
            if i == old.len() && r.gen_bool(0.3) {
                steps.push(Item::Edit);
            }
        }
        let mut plan = Plan { before_crash, in_save, other, fresh, steps };
        for _ in 0..closing_edits(&plan) {
            plan.steps.push(Item::Edit);
        }
        out.push(plan);
    }
    out
}

#[test]
fn symptom() {
    let t = run(&symptom_plan(), false);
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
}

#[test]
fn restored_replica_keeps_a_loadable_document() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for plan in plans(seed) {
        let t = run(&plan, true);
        assert!(t.violations.is_empty(), "seed {seed}, plan {plan:?}:\n{:#?}", t.violations);
    }
}
