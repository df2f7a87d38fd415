//! Prints ../leader-change-trace.md: the oracle's run with a fixed three-server schedule and no
//! shuffling (node 1 leads, node 3 misses two commands, node 1 crashes, node 2 takes over),
//! listing the Sequence Paxos messages after the crash and each survivor's log.

#[path = "../../../oracle/tests/sync_short_follower.rs"]
#[allow(dead_code)]
mod scenario;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::util::NodeId;
use scenario::{Cluster, Cmd, Observer, Params, Step};

/// A ballot as `round.pid`.
fn b(x: &Ballot) -> String {
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

fn log(c: &Cluster, pid: NodeId) -> String {
    let n = &c.nodes[&pid];
    let entries: Vec<String> = (0..5).filter_map(|i| n.read(i).map(|e| format!("{}: {:?}", i, e))).collect();
    format!("node {}: get_decided_idx() = {}, read(0..5) = [{}]", pid, n.get_decided_idx(), entries.join(", "))
}

/// Prints the Sequence Paxos messages from the crash on, and a heading per step.
#[derive(Default)]
struct Printer {
    trace: bool,
}

impl Observer for Printer {
    fn message(&mut self, m: &Message<Cmd>) {
        if self.trace {
            if let Some(d) = describe(m) {
                println!("- {}", d);
            }
        }
    }

    fn step(&mut self, c: &Cluster, step: Step) {
        match step {
            Step::Elected => {
                println!("# Leader change in a three-node cluster\n");
                println!("omnipaxos 0.2.0, `MemoryStorage`, leader priorities 1:30, 2:20, 3:10; `tick()` drives");
                println!("BLE (its messages are delivered but not listed). Ballots are shown as `round.pid`; log");
                println!("indexes start at 0.\n");
                println!(
                    "1. Node 1 is leader (ballot {}). `append(Cmd(1))` reaches nodes 2 and 3 and is decided.",
                    b(&c.nodes[&1].get_current_leader_ballot().unwrap())
                );
            }
            Step::Missed => {
                println!("2. `append(Cmd(2))`, `append(Cmd(3))`: every message to or from node 3 is lost; node 2");
                println!("   accepts both, node 1 decides them (decided index {}).", c.nodes[&1].get_decided_idx());
            }
            Step::Crashed => {
                println!("3. Node 1 crashes. Nodes 2 and 3 keep ticking; node 2 is elected. Messages from then on:\n");
                self.trace = true;
            }
            Step::Appended => println!("\n4. `append(Cmd(4))` on node 2, then 200 more ticks:\n"),
            Step::End => {
                println!("\n## State at the end\n");
                println!("- {}", log(c, 2));
                println!("- {}", log(c, 3));
            }
        }
    }
}

fn main() {
    let p = Params {
        priorities: vec![(1, 30), (2, 20), (3, 10)],
        short: vec![3],
        common: 1,
        missed: 2,
        after: 1,
        net_seed: 0,
        shuffle: false,
    };
    scenario::run(&p, &mut Printer::default());
}
