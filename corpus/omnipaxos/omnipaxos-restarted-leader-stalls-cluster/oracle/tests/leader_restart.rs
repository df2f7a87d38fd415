//! A leader that crashes and is restarted from its own persistent storage must not leave the
//! cluster without a working leader.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::Message;
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
        Cluster { disks, nodes }
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

    fn tick_all(&mut self) {
        for pid in PIDS {
            self.node(pid).tick();
        }
        self.exchange(&|_| true);
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

#[test]
fn cluster_keeps_deciding_after_leader_restart() {
    let mut c = Cluster::new();
    for _ in 0..10_000 {
        if c.nodes.values().all(|n| n.get_current_leader() == Some(1)) {
            break;
        }
        c.tick_all();
    }
    assert!(c.nodes.values().all(|n| n.get_current_leader() == Some(1)));
    c.node(1).append(Cmd(1)).unwrap();
    c.exchange(&|_| true);
    assert_eq!(c.decided(2), vec![Cmd(1)]);

    // The leader crashes and is restarted right away on its own storage.
    c.restart(1);
    for _ in 0..50 {
        c.tick_all();
    }
    c.node(2).append(Cmd(2)).unwrap();
    for _ in 0..2000 {
        c.tick_all();
    }
    for pid in PIDS {
        assert_eq!(
            c.decided(pid),
            vec![Cmd(1), Cmd(2)],
            "node {} (leader {:?}) does not hold both commands as decided",
            pid,
            c.nodes[&pid].get_current_leader()
        );
    }
}
