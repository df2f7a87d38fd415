//! A follower that has just been handed a snapshot, and whose application has not finished
//! persisting it yet, must handle a campaign request like any other node: campaign when nothing
//! committed is left to apply but the snapshot, hold back while a committed configuration change
//! after the snapshot is still unapplied, and never crash; for any group size, node ids, log
//! length and message order.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{self, AssertUnwindSafe};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, EntryType, Message, MessageType};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole};

/// What the scenario reports to an observer (the bundle generator prints these).
pub enum Event<'a> {
    Note(String),
    Sent(&'a Message),
}

/// The group and the schedule of one run.
pub struct Params {
    pub ids: Vec<u64>,
    pub leader: u64,
    /// The node that is cut off, then caught up with a snapshot.
    pub lagging: u64,
    /// Entries committed while it is cut off.
    pub entries: usize,
    /// A committed learner addition after the snapshot reaches the lagging node together with it.
    pub conf_change_after_snapshot: bool,
    pub net_seed: u64,
    pub shuffle: bool,
}

impl Params {
    pub fn from_seed(seed: u64, conf_change_after_snapshot: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pool: Vec<u64> = (10..100).collect();
        pool.shuffle(&mut rng);
        let n = if rng.gen_bool(0.5) { 3 } else { 5 };
        let mut ids: Vec<u64> = pool[..n].to_vec();
        ids.sort_unstable();
        let mut order = ids.clone();
        order.shuffle(&mut rng);
        Params {
            ids,
            leader: order[0],
            lagging: order[1],
            entries: rng.gen_range(1..8),
            conf_change_after_snapshot,
            net_seed: rng.gen(),
            shuffle: true,
        }
    }
}

fn config(id: u64, ids: &[u64]) -> Config {
    Config {
        id,
        peers: ids.to_vec(),
        learners: vec![],
        election_tick: 10,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: false,
        pre_vote: false,
        min_election_tick: 0,
        max_election_tick: 0,
        read_only_option: ReadOnlyOption::Safe,
        skip_bcast_commit: false,
        tag: format!("node {}", id),
    }
}

struct Cluster<'o> {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Nodes whose traffic (both directions) is dropped.
    down: BTreeSet<u64>,
    /// Messages sent but not yet delivered.
    inbox: Vec<Message>,
    rng: ChaCha8Rng,
    shuffle: bool,
    observer: &'o mut dyn FnMut(Event),
}

impl Cluster<'_> {
    fn handle_ready(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        if !node.has_ready() {
            return;
        }
        let mut rd = node.ready();
        if !raft::is_empty_snap(&rd.snapshot) {
            node.mut_store().wl().apply_snapshot(rd.snapshot.clone()).expect("apply snapshot");
        }
        if !rd.entries.is_empty() {
            node.mut_store().wl().append(&rd.entries).expect("append");
        }
        if let Some(hs) = rd.hs.clone() {
            node.mut_store().wl().set_hardstate(hs);
        }
        apply(node, rd.committed_entries.as_deref().unwrap_or(&[]));
        self.inbox.append(&mut rd.messages);
        node.advance(rd);
    }

    fn deliver(&mut self, m: Message) {
        if self.down.contains(&m.get_from()) || self.down.contains(&m.get_to()) || !self.nodes.contains_key(&m.get_to()) {
            return;
        }
        (self.observer)(Event::Sent(&m));
        self.nodes.get_mut(&m.get_to()).unwrap().step(m).expect("step");
    }

    /// Takes the messages on the wire in a seeded order, with some duplicated.
    fn take_inbox(&mut self) -> Vec<Message> {
        let mut msgs: Vec<Message> = self.inbox.drain(..).collect();
        if self.shuffle {
            msgs.shuffle(&mut self.rng);
            let dups: Vec<Message> = msgs.iter().filter(|_| self.rng.gen_bool(0.1)).cloned().collect();
            msgs.extend(dups);
        }
        msgs
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
            let ids: Vec<u64> = self.nodes.keys().copied().collect();
            for id in ids {
                self.handle_ready(id);
            }
            if self.inbox.is_empty() {
                return;
            }
            for m in self.take_inbox() {
                self.deliver(m);
            }
        }
        panic!("the group never went quiet");
    }

    fn leaders(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| n.raft.state == StateRole::Leader).map(|(id, _)| *id).collect()
    }
}

/// Applies committed configuration changes, as an application does.
fn apply(node: &mut RawNode<MemStorage>, entries: &[raft::eraftpb::Entry]) {
    for e in entries {
        if e.get_entry_type() == EntryType::EntryConfChange {
            let cc: ConfChange = protobuf::parse_from_bytes(e.get_data()).expect("conf change");
            node.apply_conf_change(&cc);
        }
    }
}

/// Runs the schedule of `p`: the lagging node is caught up with a snapshot and asked to campaign
/// before its application persisted it. Checks what it does and that the group works after.
pub fn run(p: &Params, observer: &mut dyn FnMut(Event)) {
    let mut c = Cluster {
        nodes: BTreeMap::new(),
        down: BTreeSet::new(),
        inbox: Vec::new(),
        rng: ChaCha8Rng::seed_from_u64(p.net_seed),
        shuffle: p.shuffle,
        observer,
    };
    for &id in &p.ids {
        let cfg = config(id, &p.ids);
        cfg.validate().expect("valid config");
        c.nodes.insert(id, RawNode::new(&cfg, MemStorage::new(), vec![]).expect("node"));
    }
    c.nodes.get_mut(&p.leader).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.leaders(), vec![p.leader]);

    c.down.insert(p.lagging);
    for i in 0..p.entries {
        c.nodes.get_mut(&p.leader).unwrap().propose(vec![], vec![i as u8]).expect("propose");
        c.settle();
    }
    let applied = c.nodes[&p.leader].raft.raft_log.applied;
    (c.observer)(Event::Note(format!("node {} cut off; leader {} applied {} and snapshots it", p.lagging, p.leader, applied)));
    {
        let mut cs = ConfState::new();
        cs.set_nodes(p.ids.clone());
        let mut store = c.nodes.get_mut(&p.leader).unwrap().mut_store().wl();
        store.create_snapshot(applied, Some(cs), b"state".to_vec()).expect("snapshot");
        store.compact(applied).expect("compact");
    }
    let learner = 7;
    if p.conf_change_after_snapshot {
        let mut cc = ConfChange::new();
        cc.set_change_type(ConfChangeType::AddLearnerNode);
        cc.set_node_id(learner);
        c.nodes.get_mut(&p.leader).unwrap().propose_conf_change(vec![], cc).expect("conf change");
        c.settle();
    }

    // The lagging node comes back; it receives the snapshot (and, when there is one, the entry
    // after it with its commit) before its application takes the Ready.
    c.down.remove(&p.lagging);
    c.nodes.get_mut(&p.leader).unwrap().raft.bcast_heartbeat();
    let mut snapshot_seen = false;
    'delivery: for _ in 0..100 {
        for &id in &p.ids {
            c.handle_ready(id);
        }
        for m in c.take_inbox() {
            let is_snap = m.get_to() == p.lagging && m.get_msg_type() == MessageType::MsgSnapshot;
            c.deliver(m);
            if is_snap {
                snapshot_seen = true;
                break 'delivery;
            }
        }
    }
    assert!(snapshot_seen, "the leader never sent node {} a snapshot", p.lagging);
    if p.conf_change_after_snapshot {
        let leader = &c.nodes[&p.leader].raft;
        let mut m = Message::new();
        m.set_msg_type(MessageType::MsgAppend);
        m.set_from(p.leader);
        m.set_to(p.lagging);
        m.set_term(leader.term);
        m.set_index(applied);
        m.set_log_term(leader.raft_log.term(applied).expect("term"));
        m.set_entries(leader.raft_log.entries(applied + 1, u64::MAX).expect("entries").into());
        m.set_commit(leader.raft_log.committed);
        c.deliver(m);
    }
    let committed_entry_after = c.nodes[&p.lagging].raft.raft_log.committed > applied;
    assert_eq!(committed_entry_after, p.conf_change_after_snapshot, "the entry after the snapshot");

    let node = c.nodes.get_mut(&p.lagging).unwrap();
    let rd = node.ready();
    assert!(!raft::is_empty_snap(&rd.snapshot), "node {}'s Ready has no snapshot", p.lagging);
    let term = node.raft.term;
    let res = panic::catch_unwind(AssertUnwindSafe(|| node.campaign()));
    assert!(res.is_ok(), "node {} panicked when asked to campaign with a snapshot pending", p.lagging);
    res.unwrap().expect("campaign");
    if p.conf_change_after_snapshot {
        assert_eq!(node.raft.term, term, "node {} campaigned with a committed conf change unapplied", p.lagging);
        assert_eq!(node.raft.state, StateRole::Follower);
    } else {
        assert_eq!(node.raft.term, term + 1, "node {} did not start an election", p.lagging);
        assert_eq!(node.raft.state, StateRole::Candidate);
    }

    // Persisting finishes; the group must still work.
    node.mut_store().wl().apply_snapshot(rd.snapshot.clone()).expect("apply snapshot");
    if !rd.entries.is_empty() {
        node.mut_store().wl().append(&rd.entries).expect("append");
    }
    if let Some(hs) = rd.hs.clone() {
        node.mut_store().wl().set_hardstate(hs);
    }
    apply(node, rd.committed_entries.as_deref().unwrap_or(&[]));
    let mut rd = rd;
    c.inbox.append(&mut rd.messages);
    c.nodes.get_mut(&p.lagging).unwrap().advance(rd);
    c.settle();
    if p.conf_change_after_snapshot {
        // With the change applied, the node may campaign.
        c.nodes.get_mut(&p.lagging).unwrap().campaign().expect("campaign");
        c.settle();
    }
    assert_eq!(c.leaders(), vec![p.lagging], "node {} should have won the election", p.lagging);
    c.nodes.get_mut(&p.lagging).unwrap().propose(vec![], b"after".to_vec()).expect("propose");
    c.settle();
    let committed: Vec<u64> = p.ids.iter().map(|id| c.nodes[id].raft.raft_log.committed).collect();
    assert!(committed.iter().all(|&x| x == committed[0]), "commit indexes differ: {:?}", committed);
    assert!(committed[0] > applied, "nothing committed after the election: {:?}", committed);
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[test]
fn campaign_while_snapshot_is_being_persisted() {
    run(&Params::from_seed(seed(), false), &mut |_| {});
}

#[test]
fn campaign_held_back_by_conf_change_after_pending_snapshot() {
    run(&Params::from_seed(seed(), true), &mut |_| {});
}
