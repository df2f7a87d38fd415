//! After a leader change, a follower that accepted fewer entries of the previous round than the
//! new leader must end up with exactly the leader's log.

use std::collections::BTreeMap;

use omnipaxos::messages::Message;
use omnipaxos::storage::{Entry, NoSnapshot};
use omnipaxos::util::NodeId;
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;

#[derive(Clone, Debug, PartialEq)]
struct Cmd(u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
}

impl Cluster {
    fn new(priorities: &[(NodeId, u32)]) -> Self {
        let pids: Vec<NodeId> = priorities.iter().map(|(p, _)| *p).collect();
        let mut nodes = BTreeMap::new();
        for &(pid, prio) in priorities {
            let config = OmniPaxosConfig {
                cluster_config: ClusterConfig { configuration_id: 1, nodes: pids.clone(), ..Default::default() },
                server_config: ServerConfig { pid, leader_priority: prio, ..Default::default() },
            };
            nodes.insert(pid, config.build(MemoryStorage::default()).expect("valid config"));
        }
        Cluster { nodes }
    }

    /// Delivers messages (those `keep` accepts; the rest are lost) until nobody sends anything.
    fn exchange(&mut self, keep: &dyn Fn(&Message<Cmd>) -> bool) {
        for _ in 0..1000 {
            let mut out = Vec::new();
            for node in self.nodes.values_mut() {
                out.extend(node.outgoing_messages());
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                if keep(&m) {
                    let to = m.get_receiver();
                    self.nodes.get_mut(&to).unwrap().handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    /// Ticks the given nodes (the others are crashed) and exchanges messages, until `done`.
    fn tick_until(&mut self, alive: &[NodeId], keep: &dyn Fn(&Message<Cmd>) -> bool, done: &dyn Fn(&Cluster) -> bool) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            for pid in alive {
                self.nodes.get_mut(pid).unwrap().tick();
            }
            self.exchange(keep);
        }
        panic!("condition never reached");
    }

    fn log(&self, pid: NodeId) -> Vec<String> {
        let node = &self.nodes[&pid];
        let decided = node.get_decided_idx();
        (0..decided).map(|i| format!("{:?}", node.read(i))).collect()
    }
}

#[test]
fn follower_with_shorter_log_of_previous_round_converges() {
    // Node 1 is preferred as leader, then node 2.
    let mut c = Cluster::new(&[(1, 30), (2, 20), (3, 10)]);
    let all: &dyn Fn(&Message<Cmd>) -> bool = &|_| true;
    c.tick_until(&[1, 2, 3], all, &|c| {
        c.nodes.values().all(|n| n.get_current_leader() == Some(1))
    });

    // Cmd(1) reaches everybody; Cmd(2) and Cmd(3) reach only node 2 before node 1 crashes.
    c.nodes.get_mut(&1).unwrap().append(Cmd(1)).unwrap();
    c.exchange(all);
    c.nodes.get_mut(&1).unwrap().append(Cmd(2)).unwrap();
    c.nodes.get_mut(&1).unwrap().append(Cmd(3)).unwrap();
    c.exchange(&|m| m.get_receiver() != 3 && m.get_sender() != 3);
    assert_eq!(c.nodes[&1].get_decided_idx(), 3, "node 1 decided all three commands with node 2");

    // Node 1 is gone; nodes 2 and 3 elect a new leader and carry on.
    let without_1: &dyn Fn(&Message<Cmd>) -> bool = &|m| m.get_receiver() != 1 && m.get_sender() != 1;
    c.tick_until(&[2, 3], without_1, &|c| {
        c.nodes[&2].get_current_leader() == Some(2) && c.nodes[&3].get_current_leader() == Some(2)
    });
    c.nodes.get_mut(&2).unwrap().append(Cmd(4)).unwrap();
    for _ in 0..200 {
        for pid in [2, 3] {
            c.nodes.get_mut(&pid).unwrap().tick();
        }
        c.exchange(without_1);
    }

    // Safety: wherever both consider an index decided, they hold the same entry.
    let leader = c.log(2);
    let follower = c.log(3);
    for (i, (f, l)) in follower.iter().zip(leader.iter()).enumerate() {
        assert_eq!(f, l, "index {} is decided on node 3 as {} but on the leader as {}", i, f, l);
    }
    // Liveness: the new command gets decided on both.
    assert_eq!(leader.len(), 4, "leader's decided log: {:?}", leader);
    assert_eq!(follower, leader, "node 3 does not hold the leader's decided log");
}
