//! A node's decided index must never go down, whatever order the messages of a leader change
//! arrive in.

use std::collections::BTreeMap;

use omnipaxos::messages::sequence_paxos::PaxosMsg;
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

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Fate {
    Deliver,
    Drop,
    Hold,
}

pub fn kind(m: &Message<Cmd>) -> &'static str {
    match m {
        Message::SequencePaxos(p) => match &p.msg {
            PaxosMsg::PrepareReq(_) => "PrepareReq",
            PaxosMsg::Prepare(_) => "Prepare",
            PaxosMsg::Promise(_) => "Promise",
            PaxosMsg::AcceptSync(_) => "AcceptSync",
            PaxosMsg::AcceptDecide(_) => "AcceptDecide",
            PaxosMsg::Accepted(_) => "Accepted",
            PaxosMsg::NotAccepted(_) => "NotAccepted",
            PaxosMsg::Decide(_) => "Decide",
            PaxosMsg::ProposalForward(_) => "ProposalForward",
            PaxosMsg::Compaction(_) => "Compaction",
            PaxosMsg::AcceptStopSign(_) => "AcceptStopSign",
            PaxosMsg::ForwardStopSign(_) => "ForwardStopSign",
        },
        _ => "BLE",
    }
}

/// The points of the scenario an observer is told about.
pub enum Step {
    /// Node 1 is about to become leader.
    Start,
    /// The common prefix is decided everywhere; node 1 appends three more commands.
    Prefix,
    /// Node 1 has crashed; node 4 is about to take over.
    Crash,
}

/// Sees the scenario's steps, the fate of every message sent, and every delivery.
pub trait Observer {
    fn step(&mut self, _step: Step) {}
    fn sent(&mut self, _m: &Message<Cmd>, _fate: Fate) {}
    /// `released`: the message was held back and arrives now.
    fn delivering(&mut self, _m: &Message<Cmd>, _released: bool) {}
    fn delivered(&mut self, _to: NodeId, _nodes: &BTreeMap<NodeId, Node>) {}
}

/// Checks after every delivery that the receiver's decided index did not go down.
#[derive(Default)]
pub struct Monotone {
    /// Highest decided index each node has reported so far.
    high_water: BTreeMap<NodeId, usize>,
    what: String,
}

impl Observer for Monotone {
    fn delivering(&mut self, m: &Message<Cmd>, _released: bool) {
        self.what = format!("{} {} -> {}", kind(m), m.get_sender(), m.get_receiver());
    }

    fn delivered(&mut self, to: NodeId, nodes: &BTreeMap<NodeId, Node>) {
        let now = nodes[&to].get_decided_idx();
        let before = self.high_water.get(&to).copied().unwrap_or(0);
        assert!(
            now >= before,
            "node {} reported decided index {} and then {} after handling {}",
            to,
            before,
            now,
            self.what
        );
        self.high_water.insert(to, now);
    }
}

pub struct Cluster<'o> {
    pub nodes: BTreeMap<NodeId, Node>,
    held: Vec<Message<Cmd>>,
    obs: &'o mut dyn Observer,
}

impl<'o> Cluster<'o> {
    fn new(pids: &[NodeId], obs: &'o mut dyn Observer) -> Self {
        let mut nodes = BTreeMap::new();
        for &pid in pids {
            let config = OmniPaxosConfig {
                cluster_config: ClusterConfig {
                    configuration_id: 1,
                    nodes: pids.to_vec(),
                    ..Default::default()
                },
                server_config: ServerConfig { pid, ..Default::default() },
            };
            nodes.insert(pid, config.build(MemoryStorage::default()).expect("valid config"));
        }
        Cluster { nodes, held: Vec::new(), obs }
    }

    fn node(&mut self, pid: NodeId) -> &mut Node {
        self.nodes.get_mut(&pid).unwrap()
    }

    fn deliver(&mut self, m: Message<Cmd>, released: bool) {
        let to = m.get_receiver();
        self.obs.delivering(&m, released);
        self.node(to).handle_incoming(m);
        self.obs.delivered(to, &self.nodes);
    }

    /// Exchanges messages until no node has anything to send; `fate` decides, per message,
    /// whether it is delivered, lost, or kept aside for later.
    fn run(&mut self, fate: impl Fn(&Message<Cmd>) -> Fate) {
        for _ in 0..1000 {
            let mut out = Vec::new();
            for node in self.nodes.values_mut() {
                node.take_outgoing_messages(&mut out);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                let f = fate(&m);
                self.obs.sent(&m, f);
                match f {
                    Fate::Deliver => self.deliver(m, false),
                    Fate::Drop => {}
                    Fate::Hold => self.held.push(m),
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn release(&mut self, pick: impl Fn(&Message<Cmd>) -> bool) {
        let (now, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held).into_iter().partition(|m| pick(m));
        self.held = keep;
        for m in now {
            self.deliver(m, true);
        }
    }
}

fn is(m: &Message<Cmd>, k: &str, from: NodeId, to: NodeId) -> bool {
    kind(m) == k && m.get_sender() == from && m.get_receiver() == to
}

/// Node 1 leads; `known` commands are decided everywhere, then three more only on nodes 1-3
/// and known as decided on node 2 alone; node 4 takes over with node 2's Promise late, and
/// completes its round.
pub fn leader_change_with_late_promise(known: u64, obs: &mut dyn Observer) -> Cluster<'_> {
    let mut c = Cluster::new(&[1, 2, 3, 4, 5], obs);
    let total = known as usize + 3;

    c.obs.step(Step::Start);
    c.node(1).try_become_leader();
    c.run(|_| Fate::Deliver);
    for i in 1..=known {
        c.node(1).append(Cmd(i)).expect("append on leader");
    }
    c.run(|_| Fate::Deliver);
    let known_everywhere = known as usize;
    for pid in [1, 2, 3, 4, 5] {
        assert_eq!(c.nodes[&pid].get_decided_idx(), known_everywhere, "node {} decided the common prefix", pid);
    }
    c.obs.step(Step::Prefix);
    for i in 1..=3 {
        c.node(1).append(Cmd(i)).expect("append on leader");
    }
    // Only nodes 2 and 3 get the entries; only node 2 learns they are decided.
    c.run(|m| match (kind(m), m.get_receiver()) {
        ("AcceptDecide", 4) | ("AcceptDecide", 5) => Fate::Drop,
        ("Decide", r) if r != 2 => Fate::Drop,
        _ => Fate::Deliver,
    });
    assert_eq!(c.nodes[&1].get_decided_idx(), total, "leader decided the three commands");
    assert_eq!(c.nodes[&2].get_decided_idx(), total, "node 2 learned the decision");
    assert_eq!(c.nodes[&3].get_decided_idx(), known_everywhere, "node 3 did not learn the decision");

    // Node 1 crashes. Node 4 takes over; its Prepare to node 2 is slow, and its AcceptSyncs to
    // the nodes that promised first are slow too.
    c.obs.step(Step::Crash);
    c.node(4).try_become_leader();
    c.run(|m| {
        if m.get_sender() == 1 || m.get_receiver() == 1 {
            Fate::Drop
        } else if is(m, "Prepare", 4, 2) || kind(m) == "AcceptSync" {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    // The late Prepare reaches node 2; its Promise and the resulting AcceptSync are delivered.
    c.release(|m| is(m, "Prepare", 4, 2));
    c.run(|m| {
        if m.get_sender() == 1 || m.get_receiver() == 1 {
            Fate::Drop
        } else if kind(m) == "AcceptSync" && m.get_receiver() != 2 {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    // Everything else arrives; the new leader finishes the round.
    c.release(|_| true);
    c.run(|m| if m.get_sender() == 1 || m.get_receiver() == 1 { Fate::Drop } else { Fate::Deliver });
    c
}

/// After the leader change: the new leader keeps deciding, and every live node holds its
/// decided log.
fn keeps_deciding(mut c: Cluster, known: u64) {
    let total = known as usize + 3;
    c.node(4).append(Cmd(200)).expect("append on the new leader");
    c.run(|m| if m.get_sender() == 1 || m.get_receiver() == 1 { Fate::Drop } else { Fate::Deliver });
    let reference: Vec<String> = decided_log(&c, 4);
    assert_eq!(reference.len(), total + 1, "the new leader's decided log: {:?}", reference);
    for pid in [2, 3, 5] {
        assert_eq!(decided_log(&c, pid), reference, "node {} does not hold the leader's decided log", pid);
    }
}

fn decided_log(c: &Cluster, pid: NodeId) -> Vec<String> {
    c.nodes[&pid]
        .read_decided_suffix(0)
        .unwrap_or_default()
        .into_iter()
        .map(|e| format!("{:?}", e))
        .collect()
}

#[test]
fn decided_index_never_goes_backwards_across_leader_change() {
    let mut obs = Monotone::default();
    keeps_deciding(leader_change_with_late_promise(0, &mut obs), 0);
}

#[test]
fn decided_index_never_goes_backwards_when_the_new_leader_knows_a_prefix() {
    let mut obs = Monotone::default();
    keeps_deciding(leader_change_with_late_promise(2, &mut obs), 2);
}
