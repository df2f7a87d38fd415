//! Prints ../leader-change-trace.md: the oracle's scenario with no common prefix (five in-process
//! OmniPaxos servers; node 1 leads and decides three commands, then crashes; node 4 takes over
//! while its Prepare to node 2 is delayed), listing every delivered Sequence Paxos message (BLE
//! traffic and the first round's set-up are not listed) and each node's decided index.

#[path = "../../../oracle/tests/decided_monotone.rs"]
#[allow(dead_code)]
mod scenario;

use std::collections::BTreeMap;

use omnipaxos::messages::sequence_paxos::PaxosMsg;
use omnipaxos::messages::Message;
use omnipaxos::util::NodeId;
use scenario::{Cmd, Fate, Node, Observer, Step};

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

/// Prints one table row per delivered message (from the appends on), lost and delayed ones
/// without a number.
#[derive(Default)]
struct Table {
    step: usize,
    loud: bool,
    line: String,
}

impl Observer for Table {
    fn step(&mut self, step: Step) {
        match step {
            Step::Start => {
                println!("# Leader change with a slow link to node 2\n");
                println!("Five servers (pids 1-5), `MemoryStorage`, default config, no `tick()`; leaders are chosen");
                println!("with `try_become_leader()`. Last column: `get_decided_idx()` of nodes 1 2 3 4 5 after");
                println!("the delivery.\n");
                println!("BLE messages are delivered but not listed.\n");
                println!("| # | message | decided 1 2 3 4 5 |");
                println!("|---|---|---|");
                println!("| | **node 1: try_become_leader()** | |");
            }
            Step::Prefix => {
                self.loud = true;
                self.step = 0;
                println!("| | (round n=1 established: all five promised and accepted node 1's AcceptSync; decided 0 0 0 0 0) | |");
                println!("| | **node 1: append Cmd(1), Cmd(2), Cmd(3)** | |");
            }
            Step::Crash => println!("| | **node 1 crashes; node 4: try_become_leader()** | |"),
        }
    }

    fn sent(&mut self, m: &Message<Cmd>, fate: Fate) {
        match fate {
            Fate::Deliver => {}
            Fate::Drop if matches!(m, Message::BLE(_)) => {}
            Fate::Drop => println!("| - | {} (lost) | |", describe(m)),
            Fate::Hold => println!("| - | {} (delayed) | |", describe(m)),
        }
    }

    fn delivering(&mut self, m: &Message<Cmd>, released: bool) {
        self.line = describe(m);
        if released {
            self.line += " (delayed, arrives now)";
        }
    }

    fn delivered(&mut self, _to: NodeId, nodes: &BTreeMap<NodeId, Node>) {
        self.step += 1;
        if !self.loud || self.line.ends_with("BLE") {
            return;
        }
        let d: Vec<String> = nodes.values().map(|n| n.get_decided_idx().to_string()).collect();
        println!("| {} | {} | {} |", self.step, self.line, d.join(" "));
    }
}

fn main() {
    scenario::leader_change_with_late_promise(0, &mut Table::default());
}
