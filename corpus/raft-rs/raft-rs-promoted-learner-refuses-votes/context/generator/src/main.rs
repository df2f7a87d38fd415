//! Prints ../promotion-trace.md: the oracle's reported run (voters 1, 2, 3 and learner 4; node 1
//! leads, promotes node 4 and goes down before node 4 hears that the promotion is committed),
//! with the node states at each step, the messages of the first election rounds after node 1
//! went down and raft's own log lines for them.

#[path = "../../../oracle/tests/learner_promotion.rs"]
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
        "{} -> {}: {:?} term={} log_term={} index={} commit={}{}{}",
        m.get_from(),
        m.get_to(),
        m.get_msg_type(),
        m.get_term(),
        m.get_log_term(),
        m.get_index(),
        m.get_commit(),
        if m.get_reject() { " reject" } else { "" },
        if lost { " (lost)" } else { "" }
    )
}

fn nodes(c: &Cluster) {
    for &id in &c.ids {
        let n = &c.nodes[&id];
        match c.raft(id) {
            None => println!("- node {}: down", id),
            Some(r) => println!(
                "- node {}: {:?}{}, term {}, last index {}, commit {}, applied {}, voters {:?}, learners {:?}",
                id,
                r.state,
                if r.is_learner { " (learner)" } else { "" },
                r.term,
                r.raft_log.last_index(),
                r.raft_log.committed,
                n.applied_index,
                n.voters,
                n.learners
            ),
        }
    }
    println!();
}

struct Printer {
    step: usize,
    /// In the phase after the leader went down.
    tracing: bool,
    ticks_traced: usize,
    first_tick: usize,
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
                self.tracing = n.contains("goes down");
                take_lines();
                println!("## {}. {}\n", self.step, n);
            }
            Event::Nodes(c) => {
                if self.tracing && self.ticks_traced == 0 {
                    take_lines();
                    self.first_tick = c.ticks;
                }
                if self.tracing && self.ticks_traced > 0 && !self.done_tracing {
                    self.done_tracing = true;
                    println!("State after {} ticks with node 1 down:\n", c.ticks - self.first_tick);
                }
                nodes(c);
            }
            Event::Delivered(m) | Event::Lost(m) if self.tracing && !self.done_tracing => {
                let lost = matches!(e, Event::Lost(_));
                self.tick_lines.push(format!("    {}", message(m, lost)));
            }
            Event::Tick(t) if self.tracing && !self.done_tracing => {
                self.ticks_traced += 1;
                let logs = take_lines();
                if !self.tick_lines.is_empty() {
                    if self.shown == 1 {
                        println!("tick {} after node 1 went down:\n", t - self.first_tick);
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
}

fn main() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let p = Params::reported();
    println!("# Learner promotion, then the leader goes down: trace\n");
    println!("raft 0.1.0, four `RawNode`s on MemStorage: voters 1, 2, 3 and learner 4. election_tick 10,");
    println!("heartbeat_tick 1, check_quorum and pre_vote off. Each Ready is persisted before its messages are");
    println!("sent; committed ConfChange entries are applied with `apply_conf_change` (voters and learners");
    println!("below are the membership each node has applied). Messages to or from a node that is down are");
    println!("lost. The first election after node 1 went down split the votes of nodes 2 and 3 (not shown).\n");
    let mut printer = Printer {
        step: 0,
        tracing: false,
        ticks_traced: 0,
        first_tick: 0,
        tick_lines: vec![],
        done_tracing: false,
        shown: 0,
    };
    let result = scenario::run(&p, &mut |e| printer.see(e));
    match result {
        Ok(()) => println!("Result: the group recovered."),
        Err(e) => println!("Result: {}.", e.split(": node").next().unwrap()),
    }
}
