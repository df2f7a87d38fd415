//! Prints the trace in ../campaign-trace.md: a follower catches up through a snapshot and is
//! asked to campaign while its application is still persisting that snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{self, AssertUnwindSafe};

use raft::eraftpb::{ConfState, Message, MessageType};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption};

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

fn show(id: u64, n: &RawNode<MemStorage>) {
    let l = &n.raft.raft_log;
    println!(
        "- node {}: state={:?}, term={}, leader_id={}, committed={}, applied={}, last_index={}",
        id, n.raft.state, n.raft.term, n.raft.leader_id, l.committed, l.applied, l.last_index()
    );
}

fn describe(m: &Message) -> String {
    let mut s = format!(
        "{} -> {}: {:?}(term={}, index={}, commit={}, reject={}, entries={}",
        m.get_from(), m.get_to(), m.get_msg_type(), m.get_term(), m.get_index(), m.get_commit(), m.get_reject(),
        m.get_entries().len()
    );
    if m.get_msg_type() == MessageType::MsgSnapshot {
        let md = m.get_snapshot().get_metadata();
        s += &format!(", snapshot index={} term={} nodes={:?}", md.get_index(), md.get_term(),
            md.get_conf_state().get_nodes());
    }
    s + ")"
}

struct Cluster {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    down: BTreeSet<u64>,
    inbox: Vec<Message>,
}

impl Cluster {
    fn handle_ready(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        if !node.has_ready() {
            return;
        }
        let mut rd = node.ready();
        if !raft::is_empty_snap(&rd.snapshot) {
            node.mut_store().wl().apply_snapshot(rd.snapshot.clone()).unwrap();
        }
        node.mut_store().wl().append(&rd.entries).unwrap();
        if let Some(hs) = rd.hs.clone() {
            node.mut_store().wl().set_hardstate(hs);
        }
        self.inbox.append(&mut rd.messages);
        node.advance(rd);
    }

    fn deliver(&mut self, m: Message, print: bool) {
        if self.down.contains(&m.get_from()) || self.down.contains(&m.get_to()) {
            return;
        }
        if print {
            println!("- {}", describe(&m));
        }
        self.nodes.get_mut(&m.get_to()).unwrap().step(m).unwrap();
    }

    fn settle(&mut self) {
        loop {
            for id in VOTERS.iter() {
                self.handle_ready(*id);
            }
            if self.inbox.is_empty() {
                return;
            }
            let msgs: Vec<Message> = self.inbox.drain(..).collect();
            for m in msgs {
                self.deliver(m, false);
            }
        }
    }
}

/// The bundle's heading and setup, printed before the run.
const HEADER: &str = "# Follower caught up by snapshot, then asked to campaign

raft 0.4.0, three `RawNode`s on `MemStorage`, election_tick 10, heartbeat_tick 1, no pre_vote, no
check_quorum. Every `Ready` is persisted (snapshot, entries, hard state), its messages sent, then
`advance` is called. Produced by `generator/` (raft log output off).
";

fn main() {
    println!("{HEADER}");
    panic::set_hook(Box::new(|info| {
        println!("- node 3's thread panicked (payload: {:?})",
            info.payload().downcast_ref::<String>().map(|s| s.rsplit(": ").next().unwrap_or("").to_string()));
    }));
    let mut c = Cluster { nodes: BTreeMap::new(), down: BTreeSet::new(), inbox: Vec::new() };
    for &id in VOTERS.iter() {
        c.nodes.insert(id, RawNode::new(&config(id), MemStorage::new(), vec![]).unwrap());
    }
    c.nodes.get_mut(&1).unwrap().campaign().unwrap();
    c.settle();
    println!("## 1. Node 1 elected; node 3 then partitioned, 5 proposals committed on 1 and 2\n");
    c.down.insert(3);
    for i in 0..5u8 {
        c.nodes.get_mut(&1).unwrap().propose(vec![], vec![i]).unwrap();
        c.settle();
    }
    let applied = c.nodes[&1].raft.raft_log.applied;
    {
        let mut cs = ConfState::new();
        cs.set_nodes(VOTERS.to_vec());
        let mut store = c.nodes.get_mut(&1).unwrap().mut_store().wl();
        store.create_snapshot(applied, Some(cs), b"state".to_vec()).unwrap();
        store.compact(applied).unwrap();
    }
    println!("Node 1's application snapshots at index {} and compacts its log up to it.\n", applied);
    for id in VOTERS.iter() {
        show(*id, &c.nodes[id]);
    }
    println!("\n## 2. Partition healed, node 1 sends heartbeats; messages delivered one by one\n");
    c.down.remove(&3);
    c.nodes.get_mut(&1).unwrap().raft.bcast_heartbeat();
    'outer: loop {
        for id in VOTERS.iter() {
            c.handle_ready(*id);
        }
        let msgs: Vec<Message> = c.inbox.drain(..).collect();
        for m in msgs {
            let snap = m.get_msg_type() == MessageType::MsgSnapshot;
            c.deliver(m, true);
            if snap {
                break 'outer;
            }
        }
    }
    println!("\n## 3. Node 3 takes its Ready (persisting starts) and `campaign()` is called\n");
    let n3 = c.nodes.get_mut(&3).unwrap();
    let rd = n3.ready();
    println!("- node 3 Ready: snapshot index={}, entries={}, committed_entries={}, hs.commit={:?}",
        rd.snapshot.get_metadata().get_index(), rd.entries.len(),
        rd.committed_entries.as_ref().map_or(0, |e| e.len()), rd.hs.as_ref().map(|h| h.get_commit()));
    show(3, n3);
    let r = panic::catch_unwind(AssertUnwindSafe(|| n3.campaign()));
    println!("- campaign() returned normally: {}", r.is_ok());
}
