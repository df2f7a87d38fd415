//! Prints ../read-index-trace.md: the oracle's run for a group of one voter (node 1) and one
//! learner (node 2) in which the learner asks for one read index, with no shuffling: the
//! messages and the read states each node's `Ready` carried while the read is served, then the
//! state after 100 ticks and the leader's next entry.

#[path = "../../../oracle/tests/learner_read_index.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{Event, Params};

/// Prints the trace of the read phase and counts the read states handed out afterwards.
#[derive(Default)]
struct Printer {
    trace: bool,
    reads_after: usize,
}

impl Printer {
    fn see(&mut self, e: Event) {
        match e {
            Event::Ready(nodes) => {
                println!("# Read index requested on a learner\n");
                println!("raft 0.4.2, `RawNode`s on in-memory storage: voter 1, learner 2 (`Config.peers = [1]`,");
                println!("`learners = [2]`), ReadOnlyOption::Safe. Each `Ready` is persisted, its read_states handed");
                println!("to the application and its messages delivered, until nothing is left.\n");
                for (id, n) in nodes {
                    let r = &n.raft;
                    println!(
                        "- node {}: state={:?}, term={}, leader_id={}, committed={}",
                        id, r.state, r.term, r.leader_id, r.raft_log.committed
                    );
                }
            }
            Event::Reading { node, ctx } => {
                println!(
                    "\n`read_index({:?})` on node {}, then everything is delivered:\n",
                    String::from_utf8_lossy(ctx),
                    node
                );
                self.trace = true;
            }
            Event::Sent(m) if self.trace => {
                let data: Vec<String> = m
                    .get_entries()
                    .iter()
                    .map(|e| format!("{:?}", String::from_utf8_lossy(e.get_data())))
                    .collect();
                println!(
                    "- {} -> {}: {:?}(term={}, index={}, commit={}, entries=[{}])",
                    m.get_from(),
                    m.get_to(),
                    m.get_msg_type(),
                    m.get_term(),
                    m.get_index(),
                    m.get_commit(),
                    data.join(", ")
                );
            }
            Event::Read { node, index, ctx } if self.trace => println!(
                "- node {} Ready.read_states: ReadState {{ index: {}, request_ctx: {:?} }}",
                node,
                index,
                String::from_utf8_lossy(ctx)
            ),
            Event::Read { .. } => self.reads_after += 1,
            Event::ReadsDone => {
                self.trace = false;
                println!("\nNothing else is sent. Then 100 `tick()`s on both nodes and one more entry proposed on node 1");
                println!("(messages delivered, not listed):\n");
            }
            Event::End(nodes) => {
                println!("- read states handed to either application since: {}", self.reads_after);
                for (id, n) in nodes {
                    let r = &n.raft;
                    println!("- node {}: state={:?}, term={}, committed={}", id, r.state, r.term, r.raft_log.committed);
                }
            }
            Event::Sent(_) => {}
        }
    }
}

fn main() {
    let p = Params { voter: 1, learners: vec![2], reads: vec![(2, 0)], net_seed: 0, shuffle: false };
    let mut printer = Printer::default();
    scenario::run(&p, &mut |e| printer.see(e));
}
