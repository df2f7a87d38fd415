//! Three in-process OmniPaxos 0.2.0 servers with a hand-driven network (BLE via `tick()`).
//! Node 1 leads, node 3 misses two commands, node 1 crashes, node 2 takes over. Prints the
//! Sequence Paxos messages after the crash and each survivor's log (Markdown, on stdout).

use std::collections::BTreeMap;

use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::storage::{Entry, NoSnapshot};
use omnipaxos::util::NodeId;
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;

#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Cmd(u64);
impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}
type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;

/// A ballot as `round.pid`.
fn b(x: &omnipaxos::ballot_leader_election::Ballot) -> String {
    format!("{}.{}", x.n, x.pid)
}

fn describe(m: &Message<Cmd>) -> Option<String> {
    let body = match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::Prepare(x) => format!("Prepare(n={}, decided_idx={}, accepted_idx={})", b(&x.n), x.decided_idx, x.accepted_idx),
            PaxosMsg::Promise(x) => format!(
                "Promise(n={}, n_accepted={}, decided_idx={}, accepted_idx={}, suffix={:?})",
                b(&x.n), b(&x.n_accepted), x.decided_idx, x.accepted_idx, x.suffix
            ),
            PaxosMsg::AcceptSync(x) => format!(
                "AcceptSync(n={}, sync_idx={}, suffix={:?}, decided_idx={})",
                b(&x.n), x.sync_idx, x.suffix, x.decided_idx
            ),
            PaxosMsg::AcceptDecide(x) => format!("AcceptDecide(n={}, decided_idx={}, entries={:?})", b(&x.n), x.decided_idx, x.entries),
            PaxosMsg::Accepted(x) => format!("Accepted(n={}, accepted_idx={})", b(&x.n), x.accepted_idx),
            PaxosMsg::Decide(x) => format!("Decide(n={}, decided_idx={})", b(&x.n), x.decided_idx),
            other => format!("{:?}", other),
        },
        Message::BLE(_) => return None,
    };
    Some(format!("{} -> {}: {}", m.get_sender(), m.get_receiver(), body))
}

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
    trace: bool,
}

impl Cluster {
    fn exchange(&mut self, keep: &dyn Fn(&Message<Cmd>) -> bool) {
        loop {
            let mut out = Vec::new();
            for n in self.nodes.values_mut() {
                out.extend(n.outgoing_messages());
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                if keep(&m) {
                    if self.trace {
                        if let Some(d) = describe(&m) {
                            println!("- {}", d);
                        }
                    }
                    let to = m.get_receiver();
                    self.nodes.get_mut(&to).unwrap().handle_incoming(m);
                }
            }
        }
    }
    fn tick(&mut self, alive: &[NodeId], keep: &dyn Fn(&Message<Cmd>) -> bool) {
        for p in alive {
            self.nodes.get_mut(p).unwrap().tick();
        }
        self.exchange(keep);
    }
    fn log(&self, pid: NodeId) -> String {
        let n = &self.nodes[&pid];
        let entries: Vec<String> = (0..5).filter_map(|i| n.read(i).map(|e| format!("{}: {:?}", i, e))).collect();
        format!("node {}: get_decided_idx() = {}, read(0..5) = [{}]", pid, n.get_decided_idx(), entries.join(", "))
    }
}

fn main() {
    let prios = [(1u64, 30u32), (2, 20), (3, 10)];
    let pids: Vec<NodeId> = prios.iter().map(|p| p.0).collect();
    let mut nodes = BTreeMap::new();
    for &(pid, prio) in &prios {
        let cfg = OmniPaxosConfig {
            cluster_config: ClusterConfig { configuration_id: 1, nodes: pids.clone(), ..Default::default() },
            server_config: ServerConfig { pid, leader_priority: prio, ..Default::default() },
        };
        nodes.insert(pid, cfg.build(MemoryStorage::default()).unwrap());
    }
    let mut c = Cluster { nodes, trace: false };
    let all = |_: &Message<Cmd>| true;
    while !c.nodes.values().all(|n| n.get_current_leader() == Some(1)) {
        c.tick(&[1, 2, 3], &all);
    }
    println!("# Leader change in a three-node cluster\n");
    println!("omnipaxos 0.2.0, `MemoryStorage`, leader priorities 1:30, 2:20, 3:10; `tick()` drives");
    println!("BLE (its messages are delivered but not listed). Ballots are shown as `round.pid`; log");
    println!("indexes start at 0.\n");
    println!("1. Node 1 is leader (ballot {}). `append(Cmd(1))` reaches nodes 2 and 3 and is decided.", b(&c.nodes[&1].get_current_leader_ballot().unwrap()));
    c.nodes.get_mut(&1).unwrap().append(Cmd(1)).unwrap();
    c.exchange(&all);
    println!("2. `append(Cmd(2))`, `append(Cmd(3))`: every message to or from node 3 is lost; node 2");
    println!("   accepts both, node 1 decides them (decided index {}).", {
        c.nodes.get_mut(&1).unwrap().append(Cmd(2)).unwrap();
        c.nodes.get_mut(&1).unwrap().append(Cmd(3)).unwrap();
        c.exchange(&|m| m.get_receiver() != 3 && m.get_sender() != 3);
        c.nodes[&1].get_decided_idx()
    });
    println!("3. Node 1 crashes. Nodes 2 and 3 keep ticking; node 2 is elected. Messages from then on:\n");
    let without_1 = |m: &Message<Cmd>| m.get_receiver() != 1 && m.get_sender() != 1;
    c.trace = true;
    while !(c.nodes[&2].get_current_leader() == Some(2) && c.nodes[&3].get_current_leader() == Some(2)) {
        c.tick(&[2, 3], &without_1);
    }
    c.exchange(&without_1);
    println!("\n4. `append(Cmd(4))` on node 2, then 200 more ticks:\n");
    c.nodes.get_mut(&2).unwrap().append(Cmd(4)).unwrap();
    for _ in 0..200 {
        c.tick(&[2, 3], &without_1);
    }
    println!("\n## State at the end\n");
    println!("- {}", c.log(2));
    println!("- {}", c.log(3));
}
