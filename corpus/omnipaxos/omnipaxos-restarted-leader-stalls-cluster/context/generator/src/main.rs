//! Prints ../restart-trace.md: the oracle's scenario with node 1 as the leader (three in-process
//! OmniPaxos 0.2.1 servers, each on a storage that survives a restart; node 1 leads, crashes and
//! is rebuilt on its storage), listing the Sequence Paxos messages afterwards and each node's state.

#[path = "../../../oracle/tests/leader_restart.rs"]
#[allow(dead_code)]
mod scenario;

use omnipaxos::ballot_leader_election::Ballot;
use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use scenario::{Cluster, Cmd, Observer, Step, PIDS, RUN_ROUNDS, SETTLE_ROUNDS};

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

/// Records the Sequence Paxos messages per round after the restart and prints them per step,
/// grouping a message that repeats.
#[derive(Default)]
struct Printer {
    trace: bool,
    round: u32,
    log: Vec<(u32, String)>,
}

impl Printer {
    fn flush(&mut self) {
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, d) in std::mem::take(&mut self.log) {
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
}

impl Observer for Printer {
    fn round(&mut self) {
        if self.trace {
            self.round += 1;
        }
    }

    fn message(&mut self, m: &Message<Cmd>) {
        if self.trace {
            if let Some(d) = describe(m) {
                self.log.push((self.round, d));
            }
        }
    }

    fn step(&mut self, c: &Cluster, step: Step) {
        match step {
            Step::Elected => {
                let prios: Vec<String> = PIDS
                    .iter()
                    .map(|&p| format!("{}:{}", p, scenario::config(p, c.leader).server_config.leader_priority))
                    .collect();
                println!("# Leader restart in a three-node cluster\n");
                println!("omnipaxos 0.2.1; each server's `MemoryStorage` is kept across a restart (a shared handle");
                println!("implementing `Storage`). Leader priorities {}, default `ServerConfig`. Each", prios.join(", "));
                println!("round, every server gets one `tick()` and then all messages are delivered. BLE messages are");
                println!("delivered but not listed. Ballots are `round.pid`.\n");
                println!(
                    "1. Node {} is leader (ballot {}); `append(Cmd(1))` is decided on all three.",
                    c.leader,
                    b(&c.nodes[&c.leader].get_current_leader_ballot().unwrap())
                );
            }
            Step::Restarted => {
                println!("2. Node {}'s process is killed and a new server is built for pid {} on the same storage", c.leader, c.leader);
                println!("   (same config). Rounds 1-{}, Sequence Paxos messages:\n", SETTLE_ROUNDS);
                self.trace = true;
            }
            Step::Propose => {
                self.flush();
                let first = SETTLE_ROUNDS + 1;
                println!(
                    "\n3. Round {}: `append(Cmd(2))` on node 2, then rounds {}-{}:\n",
                    first,
                    first,
                    SETTLE_ROUNDS + RUN_ROUNDS
                );
            }
            Step::End => {
                self.flush();
                println!("\n## State after round {}\n", self.round);
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
        }
    }
}

fn main() {
    scenario::leader_restart(1, 2, &mut Printer::default());
}
