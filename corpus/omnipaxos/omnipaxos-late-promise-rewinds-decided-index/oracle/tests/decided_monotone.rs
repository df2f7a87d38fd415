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
struct Cmd(u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Deliver,
    Drop,
    Hold,
}

fn kind(m: &Message<Cmd>) -> &'static str {
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

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
    held: Vec<Message<Cmd>>,
    /// Highest decided index each node has reported so far.
    high_water: BTreeMap<NodeId, usize>,
}

impl Cluster {
    fn new(pids: &[NodeId]) -> Self {
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
        let high_water = pids.iter().map(|&p| (p, 0)).collect();
        Cluster { nodes, held: Vec::new(), high_water }
    }

    fn node(&mut self, pid: NodeId) -> &mut Node {
        self.nodes.get_mut(&pid).unwrap()
    }

    fn deliver(&mut self, m: Message<Cmd>) {
        let to = m.get_receiver();
        let what = format!("{} {} -> {}", kind(&m), m.get_sender(), to);
        self.node(to).handle_incoming(m);
        let now = self.nodes[&to].get_decided_idx();
        let before = self.high_water[&to];
        assert!(
            now >= before,
            "node {} reported decided index {} and then {} after handling {}",
            to,
            before,
            now,
            what
        );
        self.high_water.insert(to, now);
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
                match fate(&m) {
                    Fate::Deliver => self.deliver(m),
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
            self.deliver(m);
        }
    }
}

fn is(m: &Message<Cmd>, k: &str, from: NodeId, to: NodeId) -> bool {
    kind(m) == k && m.get_sender() == from && m.get_receiver() == to
}

#[test]
fn decided_index_never_goes_backwards_across_leader_change() {
    let mut c = Cluster::new(&[1, 2, 3, 4, 5]);

    // Node 1 leads and replicates three commands.
    c.node(1).try_become_leader();
    c.run(|_| Fate::Deliver);
    for i in 1..=3 {
        c.node(1).append(Cmd(i)).expect("append on leader");
    }
    // Only nodes 2 and 3 get the entries; only node 2 learns they are decided.
    c.run(|m| match (kind(m), m.get_receiver()) {
        ("AcceptDecide", 4) | ("AcceptDecide", 5) => Fate::Drop,
        ("Decide", r) if r != 2 => Fate::Drop,
        _ => Fate::Deliver,
    });
    assert_eq!(c.nodes[&1].get_decided_idx(), 3, "leader decided the three commands");
    assert_eq!(c.nodes[&2].get_decided_idx(), 3, "node 2 learned the decision");
    assert_eq!(c.nodes[&3].get_decided_idx(), 0, "node 3 did not learn the decision");

    // Node 1 crashes. Node 4 takes over; its Prepare to node 2 is slow, and its AcceptSyncs to
    // the nodes that promised first are slow too.
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

    for pid in [2, 3, 4, 5] {
        assert_eq!(c.nodes[&pid].get_decided_idx(), 3, "node {} ends with the three commands decided", pid);
        let log: Vec<_> = c.nodes[&pid]
            .read_decided_suffix(0)
            .unwrap_or_default()
            .into_iter()
            .map(|e| format!("{:?}", e))
            .collect();
        assert_eq!(log.len(), 3, "node {} decided log: {:?}", pid, log);
    }
}
