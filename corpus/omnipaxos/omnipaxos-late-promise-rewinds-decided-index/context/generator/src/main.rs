//! Five in-process OmniPaxos servers with a hand-driven network. Node 1 leads and decides three
//! commands, then crashes; node 4 takes over while its Prepare to node 2 is delayed. Prints every
//! delivered Sequence Paxos message (BLE traffic and the first round's set-up are not listed) and each node's decided index (Markdown, on stdout).

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

#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Deliver,
    Drop,
    Hold,
}

fn describe(m: &Message<Cmd>) -> String {
    let body = match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::Prepare(x) => format!("Prepare(n={}, decided_idx={}, accepted_idx={})", x.n.n, x.decided_idx, x.accepted_idx),
            PaxosMsg::Promise(x) => format!(
                "Promise(n={}, n_accepted={}, decided_idx={}, accepted_idx={}, log_sync={})",
                x.n.n,
                x.n_accepted.n,
                x.decided_idx,
                x.accepted_idx,
                x.log_sync.as_ref().map(|s| format!("{} entries from {}", s.suffix.len(), s.sync_idx)).unwrap_or("none".into())
            ),
            PaxosMsg::AcceptSync(x) => format!(
                "AcceptSync(n={}, decided_idx={}, log_sync={} entries from {})",
                x.n.n,
                x.decided_idx,
                x.log_sync.suffix.len(),
                x.log_sync.sync_idx
            ),
            PaxosMsg::AcceptDecide(x) => format!("AcceptDecide(n={}, decided_idx={}, {} entries)", x.n.n, x.decided_idx, x.entries.len()),
            PaxosMsg::Accepted(x) => format!("Accepted(n={}, accepted_idx={})", x.n.n, x.accepted_idx),
            PaxosMsg::Decide(x) => format!("Decide(n={}, decided_idx={})", x.n.n, x.decided_idx),
            other => format!("{:?}", other),
        },
        Message::BLE(_) => "BLE".into(),
    };
    format!("{} -> {}: {}", m.get_sender(), m.get_receiver(), body)
}

fn kind(m: &Message<Cmd>) -> &'static str {
    match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::Prepare(_) => "Prepare",
            PaxosMsg::AcceptSync(_) => "AcceptSync",
            PaxosMsg::AcceptDecide(_) => "AcceptDecide",
            PaxosMsg::Decide(_) => "Decide",
            _ => "other",
        },
        _ => "BLE",
    }
}

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
    held: Vec<Message<Cmd>>,
    step: usize,
    quiet: bool,
}

impl Cluster {
    fn deliver(&mut self, m: Message<Cmd>, note: &str) {
        let line = describe(&m);
        let to = m.get_receiver();
        self.nodes.get_mut(&to).unwrap().handle_incoming(m);
        self.step += 1;
        if self.quiet || line.ends_with("BLE") {
            return;
        }
        let d: Vec<String> = self.nodes.values().map(|n| n.get_decided_idx().to_string()).collect();
        println!("| {} | {}{} | {} |", self.step, line, note, d.join(" "));
    }
    fn run(&mut self, fate: impl Fn(&Message<Cmd>) -> Fate) {
        loop {
            let mut out = Vec::new();
            for n in self.nodes.values_mut() {
                n.take_outgoing_messages(&mut out);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                match fate(&m) {
                    Fate::Deliver => self.deliver(m, ""),
                    Fate::Drop if kind(&m) == "BLE" => {}
                    Fate::Drop => println!("| - | {} (lost) | |", describe(&m)),
                    Fate::Hold => {
                        println!("| - | {} (delayed) | |", describe(&m));
                        self.held.push(m)
                    }
                }
            }
        }
    }
    fn release(&mut self, pick: impl Fn(&Message<Cmd>) -> bool) {
        let (now, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held).into_iter().partition(|m| pick(m));
        self.held = keep;
        for m in now {
            self.deliver(m, " (delayed, arrives now)");
        }
    }
}

fn main() {
    let pids = [1u64, 2, 3, 4, 5];
    let mut nodes = BTreeMap::new();
    for pid in pids {
        let cfg = OmniPaxosConfig {
            cluster_config: ClusterConfig { configuration_id: 1, nodes: pids.to_vec(), ..Default::default() },
            server_config: ServerConfig { pid, ..Default::default() },
        };
        nodes.insert(pid, cfg.build(MemoryStorage::default()).unwrap());
    }
    let mut c = Cluster { nodes, held: Vec::new(), step: 0, quiet: true };
    let from_or_to_1 = |m: &Message<Cmd>| m.get_sender() == 1 || m.get_receiver() == 1;

    println!("# Leader change with a slow link to node 2\n");
    println!("Five servers (pids 1-5), `MemoryStorage`, default config, no `tick()`; leaders are chosen");
    println!("with `try_become_leader()`. Last column: `get_decided_idx()` of nodes 1 2 3 4 5 after");
    println!("the delivery.\n");
    println!("BLE messages are delivered but not listed.\n");
    println!("| # | message | decided 1 2 3 4 5 |");
    println!("|---|---|---|");
    println!("| | **node 1: try_become_leader()** | |");
    c.nodes.get_mut(&1).unwrap().try_become_leader();
    c.run(|_| Fate::Deliver);
    c.quiet = false;
    c.step = 0;
    println!("| | (round n=1 established: all five promised and accepted node 1's AcceptSync; decided 0 0 0 0 0) | |");
    println!("| | **node 1: append Cmd(1), Cmd(2), Cmd(3)** | |");
    for i in 1..=3 {
        c.nodes.get_mut(&1).unwrap().append(Cmd(i)).unwrap();
    }
    c.run(|m| match (kind(m), m.get_receiver()) {
        ("AcceptDecide", 4) | ("AcceptDecide", 5) => Fate::Drop,
        ("Decide", r) if r != 2 => Fate::Drop,
        _ => Fate::Deliver,
    });
    println!("| | **node 1 crashes; node 4: try_become_leader()** | |");
    c.nodes.get_mut(&4).unwrap().try_become_leader();
    c.run(|m| {
        if from_or_to_1(m) {
            Fate::Drop
        } else if (kind(m) == "Prepare" && m.get_receiver() == 2) || kind(m) == "AcceptSync" {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    c.release(|m| kind(m) == "Prepare" && m.get_receiver() == 2);
    c.run(|m| {
        if from_or_to_1(m) {
            Fate::Drop
        } else if kind(m) == "AcceptSync" && m.get_receiver() != 2 {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    c.release(|_| true);
    c.run(|m| if from_or_to_1(m) { Fate::Drop } else { Fate::Deliver });
}
