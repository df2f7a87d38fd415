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
pub struct Cmd(pub u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

/// A storage that outlives the server using it, as a disk would.
#[derive(Clone, Default)]
pub struct Disk(Rc<RefCell<MemoryStorage<Cmd>>>);

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

pub type Node = OmniPaxos<Cmd, Disk>;
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

pub const PIDS: [NodeId; 3] = [1, 2, 3];
/// Rounds of ticks between the restart and the next proposal.
pub const SETTLE_ROUNDS: u32 = 50;
/// Rounds of ticks after the next proposal.
pub const RUN_ROUNDS: u32 = 2000;

/// The points of the scenario an observer is told about.
pub enum Step {
    /// The leader is elected everywhere; next it appends one command.
    Elected,
    /// The leader has just been restarted on its own storage.
    Restarted,
    /// Another server is about to append the next command.
    Propose,
    /// The scenario is over.
    End,
}

/// Sees the scenario's steps, every round of ticks and every message delivered.
pub trait Observer {
    fn step(&mut self, _c: &Cluster, _step: Step) {}
    fn round(&mut self) {}
    fn message(&mut self, _m: &Message<Cmd>) {}
}

impl Observer for () {}

/// `leader` gets the highest priority (30), so it is elected first; the others get 20 and 10 in
/// pid order.
pub fn config(pid: NodeId, leader: NodeId) -> OmniPaxosConfig {
    let first_other = PIDS.iter().copied().find(|&p| p != leader);
    let priority = if pid == leader {
        30
    } else if Some(pid) == first_other {
        20
    } else {
        10
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

pub struct Cluster {
    pub leader: NodeId,
    disks: BTreeMap<NodeId, Disk>,
    pub nodes: BTreeMap<NodeId, Node>,
}

impl Cluster {
    fn new(leader: NodeId) -> Self {
        let mut disks = BTreeMap::new();
        let mut nodes = BTreeMap::new();
        for pid in PIDS {
            let disk = Disk::default();
            nodes.insert(pid, config(pid, leader).build(disk.clone()).expect("valid config"));
            disks.insert(pid, disk);
        }
        Cluster { leader, disks, nodes }
    }

    /// The server `pid` crashes; its messages in flight are lost. It comes back on its own disk.
    fn restart(&mut self, pid: NodeId) {
        let disk = self.disks[&pid].clone();
        let old = self.nodes.remove(&pid).unwrap();
        drop(old);
        self.nodes.insert(pid, config(pid, self.leader).build(disk).expect("valid config"));
    }

    fn node(&mut self, pid: NodeId) -> &mut Node {
        self.nodes.get_mut(&pid).unwrap()
    }

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
                if keep(&m) {
                    obs.message(&m);
                    let to = m.get_receiver();
                    self.node(to).handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick_all(&mut self, obs: &mut dyn Observer) {
        obs.round();
        for pid in PIDS {
            self.node(pid).tick();
        }
        self.exchange(&|_| true, obs);
    }

    pub fn decided(&self, pid: NodeId) -> Vec<Cmd> {
        let n = &self.nodes[&pid];
        (0..n.get_decided_idx())
            .filter_map(|i| match n.read(i) {
                Some(LogEntry::Decided(c)) => Some(c),
                _ => None,
            })
            .collect()
    }
}

/// `leader` is elected and decides `Cmd(1)`, crashes and is restarted right away on its own
/// storage; after `SETTLE_ROUNDS` rounds `other` appends `Cmd(2)`, then `RUN_ROUNDS` rounds follow.
pub fn leader_restart(leader: NodeId, other: NodeId, obs: &mut dyn Observer) -> Cluster {
    let mut c = Cluster::new(leader);
    for _ in 0..10_000 {
        if c.nodes.values().all(|n| n.get_current_leader() == Some(leader)) {
            break;
        }
        c.tick_all(&mut ());
    }
    assert!(c.nodes.values().all(|n| n.get_current_leader() == Some(leader)));
    obs.step(&c, Step::Elected);
    c.node(leader).append(Cmd(1)).unwrap();
    c.exchange(&|_| true, &mut ());
    assert_eq!(c.decided(other), vec![Cmd(1)]);

    c.restart(leader);
    obs.step(&c, Step::Restarted);
    for _ in 0..SETTLE_ROUNDS {
        c.tick_all(obs);
    }
    obs.step(&c, Step::Propose);
    c.node(other).append(Cmd(2)).unwrap();
    for _ in 0..RUN_ROUNDS {
        c.tick_all(obs);
    }
    obs.step(&c, Step::End);
    c
}

fn stays_live_after_leader_restart(leader: NodeId, other: NodeId) {
    let c = leader_restart(leader, other, &mut ());
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

#[test]
fn cluster_keeps_deciding_after_leader_restart() {
    stays_live_after_leader_restart(1, 2);
}

#[test]
fn cluster_keeps_deciding_after_restart_of_another_leader() {
    stays_live_after_leader_restart(3, 1);
}
