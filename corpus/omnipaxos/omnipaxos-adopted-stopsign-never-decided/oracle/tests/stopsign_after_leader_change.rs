//! A reconfiguration that was accepted by the followers but not yet decided when its leader
//! crashed must still complete under the next leader, as long as a majority is alive.

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
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
}

impl Cluster {
    fn new(priorities: &[(NodeId, u32)]) -> Self {
        let pids: Vec<NodeId> = priorities.iter().map(|(p, _)| *p).collect();
        let mut nodes = BTreeMap::new();
        for &(pid, prio) in priorities {
            let config = OmniPaxosConfig {
                cluster_config: ClusterConfig {
                    configuration_id: 1,
                    nodes: pids.clone(),
                    ..Default::default()
                },
                server_config: ServerConfig {
                    pid,
                    leader_priority: prio,
                    ..Default::default()
                },
            };
            nodes.insert(pid, config.build(MemoryStorage::default()).expect("valid config"));
        }
        Cluster { nodes }
    }

    fn node(&mut self, pid: NodeId) -> &mut Node {
        self.nodes.get_mut(&pid).unwrap()
    }

    /// Delivers the messages that `keep` lets through (the others are lost) until nobody sends.
    fn exchange(&mut self, keep: Filter) {
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
                    self.node(to).handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick(&mut self, alive: &[NodeId], keep: Filter) {
        for pid in alive {
            self.node(*pid).tick();
        }
        self.exchange(keep);
    }

    fn tick_until(&mut self, alive: &[NodeId], keep: Filter, done: &dyn Fn(&Cluster) -> bool) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            self.tick(alive, keep);
        }
        panic!("condition never reached");
    }
}

#[test]
fn pending_reconfiguration_completes_after_leader_crash() {
    let mut c = Cluster::new(&[(1, 30), (2, 20), (3, 10)]);
    let all: Filter = &|_| true;
    c.tick_until(&[1, 2, 3], all, &|c| {
        c.nodes.values().all(|n| n.get_current_leader() == Some(1))
    });
    c.node(1).append(Cmd(1)).unwrap();
    c.exchange(all);
    assert_eq!(c.nodes[&2].get_decided_idx(), 1);

    // Node 1 proposes a new configuration; its followers accept it, but their replies are lost
    // and node 1 crashes before it can decide it.
    let next = ClusterConfig {
        configuration_id: 2,
        nodes: vec![1, 2, 3],
        ..Default::default()
    };
    c.node(1).reconfigure(next, None).expect("reconfiguration proposed");
    c.exchange(&|m| m.get_receiver() != 1);
    assert!(c.nodes.values().all(|n| n.is_reconfigured().is_none()));

    // Nodes 2 and 3 are a majority: they elect a new leader, which must finish the reconfiguration.
    let without_1: Filter = &|m| m.get_receiver() != 1 && m.get_sender() != 1;
    c.tick_until(&[2, 3], without_1, &|c| {
        let l2 = c.nodes[&2].get_current_leader();
        l2.is_some() && l2 != Some(1) && c.nodes[&3].get_current_leader() == l2
    });
    for _ in 0..500 {
        c.tick(&[2, 3], without_1);
    }
    for pid in [2, 3] {
        let n = &c.nodes[&pid];
        assert!(
            n.is_reconfigured().is_some(),
            "node {} (leader {:?}) never decided the stop sign; decided index {}",
            pid,
            n.get_current_leader(),
            n.get_decided_idx()
        );
    }
}
