//! A follower that has just been handed a snapshot, and whose application has not finished
//! persisting it yet, must be able to start an election without crashing.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{self, AssertUnwindSafe};

use raft::eraftpb::{ConfState, Message, MessageType};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole};

const VOTERS: [u64; 3] = [1, 2, 3];

fn config(id: u64) -> Config {
    Config {
        id,
        peers: VOTERS.to_vec(),
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

struct Cluster {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Nodes whose traffic (both directions) is dropped.
    down: BTreeSet<u64>,
    /// Messages sent but not yet delivered.
    inbox: Vec<Message>,
}

impl Cluster {
    fn new() -> Self {
        let mut nodes = BTreeMap::new();
        for &id in VOTERS.iter() {
            let c = config(id);
            c.validate().expect("valid config");
            nodes.insert(id, RawNode::new(&c, MemStorage::new(), vec![]).expect("node"));
        }
        Cluster { nodes, down: BTreeSet::new(), inbox: Vec::new() }
    }

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
        self.inbox.append(&mut rd.messages);
        node.advance(rd);
    }

    fn deliver(&mut self, m: Message) {
        if self.down.contains(&m.get_from()) || self.down.contains(&m.get_to()) {
            return;
        }
        self.nodes.get_mut(&m.get_to()).unwrap().step(m).expect("step");
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
            for id in VOTERS.iter() {
                self.handle_ready(*id);
            }
            if self.inbox.is_empty() {
                return;
            }
            let msgs: Vec<Message> = self.inbox.drain(..).collect();
            for m in msgs {
                self.deliver(m);
            }
        }
        panic!("the cluster never went quiet");
    }

    fn leaders(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.raft.state == StateRole::Leader)
            .map(|(id, _)| *id)
            .collect()
    }
}

#[test]
fn campaign_while_snapshot_is_being_persisted() {
    let mut c = Cluster::new();
    c.nodes.get_mut(&1).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.leaders(), vec![1]);

    // Node 3 is cut off while the others commit a few entries.
    c.down.insert(3);
    for i in 0..5u8 {
        c.nodes.get_mut(&1).unwrap().propose(vec![], vec![i]).expect("propose");
        c.settle();
    }
    // The leader's application snapshots what it applied and drops the log before it.
    let applied = c.nodes[&1].raft.raft_log.applied;
    assert!(applied >= 6, "leader applied only {}", applied);
    {
        let mut cs = ConfState::new();
        cs.set_nodes(VOTERS.to_vec());
        let mut store = c.nodes.get_mut(&1).unwrap().mut_store().wl();
        store.create_snapshot(applied, Some(cs), b"state".to_vec()).expect("snapshot");
        store.compact(applied).expect("compact");
    }

    // Node 3 comes back; the leader catches it up with the snapshot.
    c.down.remove(&3);
    c.nodes.get_mut(&1).unwrap().raft.bcast_heartbeat();
    let mut snapshot_seen = false;
    for _ in 0..100 {
        for id in VOTERS.iter() {
            c.handle_ready(*id);
        }
        let msgs: Vec<Message> = c.inbox.drain(..).collect();
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            let is_snap = m.get_to() == 3 && m.get_msg_type() == MessageType::MsgSnapshot;
            c.deliver(m);
            if is_snap {
                snapshot_seen = true;
                break;
            }
        }
        if snapshot_seen {
            break;
        }
    }
    assert!(snapshot_seen, "the leader never sent node 3 a snapshot");

    // Node 3's application takes the Ready carrying the snapshot and starts persisting it; in
    // the meantime node 3 is asked to campaign.
    let node3 = c.nodes.get_mut(&3).unwrap();
    assert!(node3.has_ready());
    let rd = node3.ready();
    assert!(!raft::is_empty_snap(&rd.snapshot), "node 3's Ready has no snapshot");
    let res = panic::catch_unwind(AssertUnwindSafe(|| node3.campaign()));
    assert!(res.is_ok(), "node 3 panicked when asked to campaign after receiving a snapshot");
    res.unwrap().expect("campaign");

    // Persisting finishes; the group must still work.
    node3.mut_store().wl().apply_snapshot(rd.snapshot.clone()).expect("apply snapshot");
    if let Some(hs) = rd.hs.clone() {
        node3.mut_store().wl().set_hardstate(hs);
    }
    let mut rd = rd;
    c.inbox.append(&mut rd.messages);
    c.nodes.get_mut(&3).unwrap().advance(rd);
    c.settle();
    let leaders = c.leaders();
    assert_eq!(leaders.len(), 1, "leaders after the election: {:?}", leaders);
    let leader = leaders[0];
    c.nodes.get_mut(&leader).unwrap().propose(vec![], b"after".to_vec()).expect("propose");
    c.settle();
    let committed: Vec<u64> = VOTERS.iter().map(|id| c.nodes[id].raft.raft_log.committed).collect();
    assert!(committed.iter().all(|&x| x == committed[0]), "commit indexes differ: {:?}", committed);
    assert!(committed[0] > applied, "nothing committed after the election: {:?}", committed);
}
