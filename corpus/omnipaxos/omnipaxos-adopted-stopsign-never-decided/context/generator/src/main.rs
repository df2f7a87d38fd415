//! Prints ../reconfiguration-trace.md: the oracle's scenario (three in-process OmniPaxos 0.2.1
//! servers; node 1 proposes a new configuration, the followers' replies are lost and node 1
//! crashes) with the Sequence Paxos messages between the survivors and their state at the end.

#[path = "../../../oracle/tests/stopsign_after_leader_change.rs"]
#[allow(dead_code)]
mod scenario;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::storage::StopSign;
use omnipaxos::util::{LogEntry, NodeId};
use scenario::{Cluster, Cmd, Observer, Step};

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

fn state(c: &Cluster, pid: NodeId) -> String {
    let n = &c.nodes[&pid];
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

/// Prints the Sequence Paxos messages from the reconfiguration on (lost ones only while node 1
/// is still up) and a heading per step.
#[derive(Default)]
struct Printer {
    trace: bool,
    lost: bool,
    printed: usize,
    before_quiet: usize,
}

impl Observer for Printer {
    fn message(&mut self, m: &Message<Cmd>, delivered: bool) {
        if !self.trace {
            return;
        }
        if let Some(d) = describe(m) {
            if delivered {
                self.printed += 1;
                println!("- {}", d);
            } else if self.lost {
                println!("- {} (lost)", d);
            }
        }
    }

    fn step(&mut self, c: &Cluster, step: Step) {
        match step {
            Step::Elected => {
                println!("# Reconfiguration interrupted by a leader crash\n");
                println!("omnipaxos 0.2.1, `MemoryStorage`, three servers (configuration 1), leader priorities");
                println!("1:30, 2:20, 3:10; `tick()` drives BLE (its messages are delivered but not listed).");
                println!("Ballots are shown as `round.pid`; log indexes start at 0.\n");
                println!(
                    "1. Node 1 is leader (ballot {}). `append(Cmd(1))` is decided everywhere.",
                    b(&c.nodes[&1].get_current_leader_ballot().unwrap())
                );
            }
            Step::Reconfigure => {
                println!("2. `reconfigure(configuration 2, nodes [1, 2, 3])` on node 1:\n");
                self.trace = true;
                self.lost = true;
            }
            Step::Crashed => {
                self.lost = false;
                println!("\n3. Node 1 crashes. Nodes 2 and 3 keep ticking; node 2 is elected. Messages from then on:\n");
            }
            Step::NewLeader => {
                println!("\n4. 500 more ticks on nodes 2 and 3. Sequence Paxos messages:\n");
                self.before_quiet = self.printed;
            }
            Step::End => {
                if self.printed == self.before_quiet {
                    println!("- (none)");
                }
                println!();
                println!("## State at the end\n");
                println!("- {}", state(c, 2));
                println!("- {}", state(c, 3));
            }
        }
    }
}

fn main() {
    scenario::crash_during_reconfiguration(&mut Printer::default());
}
