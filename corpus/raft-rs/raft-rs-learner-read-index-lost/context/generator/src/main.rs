//! A raft 0.4.2 group of one voter (node 1) and one learner (node 2), `RawNode`s over a
//! hand-driven network. The learner asks for a read index. Prints the messages and the read
//! states each node's `Ready` carried (Markdown, on stdout).

use std::collections::BTreeMap;

use raft::eraftpb::Message;
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption};

fn config(id: u64) -> Config {
    Config {
        id,
        peers: vec![1],
        learners: vec![2],
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
    trace: bool,
    /// Read states handed to any application while not tracing.
    untraced_reads: usize,
}

impl Cluster {
    fn settle(&mut self) {
        loop {
            let mut out: Vec<Message> = Vec::new();
            for (id, node) in self.nodes.iter_mut() {
                if !node.has_ready() {
                    continue;
                }
                let mut rd = node.ready();
                if let Some(hs) = rd.hs.clone() {
                    node.mut_store().wl().set_hardstate(hs);
                }
                if !rd.entries.is_empty() {
                    node.mut_store().wl().append(&rd.entries).unwrap();
                }
                if !self.trace {
                    self.untraced_reads += rd.read_states.len();
                } else {
                    for rs in &rd.read_states {
                        println!(
                            "- node {} Ready.read_states: ReadState {{ index: {}, request_ctx: {:?} }}",
                            id,
                            rs.index,
                            String::from_utf8_lossy(&rs.request_ctx)
                        );
                    }
                }
                out.append(&mut rd.messages);
                node.advance(rd);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                if self.trace {
                    let ctx: Vec<String> = m
                        .get_entries()
                        .iter()
                        .map(|e| format!("{:?}", String::from_utf8_lossy(e.get_data())))
                        .collect();
                    println!(
                        "- {} -> {}: {:?}(term={}, index={}, commit={}, entries=[{}])",
                        m.get_from(),
                        m.get_to(),
                        m.get_msg_type(),
                        m.get_term(),
                        m.get_index(),
                        m.get_commit(),
                        ctx.join(", ")
                    );
                }
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).unwrap();
            }
        }
    }
}

fn main() {
    let mut nodes = BTreeMap::new();
    for id in [1, 2] {
        nodes.insert(id, RawNode::new(&config(id), MemStorage::new(), vec![]).unwrap());
    }
    let mut c = Cluster { nodes, trace: false, untraced_reads: 0 };
    println!("# Read index requested on a learner\n");
    println!("raft 0.4.2, `RawNode`s on in-memory storage: voter 1, learner 2 (`Config.peers = [1]`,");
    println!("`learners = [2]`), ReadOnlyOption::Safe. Each `Ready` is persisted, its read_states handed");
    println!("to the application and its messages delivered, until nothing is left.\n");
    c.nodes.get_mut(&1).unwrap().campaign().unwrap();
    c.settle();
    c.nodes.get_mut(&1).unwrap().propose(vec![], b"x".to_vec()).unwrap();
    c.settle();
    for id in [1, 2] {
        let r = &c.nodes[&id].raft;
        println!(
            "- node {}: state={:?}, term={}, leader_id={}, committed={}",
            id, r.state, r.term, r.leader_id, r.raft_log.committed
        );
    }
    println!("\n`read_index(\"learner-read\")` on node 2, then everything is delivered:\n");
    c.trace = true;
    c.nodes.get_mut(&2).unwrap().read_index(b"learner-read".to_vec());
    c.settle();
    println!("\nNothing else is sent. Then 100 `tick()`s on both nodes (heartbeats delivered, not listed):\n");
    c.trace = false;
    for _ in 0..100 {
        for id in [1, 2] {
            c.nodes.get_mut(&id).unwrap().tick();
        }
        c.settle();
    }
    println!("- read states handed to either application: {}", c.untraced_reads);
    for id in [1, 2] {
        let r = &c.nodes[&id].raft;
        println!("- node {}: state={:?}, term={}, committed={}", id, r.state, r.term, r.raft_log.committed);
    }
}
