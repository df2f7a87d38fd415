//! Three in-process OmniPaxos 0.2.1 servers with a hand-driven network (BLE via `tick()`), each
//! on a storage that survives a restart. Node 1 leads, crashes and is rebuilt on its storage.
//! Prints the Sequence Paxos messages afterwards and each node's state (Markdown, on stdout).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::Message;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::storage::{Entry, NoSnapshot, StopSign, Storage, StorageResult};
use omnipaxos::util::{LogEntry, NodeId};
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;

#[derive(Clone, Debug, PartialEq)]
struct Cmd(u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

/// A storage that outlives the server using it, as a disk would.
#[derive(Clone, Default)]
struct Disk(Rc<RefCell<MemoryStorage<Cmd>>>);

impl Storage<Cmd> for Disk {
    fn append_entry(&mut self, entry: Cmd) -> StorageResult<u64> {
        self.0.borrow_mut().append_entry(entry)
    }
    fn append_entries(&mut self, entries: Vec<Cmd>) -> StorageResult<u64> {
        self.0.borrow_mut().append_entries(entries)
    }
    fn append_on_prefix(&mut self, from_idx: u64, entries: Vec<Cmd>) -> StorageResult<u64> {
        self.0.borrow_mut().append_on_prefix(from_idx, entries)
    }
    fn set_promise(&mut self, n_prom: Ballot) -> StorageResult<()> {
        self.0.borrow_mut().set_promise(n_prom)
    }
    fn set_decided_idx(&mut self, ld: u64) -> StorageResult<()> {
        self.0.borrow_mut().set_decided_idx(ld)
    }
    fn get_decided_idx(&self) -> StorageResult<u64> {
        self.0.borrow().get_decided_idx()
    }
    fn set_accepted_round(&mut self, na: Ballot) -> StorageResult<()> {
        self.0.borrow_mut().set_accepted_round(na)
    }
    fn get_accepted_round(&self) -> StorageResult<Option<Ballot>> {
        self.0.borrow().get_accepted_round()
    }
    fn get_entries(&self, from: u64, to: u64) -> StorageResult<Vec<Cmd>> {
        self.0.borrow().get_entries(from, to)
    }
    fn get_log_len(&self) -> StorageResult<u64> {
        self.0.borrow().get_log_len()
    }
    fn get_suffix(&self, from: u64) -> StorageResult<Vec<Cmd>> {
        self.0.borrow().get_suffix(from)
    }
    fn get_promise(&self) -> StorageResult<Option<Ballot>> {
        self.0.borrow().get_promise()
    }
    fn set_stopsign(&mut self, s: Option<StopSign>) -> StorageResult<()> {
        self.0.borrow_mut().set_stopsign(s)
    }
    fn get_stopsign(&self) -> StorageResult<Option<StopSign>> {
        self.0.borrow().get_stopsign()
    }
    fn trim(&mut self, idx: u64) -> StorageResult<()> {
        self.0.borrow_mut().trim(idx)
    }
    fn set_compacted_idx(&mut self, idx: u64) -> StorageResult<()> {
        self.0.borrow_mut().set_compacted_idx(idx)
    }
    fn get_compacted_idx(&self) -> StorageResult<u64> {
        self.0.borrow().get_compacted_idx()
    }
    fn set_snapshot(&mut self, snapshot: Option<NoSnapshot>) -> StorageResult<()> {
        self.0.borrow_mut().set_snapshot(snapshot)
    }
    fn get_snapshot(&self) -> StorageResult<Option<NoSnapshot>> {
        self.0.borrow().get_snapshot()
    }
}

type Node = OmniPaxos<Cmd, Disk>;
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

const PIDS: [NodeId; 3] = [1, 2, 3];

fn config(pid: NodeId) -> OmniPaxosConfig {
    let priority = match pid {
        1 => 30,
        2 => 20,
        _ => 10,
    };
    OmniPaxosConfig {
        cluster_config: ClusterConfig {
            configuration_id: 1,
            nodes: PIDS.to_vec(),
            ..Default::default()
        },
        server_config: ServerConfig {
            pid,
            leader_priority: priority,
            ..Default::default()
        },
    }
}

struct Cluster {
    log: Vec<(u32, String)>,
    disks: BTreeMap<NodeId, Disk>,
    nodes: BTreeMap<NodeId, Node>,
}

impl Cluster {
    fn new() -> Self {
        let mut disks = BTreeMap::new();
        let mut nodes = BTreeMap::new();
        for pid in PIDS {
            let disk = Disk::default();
            nodes.insert(pid, config(pid).build(disk.clone()).expect("valid config"));
            disks.insert(pid, disk);
        }
        Cluster { log: Vec::new(), disks, nodes }
    }

    /// The server `pid` crashes; its messages in flight are lost. It comes back on its own disk.
    fn restart(&mut self, pid: NodeId) {
        let disk = self.disks[&pid].clone();
        let old = self.nodes.remove(&pid).unwrap();
        drop(old);
        self.nodes.insert(pid, config(pid).build(disk).expect("valid config"));
    }

    fn node(&mut self, pid: NodeId) -> &mut Node {
        self.nodes.get_mut(&pid).unwrap()
    }

    fn exchange(&mut self, keep: Filter, trace: Option<u32>) {
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
                    if let Some(r) = trace {
                        if let Some(d) = describe(&m) {
                            self.log.push((r, d));
                        }
                    }
                    let to = m.get_receiver();
                    self.node(to).handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick_all(&mut self, trace: bool, round: u32) {
        for pid in PIDS {
            self.node(pid).tick();
        }
        self.exchange(&|_| true, if trace { Some(round) } else { None });
    }

    /// Prints the recorded messages, grouping a message that repeats.
    fn flush_log(&mut self) {
        let log = std::mem::take(&mut self.log);
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, d) in log {
            match groups.iter_mut().find(|(g, _)| *g == d) {
                Some((_, rounds)) => rounds.push(r),
                None => groups.push((d, vec![r])),
            }
        }
        for (d, rounds) in groups {
            if rounds.len() == 1 {
                println!("- round {}: {}", rounds[0], d);
            } else {
                println!(
                    "- rounds {}, {}, ..., {} ({} times): {}",
                    rounds[0], rounds[1], rounds[rounds.len() - 1], rounds.len(), d
                );
            }
        }
    }

    fn decided(&self, pid: NodeId) -> Vec<Cmd> {
        let n = &self.nodes[&pid];
        (0..n.get_decided_idx())
            .filter_map(|i| match n.read(i) {
                Some(LogEntry::Decided(c)) => Some(c),
                _ => None,
            })
            .collect()
    }
}


fn b(x: &Ballot) -> String {
    format!("{}.{}", x.n, x.pid)
}

fn describe(m: &Message<Cmd>) -> Option<String> {
    let body = match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::Prepare(x) => format!("Prepare(n={}, decided_idx={}, accepted_idx={})", b(&x.n), x.decided_idx, x.accepted_idx),
            PaxosMsg::Promise(x) => format!("Promise(n={}, n_accepted={}, decided_idx={}, accepted_idx={})", b(&x.n), b(&x.n_accepted), x.decided_idx, x.accepted_idx),
            PaxosMsg::AcceptSync(x) => format!("AcceptSync(n={}, sync_idx={}, decided_idx={})", b(&x.n), x.sync_idx, x.decided_idx),
            PaxosMsg::AcceptDecide(x) => format!("AcceptDecide(n={}, decided_idx={}, entries={:?})", b(&x.n), x.decided_idx, x.entries),
            PaxosMsg::Accepted(x) => format!("Accepted(n={}, accepted_idx={})", b(&x.n), x.accepted_idx),
            PaxosMsg::Decide(x) => format!("Decide(n={}, decided_idx={})", b(&x.n), x.decided_idx),
            PaxosMsg::PrepareReq => "PrepareReq".to_string(),
            other => format!("{:?}", other),
        },
        Message::BLE(_) => return None,
    };
    Some(format!("{} -> {}: {}", m.get_sender(), m.get_receiver(), body))
}

fn main() {
    let mut c = Cluster::new();
    while !c.nodes.values().all(|n| n.get_current_leader() == Some(1)) {
        c.tick_all(false, 0);
    }
    println!("# Leader restart in a three-node cluster\n");
    println!("omnipaxos 0.2.1; each server's `MemoryStorage` is kept across a restart (a shared handle");
    println!("implementing `Storage`). Leader priorities 1:30, 2:20, 3:10, default `ServerConfig`. Each");
    println!("round, every server gets one `tick()` and then all messages are delivered. BLE messages are");
    println!("delivered but not listed. Ballots are `round.pid`.\n");
    println!("1. Node 1 is leader (ballot {}); `append(Cmd(1))` is decided on all three.", b(&c.nodes[&1].get_current_leader_ballot().unwrap()));
    c.node(1).append(Cmd(1)).unwrap();
    c.exchange(&|_| true, None);
    println!("2. Node 1's process is killed and a new server is built for pid 1 on the same storage");
    println!("   (same config). Rounds 1-50, Sequence Paxos messages:\n");
    c.restart(1);
    let mut round = 0;
    for _ in 0..50 {
        round += 1;
        c.tick_all(true, round);
    }
    c.flush_log();
    println!("\n3. Round 51: `append(Cmd(2))` on node 2, then rounds 51-2000:\n");
    c.node(2).append(Cmd(2)).unwrap();
    for _ in 0..1950 {
        round += 1;
        c.tick_all(true, round);
    }
    c.flush_log();
    println!("\n## State after round 2000\n");
    for pid in PIDS {
        let n = &c.nodes[&pid];
        println!(
            "- node {}: get_current_leader_ballot() = {}, get_decided_idx() = {}, decided = {:?}",
            pid,
            n.get_current_leader_ballot().map(|x| b(&x)).unwrap_or_else(|| "None".into()),
            n.get_decided_idx(),
            c.decided(pid)
        );
    }
}
