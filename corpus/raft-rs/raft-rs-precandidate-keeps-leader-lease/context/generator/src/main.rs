//! Three in-process raft 0.3.0 `RawNode`s (pre_vote and check_quorum on) over a hand-driven
//! network. Node 1 leads and is cut off; node 3, then node 2, campaign. Prints the messages
//! between the survivors, raft's own log lines and the nodes' state (Markdown, on stdout).

use std::collections::BTreeMap;
use std::sync::Mutex;

use raft::eraftpb::{Message, MessageType};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption};

const IDS: [u64; 3] = [1, 2, 3];

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

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

fn config(id: u64) -> Config {
    Config {
        id,
        peers: IDS.to_vec(),
        learners: vec![],
        election_tick: 10,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        min_election_tick: 0,
        max_election_tick: 0,
        read_only_option: ReadOnlyOption::Safe,
        skip_bcast_commit: false,
        tag: format!("node {}", id),
    }
}

fn short(t: MessageType) -> String {
    format!("{:?}", t)
}

struct Cluster {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    isolated: Vec<u64>,
    trace: bool,
}

impl Cluster {
    fn settle(&mut self) {
        loop {
            let mut out: Vec<Message> = Vec::new();
            for node in self.nodes.values_mut() {
                if !node.has_ready() {
                    continue;
                }
                let mut rd = node.ready();
                if let Some(hs) = rd.hs.clone() {
                    node.mut_store().wl().set_hardstate(hs);
                }
                if !rd.entries.is_empty() {
                    node.mut_store().wl().append(&rd.entries).unwrap();
                }
                out.append(&mut rd.messages);
                node.advance(rd);
            }
            if out.is_empty() {
                return;
            }
            for m in out {
                let cut = self.isolated.contains(&m.get_from()) || self.isolated.contains(&m.get_to());
                if self.trace {
                    println!(
                        "- {} -> {}: {}(term={}, log_term={}, index={}){}",
                        m.get_from(),
                        m.get_to(),
                        short(m.get_msg_type()),
                        m.get_term(),
                        m.get_log_term(),
                        m.get_index(),
                        if cut { " (lost)" } else { "" }
                    );
                }
                if cut {
                    continue;
                }
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).unwrap();
            }
        }
    }

    fn state(&self, id: u64) -> String {
        let r = &self.nodes[&id].raft;
        format!(
            "node {}: state={:?}, term={}, vote={}",
            id, r.state, r.term, r.vote
        )
    }
}

fn dump_log(filter: &[&str]) {
    let lines = std::mem::take(&mut *LINES.lock().unwrap());
    for l in lines {
        if filter.iter().any(|f| l.contains(f)) {
            println!("    {}", l);
        }
    }
}

fn main() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let mut nodes = BTreeMap::new();
    for id in IDS {
        nodes.insert(id, RawNode::new(&config(id), MemStorage::new(), vec![]).unwrap());
    }
    let mut c = Cluster { nodes, isolated: vec![], trace: false };
    c.nodes.get_mut(&1).unwrap().campaign().unwrap();
    c.settle();
    LINES.lock().unwrap().clear();
    println!("# Pre-vote election after the leader is cut off\n");
    println!("raft 0.3.0, three `RawNode`s on in-memory storage, `Config` with pre_vote = true,");
    println!("check_quorum = true, election_tick = 10, heartbeat_tick = 1. Ready is persisted and its");
    println!("messages delivered until nothing is left; messages to or from a cut-off node are lost.\n");
    println!("1. `campaign()` on node 1; it becomes leader.\n");
    for id in IDS {
        println!("   - {}", c.state(id));
    }
    println!("\n2. Every link of node 1 goes down. `campaign()` on node 3:\n");
    c.isolated.push(1);
    c.trace = true;
    c.nodes.get_mut(&3).unwrap().campaign().unwrap();
    c.settle();
    println!("\n   raft log:\n");
    dump_log(&["node 2", "node 3"]);
    println!("\n3. `campaign()` on node 2:\n");
    c.nodes.get_mut(&2).unwrap().campaign().unwrap();
    c.settle();
    println!("\n   raft log:\n");
    dump_log(&["node 2", "node 3"]);
    println!("\n## State after step 3\n");
    for id in [2, 3] {
        println!("- {}", c.state(id));
    }
}
