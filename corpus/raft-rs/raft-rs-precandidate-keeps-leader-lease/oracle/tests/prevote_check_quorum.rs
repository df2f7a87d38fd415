//! With pre-vote and check-quorum on, two survivors of a three-node cluster whose leader is cut
//! off must be able to elect one of themselves when both campaign.

use std::collections::BTreeMap;

use raft::eraftpb::Message;
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole};

const IDS: [u64; 3] = [1, 2, 3];

fn config(id: u64) -> Config {
    Config {
        id,
        peers: IDS.to_vec(),
        learners: vec![],
        election_tick: 10,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        min_election_tick: 0,
        max_election_tick: 0,
        read_only_option: ReadOnlyOption::Safe,
        skip_bcast_commit: false,
        tag: format!("node {}", id),
    }
}

struct Cluster {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Nodes whose links are all down.
    isolated: Vec<u64>,
}

impl Cluster {
    fn new() -> Self {
        let mut nodes = BTreeMap::new();
        for id in IDS {
            let c = config(id);
            c.validate().expect("valid config");
            nodes.insert(id, RawNode::new(&c, MemStorage::new(), vec![]).expect("node"));
        }
        Cluster { nodes, isolated: vec![] }
    }

    /// Persists and sends whatever each node has ready, until nothing is left.
    fn settle(&mut self) {
        for _ in 0..1000 {
            let mut out: Vec<Message> = Vec::new();
            for node in self.nodes.values_mut() {
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
                out.append(&mut rd.messages);
                node.advance(rd);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                if self.isolated.contains(&m.get_from()) || self.isolated.contains(&m.get_to()) {
                    continue;
                }
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).expect("step");
            }
        }
        panic!("the cluster never went quiet");
    }

    fn role(&self, id: u64) -> StateRole {
        self.nodes[&id].raft.state
    }
}

#[test]
fn survivors_elect_a_leader_after_leader_is_cut_off() {
    let mut c = Cluster::new();
    c.nodes.get_mut(&1).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.role(1), StateRole::Leader);
    assert_eq!(c.nodes[&2].raft.leader_id, 1);
    assert_eq!(c.nodes[&3].raft.leader_id, 1);

    // Node 1 loses every link. The failure detector on the survivors notices and has node 3,
    // then node 2, campaign.
    c.isolated.push(1);
    c.nodes.get_mut(&3).unwrap().campaign().expect("campaign");
    c.settle();
    c.nodes.get_mut(&2).unwrap().campaign().expect("campaign");
    c.settle();

    let roles: Vec<(u64, StateRole)> = [2, 3].iter().map(|&id| (id, c.role(id))).collect();
    let leaders = roles.iter().filter(|(_, r)| *r == StateRole::Leader).count();
    assert_eq!(leaders, 1, "the survivors elected no leader: {:?}", roles);
}
