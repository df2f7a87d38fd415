//! Three peers edit one automerge document and sync pairwise with the sync protocol, each link
//! with its own fresh sync state. The origin (O) syncs with one peer, the holder, over a link
//! that loses one message: the holder gets O's later changes but not the earlier ones they
//! build on, so it keeps them unapplied. O then goes offline and the holder syncs with the
//! partner, who never saw O's new changes.
//!
//! The property: two peers that exchange sync messages until neither has anything to send end
//! with the same heads and hold each other's changes, whatever changes one of them keeps
//! unapplied because their dependencies were lost on another link; once O is back, all three
//! converge; and changes that arrive out of order on one link are applied once the missing
//! ones arrive.
//!
//! The seeded test runs three plans per seed, drawn from the seed: the size of the shared
//! history, how many of O's changes are lost and how many arrive, each peer's own edits, who
//! speaks first, and the split of a reordered link. `symptom_scenario` is the reported run,
//! which the bundle generator replays.

use std::collections::BTreeSet;

use automerge::{
    sync::{Message, State, SyncDoc},
    transaction::{CommitOptions, Transactable},
    ActorId, AutoCommit, Change, ChangeHash, ReadDoc, ROOT,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rounds (one message each way) after which a sync that has not gone quiet counts as stuck.
pub const ROUND_LIMIT: usize = 30;

/// One peer and its document.
pub struct Peer {
    pub name: &'static str,
    pub doc: AutoCommit,
    edits: i64,
    /// The changes this peer made, with the key each one wrote.
    pub made: Vec<(ChangeHash, String)>,
}

impl Peer {
    pub fn new(name: &'static str, actor: u8) -> Peer {
        let doc = AutoCommit::new().with_actor(ActorId::from([actor; 16].as_slice()));
        Peer { name, doc, edits: 0, made: Vec::new() }
    }

    /// Makes `n` changes, one new key each (`<name><k>`), with fixed commit times so that
    /// change hashes are the same on every run.
    pub fn edit(&mut self, n: usize) {
        for _ in 0..n {
            self.edits += 1;
            let key = format!("{}{}", self.name, self.edits);
            self.doc.put(ROOT, key.clone(), self.edits).expect("put");
            let hash = self.doc.commit_with(CommitOptions::default().with_time(self.edits));
            self.made.extend(hash.map(|h| (h, key)));
        }
    }

    pub fn heads(&mut self) -> Vec<ChangeHash> {
        self.doc.get_heads()
    }

    /// The keys the document shows (applied changes only).
    pub fn keys(&self) -> BTreeSet<String> {
        self.doc.keys(ROOT).collect()
    }

    /// Keys this peer made itself.
    pub fn own_keys(&self) -> BTreeSet<String> {
        (1..=self.edits).map(|k| format!("{}{k}", self.name)).collect()
    }
}

/// What one sync message carried.
#[derive(Clone, Debug)]
pub struct Sent {
    pub from: &'static str,
    pub to: &'static str,
    pub heads: Vec<ChangeHash>,
    pub need: Vec<ChangeHash>,
    pub have: usize,
    /// One entry per chunk: a change's hash, or `None` for a whole saved document.
    pub changes: Vec<Option<ChangeHash>>,
    pub lost: bool,
}

/// Everything a run did, for the checks and for the bundle.
#[derive(Default)]
pub struct Trace {
    pub steps: Vec<Step>,
    pub violations: Vec<String>,
    /// Every change made in the run, with the key it wrote (its name in logs).
    pub names: Vec<(ChangeHash, String)>,
}

pub enum Step {
    Note(String),
    Message(Sent),
}

impl Trace {
    fn note(&mut self, s: impl Into<String>) {
        self.steps.push(Step::Note(s.into()));
    }
}

/// One direction of a link: generate, encode, decode, receive (unless lost). Returns whether a
/// message was generated.
fn send(
    trace: &mut Trace,
    from: &mut Peer,
    from_state: &mut State,
    to: &mut Peer,
    to_state: &mut State,
    lost: bool,
) -> bool {
    let Some(msg) = from.doc.sync().generate_sync_message(from_state) else {
        return false;
    };
    let msg = Message::decode(&msg.encode()).expect("decode own message");
    trace.steps.push(Step::Message(Sent {
        from: from.name,
        to: to.name,
        heads: msg.heads.clone(),
        need: msg.need.clone(),
        have: msg.have.len(),
        changes: msg.changes.iter().map(|c| Change::try_from(c).ok().map(|c| c.hash())).collect(),
        lost,
    }));
    if !lost {
        to.doc.sync().receive_sync_message(to_state, msg).expect("receive");
    }
    true
}

/// Exchanges messages, `x` first in each round, until a round in which neither sends
/// anything. Returns false when that does not happen within `ROUND_LIMIT` rounds.
fn pump(trace: &mut Trace, x: &mut Peer, sx: &mut State, y: &mut Peer, sy: &mut State) -> bool {
    for _ in 0..ROUND_LIMIT {
        let a = send(trace, x, sx, y, sy, false);
        let b = send(trace, y, sy, x, sx, false);
        if !a && !b {
            return true;
        }
    }
    false
}

/// A fresh sync session between `x` (speaks first) and `y`, run until quiet; then checks that
/// both have the same heads and each holds the other's applied keys.
fn session(trace: &mut Trace, what: &str, x: &mut Peer, y: &mut Peer) {
    trace.note(format!("{what}: {} and {} sync with fresh states, {} first", x.name, y.name, x.name));
    let (mut sx, mut sy) = (State::new(), State::new());
    let quiet = pump(trace, x, &mut sx, y, &mut sy);
    check_pair(trace, what, quiet, x, y);
}

fn check_pair(trace: &mut Trace, what: &str, quiet: bool, x: &mut Peer, y: &mut Peer) {
    let (kx, ky) = (x.keys(), y.keys());
    let same = x.heads() == y.heads();
    trace.note(format!(
        "{what}: {} sees {} keys, {} sees {} keys; heads {}",
        x.name,
        kx.len(),
        y.name,
        ky.len(),
        if same { "equal" } else { "differ" }
    ));
    if !quiet {
        trace.violations.push(format!("{what}: {} and {} still exchanging after {ROUND_LIMIT} rounds", x.name, y.name));
    }
    if !same {
        let only_x: Vec<_> = kx.difference(&ky).cloned().collect();
        let only_y: Vec<_> = ky.difference(&kx).cloned().collect();
        trace.violations.push(format!(
            "{what}: {} and {} went quiet with different heads; only {}: {only_x:?}, only {}: {only_y:?}",
            x.name, y.name, x.name, y.name
        ));
    }
}

/// The shape of one run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Changes O makes and syncs to both peers before anything goes wrong.
    pub base: usize,
    /// O's changes in the message that is lost on the way to the holder.
    pub lost: usize,
    /// O's changes made afterwards, in the message that arrives.
    pub later: usize,
    /// Edits the holder and the partner make on their own before they sync.
    pub holder_edits: usize,
    pub partner_edits: usize,
    /// Whether the holder speaks first when it syncs with the partner.
    pub holder_first: bool,
    /// A reordered link from O to the partner at the end, if any: O's changes in the first
    /// and second message, delivered second and first.
    pub reorder: Option<(usize, usize)>,
}

/// Runs one plan: the lossy link, the holder and the partner, O's return, and the reordered
/// link if the plan has one.
pub fn run(plan: &Plan) -> Trace {
    let mut t = Trace::default();
    let mut o = Peer::new("o", 1);
    let mut h = Peer::new("h", 2);
    let mut p = Peer::new("p", 3);

    o.edit(plan.base);
    t.note(format!("o makes {} changes; o syncs with h and with p", plan.base));
    let mut quiet_log = Trace::default();
    session(&mut quiet_log, "setup", &mut o, &mut h);
    session(&mut quiet_log, "setup", &mut o, &mut p);
    if !quiet_log.violations.is_empty() {
        t.violations.extend(quiet_log.violations);
        return t;
    }
    h.edit(plan.holder_edits);
    p.edit(plan.partner_edits);
    t.note(format!("h makes {} change(s), p makes {}", plan.holder_edits, plan.partner_edits));

    // The lossy link from o to h: a handshake, a lost message, then a message that arrives.
    t.note("o and h open a new sync session");
    let (mut so, mut sh) = (State::new(), State::new());
    for _ in 0..2 {
        send(&mut t, &mut o, &mut so, &mut h, &mut sh, false);
        send(&mut t, &mut h, &mut sh, &mut o, &mut so, false);
    }
    o.edit(plan.lost);
    t.note(format!("o makes {} change(s)", plan.lost));
    send(&mut t, &mut o, &mut so, &mut h, &mut sh, true);
    o.edit(plan.later);
    t.note(format!("o makes {} more change(s)", plan.later));
    send(&mut t, &mut o, &mut so, &mut h, &mut sh, false);
    t.note("the link between o and h goes down; o goes offline");

    // The holder and the partner.
    if plan.holder_first {
        session(&mut t, "h-p", &mut h, &mut p);
    } else {
        session(&mut t, "h-p", &mut p, &mut h);
    }
    for k in p.own_keys() {
        if !h.keys().contains(&k) {
            t.violations.push(format!("h-p: h never received p's change {k}"));
        }
    }
    for k in h.own_keys() {
        if !p.keys().contains(&k) {
            t.violations.push(format!("h-p: p never received h's change {k}"));
        }
    }

    // O comes back: everyone converges and shows all of o's changes.
    t.note("o comes back");
    session(&mut t, "o-h", &mut o, &mut h);
    session(&mut t, "h-p", &mut h, &mut p);
    session(&mut t, "o-p", &mut p, &mut o);
    let all: BTreeSet<String> =
        o.own_keys().into_iter().chain(h.own_keys()).chain(p.own_keys()).collect();
    for peer in [&o, &h, &p] {
        let missing: Vec<_> = all.difference(&peer.keys()).cloned().collect();
        if !missing.is_empty() {
            t.violations.push(format!("after o is back, {} lacks {missing:?}", peer.name));
        }
    }

    if let Some((first, second)) = plan.reorder {
        reordered(&mut t, &mut o, &mut p, first, second);
    }
    for peer in [o, h, p] {
        t.names.extend(peer.made);
    }
    t
}

/// A sync session from `o` to `p` in which o sends two messages, `first` and then `second`
/// changes, and the second arrives first.
fn reordered(t: &mut Trace, o: &mut Peer, p: &mut Peer, first: usize, second: usize) {
    t.note("o and p open a new sync session whose messages can be reordered");
    let (mut so, mut sp) = (State::new(), State::new());
    let quiet = pump(&mut Trace::default(), o, &mut so, p, &mut sp);
    o.edit(first);
    let m1 = o.doc.sync().generate_sync_message(&mut so);
    o.edit(second);
    let m2 = o.doc.sync().generate_sync_message(&mut so);
    t.note(format!("o makes {first} changes, sends, makes {second} more, sends; the second message arrives first"));
    for m in [m2, m1].into_iter().flatten() {
        p.doc.sync().receive_sync_message(&mut sp, m).expect("receive");
    }
    let quiet = quiet && pump(t, p, &mut sp, o, &mut so);
    check_pair(t, "reordered o-p", quiet, o, p);
    let missing: Vec<_> = o.own_keys().difference(&p.keys()).cloned().collect();
    if !missing.is_empty() {
        t.violations.push(format!("reordered o-p: p lacks {missing:?}"));
    }
}

/// The reported run: six shared changes, one of o's changes lost and one delivered, h has one
/// edit of its own and p two, h speaks first; no reordered link.
pub fn symptom_plan() -> Plan {
    Plan { base: 6, lost: 1, later: 1, holder_edits: 1, partner_edits: 2, holder_first: true, reorder: None }
}

pub fn symptom_scenario() -> Trace {
    run(&symptom_plan())
}

/// The three plans a seed stands for: any shape; several unapplied changes with the partner
/// speaking first; several lost changes and a holder with no edits of its own.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |later_min: usize, partner_first: bool, lost_min: usize, holder_max: usize| Plan {
        base: r.gen_range(4..=9),
        lost: r.gen_range(lost_min..=3),
        later: r.gen_range(later_min..=3),
        holder_edits: r.gen_range(0..=holder_max),
        partner_edits: r.gen_range(1..=3),
        holder_first: if partner_first { false } else { r.gen_bool(0.5) },
        reorder: Some((r.gen_range(1..=2), r.gen_range(1..=3))),
    };
    vec![draw(1, false, 1, 2), draw(2, true, 1, 2), draw(1, false, 2, 0)]
}

#[test]
fn symptom() {
    let t = symptom_scenario();
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
}

#[test]
fn peers_converge_around_unapplied_changes() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for plan in plans(seed) {
        let t = run(&plan);
        assert!(t.violations.is_empty(), "seed {seed}, plan {plan:?}:\n{:#?}", t.violations);
    }
}
