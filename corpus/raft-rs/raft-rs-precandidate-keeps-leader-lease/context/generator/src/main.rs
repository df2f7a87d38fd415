//! Prints ../prevote-trace.md: the oracle's run for three nodes (pre_vote and check_quorum on)
//! with no shuffling: node 1 leads and is cut off; node 3, then node 2, campaign. Prints the
//! messages between the survivors, raft's own log lines and the nodes' state.

#[path = "../../../oracle/tests/prevote_check_quorum.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;

use raft::eraftpb::Message;
use scenario::{Event, Params};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keeps raft's own log lines (info and above) so they can be printed after each step.
struct Capture;
impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            LINES.lock().unwrap().push(format!("{}", r.args()));
        }
    }
    fn flush(&self) {}
}
static LOGGER: Capture = Capture;

/// Prints the captured log lines that name one of `nodes`, and forgets all captured lines.
fn dump_log(nodes: &[u64]) {
    let names: Vec<String> = nodes.iter().map(|id| format!("node {}", id)).collect();
    for l in std::mem::take(&mut *LINES.lock().unwrap()) {
        if names.iter().any(|n| l.contains(n.as_str())) {
            println!("    {}", l);
        }
    }
}

fn message(m: &Message, lost: bool) {
    println!(
        "- {} -> {}: {:?}(term={}, log_term={}, index={}){}",
        m.get_from(),
        m.get_to(),
        m.get_msg_type(),
        m.get_term(),
        m.get_log_term(),
        m.get_index(),
        if lost { " (lost)" } else { "" }
    );
}

/// Prints the first round of campaigns step by step; the rest of the run is summed up by main.
struct Printer {
    leader: u64,
    survivors: Vec<u64>,
    reports: usize,
    campaigns: usize,
}

impl Printer {
    fn tracing(&self) -> bool {
        self.campaigns >= 1 && self.campaigns <= self.survivors.len()
    }

    fn see(&mut self, e: Event) {
        match e {
            Event::Roles(nodes) => {
                self.reports += 1;
                if self.reports == 1 {
                    LINES.lock().unwrap().clear();
                    println!("# Pre-vote election after the leader is cut off\n");
                    println!("raft 0.3.0, three `RawNode`s on in-memory storage, `Config` with pre_vote = true,");
                    println!("check_quorum = true, election_tick = 10, heartbeat_tick = 1. Ready is persisted and its");
                    println!("messages delivered until nothing is left; messages to or from a cut-off node are lost.\n");
                    println!("1. `campaign()` on node {}; it becomes leader.\n", self.leader);
                    for (id, n) in nodes {
                        let r = &n.raft;
                        println!("   - node {}: state={:?}, term={}, vote={}", id, r.state, r.term, r.vote);
                    }
                } else if self.tracing() {
                    println!("\n   raft log:\n");
                    dump_log(&self.survivors);
                    if self.campaigns == self.survivors.len() {
                        println!("\n## State after step {}\n", self.campaigns + 1);
                        for (id, n) in nodes.iter().filter(|(id, _)| self.survivors.contains(id)) {
                            let r = &n.raft;
                            println!("- node {}: state={:?}, term={}, vote={}", id, r.state, r.term, r.vote);
                        }
                    }
                }
            }
            Event::Campaign(id) => {
                self.campaigns += 1;
                if self.campaigns == 1 {
                    println!("\n2. Every link of node {} goes down. `campaign()` on node {}:\n", self.leader, id);
                } else if self.tracing() {
                    println!("\n{}. `campaign()` on node {}:\n", self.campaigns + 1, id);
                }
            }
            Event::Sent(m) if self.tracing() => message(m, false),
            Event::Lost(m) if self.tracing() => message(m, true),
            Event::Sent(_) | Event::Lost(_) | Event::Note(_) => {}
        }
    }
}

fn main() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let p = Params {
        ids: vec![1, 2, 3],
        leader: 1,
        disruptor: None,
        entries: 0,
        campaigns: vec![3, 2],
        net_seed: 0,
        shuffle: false,
    };
    let mut printer = Printer { leader: p.leader, survivors: p.campaigns.clone(), reports: 0, campaigns: 0 };
    let o = scenario::run(&p, &mut |e| printer.see(e));
    let order: Vec<String> = p.campaigns.iter().map(|id| format!("node {}", id)).collect();
    println!("\n## After a second round of `campaign()` ({}; not listed)\n", order.join(", then "));
    match o.elected {
        Some((id, term)) => println!("- node {} is leader at term {}", id, term),
        None => println!("- no leader: {:?}", o.roles),
    }
}
