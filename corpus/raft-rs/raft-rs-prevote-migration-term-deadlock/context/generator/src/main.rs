//! Prints ../upgrade-trace.md: the oracle's reported run (three nodes; node 3 is cut off and runs
//! two elections without pre-vote, then restarts with pre-vote on while leader 1 is down), with
//! the node states at each step, the messages of the first election rounds after node 3 is back
//! and raft's own log lines for them.

#[path = "../../../oracle/tests/prevote_rolling_upgrade.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::Mutex;

use raft::eraftpb::Message;
use scenario::{Cluster, Event, Params};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keeps raft's own log lines (info and above).
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

fn take_lines() -> Vec<String> {
    std::mem::take(&mut *LINES.lock().unwrap())
}

fn message(m: &Message, lost: bool) -> String {
    format!(
        "{} -> {}: {:?} term={} log_term={} index={}{}{}",
        m.get_from(),
        m.get_to(),
        m.get_msg_type(),
        m.get_term(),
        m.get_log_term(),
        m.get_index(),
        if m.get_reject() { " reject" } else { "" },
        if lost { " (lost: node down)" } else { "" }
    )
}

fn nodes(c: &Cluster) {
    for &id in &c.ids {
        match c.raft(id) {
            None => println!("- node {}: down", id),
            Some(r) => println!(
                "- node {}: {:?}, term {}, vote {}, last log index {} (term {}), commit {}{}",
                id,
                r.state,
                r.term,
                r.vote,
                r.raft_log.last_index(),
                r.raft_log.last_term(),
                r.raft_log.committed,
                if c.cut.contains(&id) { ", cut off" } else { "" }
            ),
        }
    }
    println!();
}

struct Printer {
    step: usize,
    /// In the phase after node 3 came back.
    tracing: bool,
    ticks_traced: usize,
    tick_lines: Vec<String>,
    done_tracing: bool,
    /// Ticks with traffic printed so far.
    shown: usize,
}

impl Printer {
    fn see(&mut self, e: Event) {
        match e {
            Event::Note(n) => {
                self.step += 1;
                self.tracing = n.contains("restarts with pre_vote on");
                take_lines();
                println!("## {}. {}\n", self.step, n);
            }
            Event::Nodes(c) => {
                if self.tracing && self.ticks_traced > 0 && !self.done_tracing {
                    self.done_tracing = true;
                }
                if self.tracing && self.ticks_traced == 0 {
                    // The restart's own log lines.
                    take_lines();
                }
                if self.tracing && self.ticks_traced > 0 {
                    println!("State after {} ticks with node 3 back:\n", c.ticks - self.first_tick());
                }
                nodes(c);
            }
            Event::Delivered(m) | Event::Lost(m) if self.tracing && !self.done_tracing => {
                let lost = matches!(e, Event::Lost(_));
                self.tick_lines.push(format!("    {}", message(m, lost)));
            }
            Event::Tick(t) if self.tracing && !self.done_tracing => {
                if self.ticks_traced == 0 {
                    FIRST.lock().unwrap().replace(t - 1);
                }
                self.ticks_traced += 1;
                let logs: Vec<String> = take_lines()
                    .into_iter()
                    .filter(|l| !l.contains("became follower") || l.contains("node 2"))
                    .collect();
                if !self.tick_lines.is_empty() {
                    if self.shown < 2 {
                        println!("tick {} (after node 3 came back):\n", t - self.first_tick());
                        println!("  messages:\n");
                        for l in self.tick_lines.drain(..) {
                            println!("{}", l);
                        }
                        println!("\n  raft log:\n");
                        for l in logs {
                            println!("    {}", l);
                        }
                        println!();
                    }
                    self.shown += 1;
                }
                self.tick_lines.clear();
            }
            _ => {}
        }
    }

    fn first_tick(&self) -> usize {
        FIRST.lock().unwrap().unwrap_or(0)
    }
}

static FIRST: Mutex<Option<usize>> = Mutex::new(None);

fn main() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let p = Params::reported();
    println!("# Rolling upgrade to pre_vote: trace\n");
    println!("raft 0.2.0, three `RawNode`s on `MemStorage`, election_tick 10, heartbeat_tick 1,");
    println!("check_quorum off. Each Ready is persisted (entries, hard state) before its messages are");
    println!("sent; messages to or from a node that is down or cut off are lost. Nodes 1 and 2 run");
    println!("with pre_vote on; node 3 still runs the old config (pre_vote off).\n");
    let mut printer = Printer { step: 0, tracing: false, ticks_traced: 0, tick_lines: vec![], done_tracing: false, shown: 0 };
    let result = scenario::run(&p, &mut |e| printer.see(e));
    match result {
        Ok(()) => println!("Result: the group recovered."),
        Err(e) => println!("Result: {}", e.replace("; ", "\n  ").replace(": node", ":\n  node")),
    }
}
