//! A reconfiguration that was accepted by the followers but not yet decided when its leader
//! crashed must still complete under the next leader, as long as a majority is alive.

use std::collections::BTreeMap;

use omnipaxos::messages::Message;
use omnipaxos::storage::{Entry, NoSnapshot};
use omnipaxos::util::NodeId;
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;

#[derive(Clone, Debug, PartialEq)]
pub struct Cmd(pub u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

pub type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

/// The points of the scenario an observer is told about.
pub enum Step {
    /// Node 1 leads; next it appends one entry.
    Elected,
    /// Node 1 is about to propose the new configuration.
    Reconfigure,
    /// Node 1 has crashed; nodes 2 and 3 tick on.
    Crashed,
    /// Nodes 2 and 3 agree on a new leader; 500 more ticks follow.
    NewLeader,
    /// The scenario is over.
    End,
}

/// Sees every message sent (and whether it was delivered) and the scenario's steps.
pub trait Observer {
    fn message(&mut self, _m: &Message<Cmd>, _delivered: bool) {}
    fn step(&mut self, _c: &Cluster, _step: Step) {}
}

impl Observer for () {}

pub struct Cluster {
    pub nodes: BTreeMap<NodeId, Node>,
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
    fn exchange(&mut self, keep: Filter, obs: &mut dyn Observer) {
        for _ in 0..1000 {
            let mut out = Vec::new();
            for node in self.nodes.values_mut() {
                out.extend(node.outgoing_messages());
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                let delivered = keep(&m);
                obs.message(&m, delivered);
                if delivered {
                    let to = m.get_receiver();
                    self.node(to).handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick(&mut self, alive: &[NodeId], keep: Filter, obs: &mut dyn Observer) {
        for pid in alive {
            self.node(*pid).tick();
        }
        self.exchange(keep, obs);
    }

    fn tick_until(
        &mut self,
        alive: &[NodeId],
        keep: Filter,
        obs: &mut dyn Observer,
        done: &dyn Fn(&Cluster) -> bool,
    ) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            self.tick(alive, keep, obs);
        }
        panic!("condition never reached");
    }
}

/// Three servers (priorities 1:30, 2:20, 3:10); node 1 leads, decides one entry, proposes a new
/// configuration whose acceptances are lost, and crashes; nodes 2 and 3 elect a new leader and
/// tick 500 more times.
pub fn crash_during_reconfiguration(obs: &mut dyn Observer) -> Cluster {
    let mut c = Cluster::new(&[(1, 30), (2, 20), (3, 10)]);
    let all: Filter = &|_| true;
    c.tick_until(&[1, 2, 3], all, obs, &|c| {
        c.nodes.values().all(|n| n.get_current_leader() == Some(1))
    });
    obs.step(&c, Step::Elected);
    c.node(1).append(Cmd(1)).unwrap();
    c.exchange(all, obs);
    assert_eq!(c.nodes[&2].get_decided_idx(), 1);

    // Node 1 proposes a new configuration; its followers accept it, but their replies are lost
    // and node 1 crashes before it can decide it.
    let next = ClusterConfig {
        configuration_id: 2,
        nodes: vec![1, 2, 3],
        ..Default::default()
    };
    obs.step(&c, Step::Reconfigure);
    c.node(1).reconfigure(next, None).expect("reconfiguration proposed");
    c.exchange(&|m| m.get_receiver() != 1, obs);
    assert!(c.nodes.values().all(|n| n.is_reconfigured().is_none()));
    obs.step(&c, Step::Crashed);

    // Nodes 2 and 3 are a majority: they elect a new leader, which must finish the reconfiguration.
    let without_1: Filter = &|m| m.get_receiver() != 1 && m.get_sender() != 1;
    c.tick_until(&[2, 3], without_1, obs, &|c| {
        let l2 = c.nodes[&2].get_current_leader();
        l2.is_some() && l2 != Some(1) && c.nodes[&3].get_current_leader() == l2
    });
    obs.step(&c, Step::NewLeader);
    for _ in 0..500 {
        c.tick(&[2, 3], without_1, obs);
    }
    obs.step(&c, Step::End);
    c
}

#[test]
fn pending_reconfiguration_completes_after_leader_crash() {
    let c = crash_during_reconfiguration(&mut ());
    for pid in [2, 3] {
        let n = &c.nodes[&pid];
        assert!(
            n.is_reconfigured().is_some(),
            "node {} (leader {:?}) never decided the stop sign; decided index {}",
            pid,
            n.get_current_leader(),
            n.get_decided_idx()
        );
        assert_eq!(
            n.get_decided_idx(),
            2,
            "node {} reports the stop sign but decided only up to index {}",
            pid,
            n.get_decided_idx()
        );
    }
}
