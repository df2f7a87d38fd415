//! Hidden oracle: a replica restored from a snapshot keeps accepting its peers' updates. Whatever
//! the shape of the history it was restored from, importing a later update from a peer returns,
//! the restored replica then holds the same version and text as a replica that received every
//! edit directly, and its own next edits reach the other peers.
//!
//! The history: a writer edits a shared text and sends its first edits to a reviewer; the
//! reviewer edits on top of them and syncs with the hub; the writer keeps editing, the hub edits,
//! receives the writer's edits (directly or through a relay) and edits again; the writer edits a
//! third time. A replica is restored from the snapshot of the hub (or of an archive that copied
//! the hub), then receives the writer's update.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use loro::{ExportMode, LoroDoc};

/// How long one history may take on a loaded machine; every import here touches a few dozen ops.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// SplitMix64: a fixed, dependency-free generator, so a seed means the same histories forever.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// One history. Counts are numbers of edits (each inserts two characters at a drawn position).
#[derive(Clone, Debug)]
pub struct Plan {
    pub writer_first: u64,
    pub reviewer: u64,
    pub writer_second: u64,
    pub hub: u64,
    pub writer_third: u64,
    /// The writer's second edits reach the hub through a relay peer (which edits once on top of
    /// them) instead of directly.
    pub relay: bool,
    /// The snapshot comes from an archive peer that copied the hub and edited once, not from the
    /// hub itself.
    pub archive: bool,
    /// What the writer sends the restored replica: 0 its changes since the snapshot's version,
    /// 1 all its changes, 2 its own snapshot.
    pub send: u64,
    /// Commit after every edit (one change each) rather than once per turn.
    pub commit_each: bool,
    /// Drives the insert positions.
    pub positions: u64,
}

impl Plan {
    /// The reported run.
    pub fn reported() -> Plan {
        Plan {
            writer_first: 2,
            reviewer: 3,
            writer_second: 1,
            hub: 1,
            writer_third: 1,
            relay: false,
            archive: false,
            send: 0,
            commit_each: false,
            positions: 7,
        }
    }

    pub fn seeded(rng: &mut Rng) -> Plan {
        let writer_second = 1 + rng.below(3);
        Plan {
            writer_first: 1 + rng.below(4),
            reviewer: 1 + rng.below(5),
            writer_second,
            hub: 1 + rng.below(3),
            writer_third: 1 + rng.below(3),
            relay: rng.below(2) == 0,
            archive: rng.below(2) == 0,
            send: rng.below(3),
            commit_each: rng.below(2) == 0,
            positions: rng.next(),
        }
    }
}

/// Peer ids of the replicas.
pub const WRITER: u64 = 10;
pub const REVIEWER: u64 = 20;
pub const HUB: u64 = 30;
pub const RELAY: u64 = 40;
pub const ARCHIVE: u64 = 50;
pub const RESTORED: u64 = 60;

/// A version as `{peer: end counter, ...}`, peers in order.
pub fn vv(d: &LoroDoc) -> String {
    let mut v: Vec<(u64, i32)> = d.oplog_vv().iter().map(|(p, c)| (*p, *c)).collect();
    v.sort();
    let parts: Vec<String> = v.iter().map(|(p, c)| format!("{p}: {c}")).collect();
    format!("{{{}}}", parts.join(", "))
}

fn doc(peer: u64) -> LoroDoc {
    let d = LoroDoc::new();
    d.set_peer_id(peer).unwrap();
    d
}

fn edit(d: &LoroDoc, count: u64, rng: &mut Rng, commit_each: bool) {
    let t = d.get_text("text");
    for _ in 0..count {
        let len = t.len_unicode() as u64;
        t.insert((rng.next() % (len + 1)) as usize, "ab").unwrap();
        if commit_each {
            d.commit();
        }
    }
    d.commit();
}

/// Sends `from`'s changes that `to` lacks; returns the size of the update.
pub fn sync(from: &LoroDoc, to: &LoroDoc) -> usize {
    let bytes = from.export(ExportMode::updates(&to.oplog_vv())).unwrap();
    to.import(&bytes).unwrap();
    bytes.len()
}

/// What happened, for the test to judge and the bundle generator to print.
pub struct Outcome {
    /// The restored replica's text and version after the writer's update.
    pub restored_text: String,
    pub restored_vv: String,
    /// A replica that received every change as updates, in causal order.
    pub direct_text: String,
    pub direct_vv: String,
    /// After the restored replica edits once more and syncs both ways with the writer.
    pub writer_after: String,
    pub restored_after: String,
    /// (restored, direct) text at each earlier version.
    pub checkouts: Vec<(String, String)>,
}

/// Runs the history. `log` hears each step as it starts (the last line heard before a hang
/// names the step that hung).
pub fn run(plan: &Plan, log: &mut dyn FnMut(String)) -> Outcome {
    let mut rng = Rng(plan.positions);
    let writer = doc(WRITER);
    let reviewer = doc(REVIEWER);
    let hub = doc(HUB);
    let relay = doc(RELAY);
    let archive = doc(ARCHIVE);

    let mut versions = Vec::new();
    edit(&writer, plan.writer_first, &mut rng, plan.commit_each);
    versions.push(writer.oplog_frontiers());
    log(format!("writer edits {} time(s): version {}", plan.writer_first, vv(&writer)));
    let n = sync(&writer, &reviewer);
    log(format!("writer -> reviewer: update of {n} bytes"));
    edit(&reviewer, plan.reviewer, &mut rng, plan.commit_each);
    versions.push(reviewer.oplog_frontiers());
    log(format!("reviewer edits {} time(s): version {}", plan.reviewer, vv(&reviewer)));
    let n = sync(&reviewer, &hub);
    log(format!("reviewer -> hub: update of {n} bytes"));
    edit(&writer, plan.writer_second, &mut rng, plan.commit_each);
    versions.push(writer.oplog_frontiers());
    log(format!("writer edits {} time(s): version {}", plan.writer_second, vv(&writer)));
    edit(&hub, plan.hub, &mut rng, plan.commit_each);
    log(format!("hub edits {} time(s): version {}", plan.hub, vv(&hub)));
    if plan.relay {
        let n = sync(&writer, &relay);
        log(format!("writer -> relay: update of {n} bytes"));
        edit(&relay, 1, &mut rng, plan.commit_each);
        log(format!("relay edits 1 time(s): version {}", vv(&relay)));
        let n = sync(&relay, &hub);
        log(format!("relay -> hub: update of {n} bytes"));
    } else {
        let n = sync(&writer, &hub);
        log(format!("writer -> hub: update of {n} bytes"));
    }
    edit(&hub, plan.hub, &mut rng, plan.commit_each);
    log(format!("hub edits {} time(s): version {}", plan.hub, vv(&hub)));
    edit(&writer, plan.writer_third, &mut rng, plan.commit_each);
    versions.push(hub.oplog_frontiers());
    log(format!("writer edits {} time(s): version {}", plan.writer_third, vv(&writer)));

    let source = if plan.archive {
        let n = sync(&hub, &archive);
        log(format!("hub -> archive: update of {n} bytes"));
        edit(&archive, 1, &mut rng, plan.commit_each);
        log(format!("archive edits 1 time(s): version {}", vv(&archive)));
        &archive
    } else {
        &hub
    };
    let snapshot = source.export(ExportMode::Snapshot).unwrap();
    let restored = doc(RESTORED);
    restored.import(&snapshot).unwrap();
    log(format!(
        "restored replica imports the {}'s snapshot ({} bytes): version {}",
        if plan.archive { "archive" } else { "hub" },
        snapshot.len(),
        vv(&restored)
    ));
    let (what, update) = match plan.send {
        0 => ("its changes since the snapshot's version", writer.export(ExportMode::updates(&restored.oplog_vv())).unwrap()),
        1 => ("all its changes", writer.export(ExportMode::updates(&Default::default())).unwrap()),
        _ => ("its snapshot", writer.export(ExportMode::Snapshot).unwrap()),
    };
    log(format!("writer -> restored replica: {what} ({} bytes), import starts", update.len()));
    restored.import(&update).unwrap();
    log(format!("restored replica: import returned, version {}", vv(&restored)));

    let direct = doc(70);
    direct.import(&source.export(ExportMode::updates(&Default::default())).unwrap()).unwrap();
    direct.import(&writer.export(ExportMode::updates(&Default::default())).unwrap()).unwrap();

    // Time travel on the restored replica: every earlier version reads as on the direct one.
    let mut checkouts = Vec::new();
    for (i, f) in versions.iter().enumerate() {
        log(format!("restored replica checks out earlier version {i}"));
        restored.checkout(f).unwrap();
        direct.checkout(f).unwrap();
        checkouts.push((restored.get_text("text").to_string(), direct.get_text("text").to_string()));
    }
    restored.checkout_to_latest();
    direct.checkout_to_latest();

    let restored_text = restored.get_text("text").to_string();
    let restored_vv = vv(&restored);
    edit(&restored, 1, &mut rng, false);
    sync(&restored, &writer);
    sync(&writer, &restored);
    Outcome {
        restored_text,
        restored_vv,
        direct_text: direct.get_text("text").to_string(),
        direct_vv: vv(&direct),
        writer_after: writer.get_text("text").to_string(),
        restored_after: restored.get_text("text").to_string(),
        checkouts,
    }
}

/// Runs the history on its own thread and waits for it until the deadline. Returns the steps
/// heard so far, and the outcome unless the history had not finished by then.
pub fn run_logged(plan: &Plan) -> (Vec<String>, Option<Outcome>) {
    let (tx, rx) = mpsc::channel();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let heard = steps.clone();
    let p = plan.clone();
    std::thread::spawn(move || {
        let outcome = run(&p, &mut |line| heard.lock().unwrap().push(line));
        let _ = tx.send(outcome);
    });
    let outcome = rx.recv_timeout(DEADLINE).ok();
    let steps = steps.lock().unwrap().clone();
    (steps, outcome)
}

/// `Err` when the history has not finished by the deadline, naming the step it was in.
pub fn run_with_deadline(plan: &Plan) -> Result<Outcome, String> {
    match run_logged(plan) {
        (_, Some(outcome)) => Ok(outcome),
        (steps, None) => Err(format!(
            "{plan:?}: the history did not finish within {DEADLINE:?}; last step: {}",
            steps.last().cloned().unwrap_or_default()
        )),
    }
}

fn check(plan: &Plan) {
    let o = run_with_deadline(plan).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.restored_vv, o.direct_vv, "{plan:?}: version of the restored replica");
    assert_eq!(o.restored_text, o.direct_text, "{plan:?}: text of the restored replica");
    for (i, (restored, direct)) in o.checkouts.iter().enumerate() {
        assert_eq!(restored, direct, "{plan:?}: restored replica checked out at earlier version {i}");
    }
    assert_eq!(o.restored_after, o.writer_after, "{plan:?}: restored replica and writer after one more edit");
}

#[test]
fn restored_replica_takes_the_writers_update() {
    check(&Plan::reported());
}

#[test]
fn seeded_histories() {
    let mut rng = Rng(seed() ^ 0x10f0_5eed);
    for _ in 0..TRIALS {
        check(&Plan::seeded(&mut rng));
    }
}

const TRIALS: usize = 48;
