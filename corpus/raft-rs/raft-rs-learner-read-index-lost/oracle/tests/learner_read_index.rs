//! A read-index request made on a learner must be answered to that learner, also when the
//! cluster has a single voter.

use std::collections::BTreeMap;

use raft::eraftpb::Message;
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, ReadState, StateRole};

fn config(id: u64, voters: &[u64], learners: &[u64]) -> Config {
    Config {
        id,
        peers: voters.to_vec(),
        learners: learners.to_vec(),
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
    /// Read states each node's application received, in order.
    reads: BTreeMap<u64, Vec<ReadState>>,
}

impl Cluster {
    fn new(voters: &[u64], learners: &[u64]) -> Self {
        let mut nodes = BTreeMap::new();
        let mut reads = BTreeMap::new();
        for &id in voters.iter().chain(learners) {
            let c = config(id, voters, learners);
            c.validate().expect("valid config");
            nodes.insert(id, RawNode::new(&c, MemStorage::new(), vec![]).expect("node"));
            reads.insert(id, Vec::new());
        }
        Cluster { nodes, reads }
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
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
                    node.mut_store().wl().append(&rd.entries).expect("append");
                }
                self.reads.get_mut(id).unwrap().append(&mut rd.read_states);
                out.append(&mut rd.messages);
                node.advance(rd);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).expect("step");
            }
        }
        panic!("the cluster never went quiet");
    }

    fn contexts(&self, id: u64) -> Vec<Vec<u8>> {
        self.reads[&id].iter().map(|r| r.request_ctx.clone()).collect()
    }
}

fn run(voters: &[u64], learners: &[u64]) {
    let mut c = Cluster::new(voters, learners);
    let leader = voters[0];
    c.nodes.get_mut(&leader).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.nodes[&leader].raft.state, StateRole::Leader);
    // A proposal, so that every node has heard from the leader and the leader has committed
    // an entry of its term.
    c.nodes.get_mut(&leader).unwrap().propose(vec![], b"x".to_vec()).expect("propose");
    c.settle();
    let learner = learners[0];
    assert_eq!(c.nodes[&learner].raft.leader_id, leader);

    c.nodes.get_mut(&learner).unwrap().read_index(b"learner-read".to_vec());
    c.settle();
    let committed = c.nodes[&leader].raft.raft_log.committed;
    assert_eq!(
        c.contexts(learner),
        vec![b"learner-read".to_vec()],
        "the learner's read was not answered (leader got {:?})",
        c.contexts(leader)
    );
    assert_eq!(c.reads[&learner][0].index, committed);
    assert!(c.contexts(leader).is_empty(), "the leader got a read it never asked for");
}

#[test]
fn learner_read_index_with_single_voter() {
    run(&[1], &[2]);
}
