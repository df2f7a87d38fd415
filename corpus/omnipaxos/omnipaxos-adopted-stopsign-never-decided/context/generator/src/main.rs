//! Three in-process OmniPaxos 0.2.1 servers with a hand-driven network (BLE via `tick()`).
//! Node 1 leads and proposes a new configuration; the followers' replies are lost and node 1
//! crashes. Prints the Sequence Paxos messages between the survivors and their state
//! (Markdown, on stdout).

use std::collections::BTreeMap;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::storage::{Entry, NoSnapshot, StopSign};
use omnipaxos::util::{LogEntry, NodeId};
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;

#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Cmd(u64);
impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}
type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

/// A ballot as `round.pid`.
fn b(x: &Ballot) -> String {
    format!("{}.{}", x.n, x.pid)
}

fn ss(x: &Option<StopSign>) -> String {
    match x {
        Some(s) => format!("StopSign(config {})", s.next_config.configuration_id),
        None => "None".to_string(),
    }
}

fn describe(m: &Message<Cmd>) -> Option<String> {
    let body = match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::Prepare(x) => format!(
                "Prepare(n={}, n_accepted={}, decided_idx={}, accepted_idx={})",
                b(&x.n), b(&x.n_accepted), x.decided_idx, x.accepted_idx
            ),
            PaxosMsg::Promise(x) => format!(
                "Promise(n={}, n_accepted={}, decided_idx={}, accepted_idx={}, suffix={:?}, stopsign={})",
                b(&x.n), b(&x.n_accepted), x.decided_idx, x.accepted_idx, x.suffix, ss(&x.stopsign)
            ),
            PaxosMsg::AcceptSync(x) => format!(
                "AcceptSync(n={}, sync_idx={}, suffix={:?}, decided_idx={}, stopsign={})",
                b(&x.n), x.sync_idx, x.suffix, x.decided_idx, ss(&x.stopsign)
            ),
            PaxosMsg::AcceptDecide(x) => format!(
                "AcceptDecide(n={}, decided_idx={}, entries={:?})",
                b(&x.n), x.decided_idx, x.entries
            ),
            PaxosMsg::AcceptStopSign(x) => format!(
                "AcceptStopSign(n={}, ss={})",
                b(&x.n), ss(&Some(x.ss.clone()))
            ),
            PaxosMsg::Accepted(x) => format!("Accepted(n={}, accepted_idx={})", b(&x.n), x.accepted_idx),
            PaxosMsg::Decide(x) => format!("Decide(n={}, decided_idx={})", b(&x.n), x.decided_idx),
            PaxosMsg::PrepareReq => "PrepareReq".to_string(),
            other => format!("{:?}", other),
        },
        Message::BLE(_) => return None,
    };
    Some(format!("{} -> {}: {}", m.get_sender(), m.get_receiver(), body))
}

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
    trace: bool,
    lost: bool,
    printed: usize,
}

impl Cluster {
    fn exchange(&mut self, keep: Filter) {
        loop {
            let mut out = Vec::new();
            for n in self.nodes.values_mut() {
                out.extend(n.outgoing_messages());
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                let delivered = keep(&m);
                if self.trace {
                    if let Some(d) = describe(&m) {
                        if delivered {
                            self.printed += 1;
                            println!("- {}", d);
                        } else if self.lost {
                            println!("- {} (lost)", d);
                        }
                    }
                }
                if delivered {
                    let to = m.get_receiver();
                    self.nodes.get_mut(&to).unwrap().handle_incoming(m);
                }
            }
        }
    }
    fn tick(&mut self, alive: &[NodeId], keep: Filter) {
        for p in alive {
            self.nodes.get_mut(p).unwrap().tick();
        }
        self.exchange(keep);
    }
    fn state(&self, pid: NodeId) -> String {
        let n = &self.nodes[&pid];
        let entries: Vec<String> = (0..4)
            .filter_map(|i| {
                n.read(i).map(|e| match e {
                    LogEntry::StopSign(s, decided) => format!("{}: StopSign(config {}, decided={})", i, s.next_config.configuration_id, decided),
                    other => format!("{}: {:?}", i, other),
                })
            })
            .collect();
        format!(
            "node {}: get_current_leader() = {:?}, get_decided_idx() = {}, is_reconfigured() = {}, read(0..4) = [{}]",
            pid,
            n.get_current_leader(),
            n.get_decided_idx(),
            ss(&n.is_reconfigured()),
            entries.join(", ")
        )
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
    let mut c = Cluster { nodes, trace: false, lost: false, printed: 0 };
    let all: Filter = &|_| true;
    while !c.nodes.values().all(|n| n.get_current_leader() == Some(1)) {
        c.tick(&[1, 2, 3], all);
    }
    println!("# Reconfiguration interrupted by a leader crash\n");
    println!("omnipaxos 0.2.1, `MemoryStorage`, three servers (configuration 1), leader priorities");
    println!("1:30, 2:20, 3:10; `tick()` drives BLE (its messages are delivered but not listed).");
    println!("Ballots are shown as `round.pid`; log indexes start at 0.\n");
    println!(
        "1. Node 1 is leader (ballot {}). `append(Cmd(1))` is decided everywhere.",
        b(&c.nodes[&1].get_current_leader_ballot().unwrap())
    );
    c.nodes.get_mut(&1).unwrap().append(Cmd(1)).unwrap();
    c.exchange(all);
    println!("2. `reconfigure(configuration 2, nodes [1, 2, 3])` on node 1:\n");
    let next = ClusterConfig { configuration_id: 2, nodes: vec![1, 2, 3], ..Default::default() };
    c.nodes.get_mut(&1).unwrap().reconfigure(next, None).unwrap();
    c.trace = true;
    c.lost = true;
    c.exchange(&|m| m.get_receiver() != 1);
    c.lost = false;
    println!("\n3. Node 1 crashes. Nodes 2 and 3 keep ticking; node 2 is elected. Messages from then on:\n");
    let without_1: Filter = &|m| m.get_receiver() != 1 && m.get_sender() != 1;
    while !(c.nodes[&2].get_current_leader() == Some(2) && c.nodes[&3].get_current_leader() == Some(2)) {
        c.tick(&[2, 3], without_1);
    }
    c.exchange(without_1);
    println!("\n4. 500 more ticks on nodes 2 and 3. Sequence Paxos messages:\n");
    let before = c.printed;
    for _ in 0..500 {
        c.tick(&[2, 3], without_1);
    }
    if c.printed == before {
        println!("- (none)");
    }
    println!();
    println!("## State at the end\n");
    println!("- {}", c.state(2));
    println!("- {}", c.state(3));
}
