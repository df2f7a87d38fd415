//! Replays the oracle's reported run (three peers, one lost message on the o-h link, then h
//! and p sync) and prints every sync message and the peers' final state as Markdown, naming
//! each change by the key it wrote.

use std::collections::HashMap;

use automerge::ChangeHash;

#[path = "../../../oracle/tests/orphan_sync.rs"]
#[allow(dead_code)]
mod scenario;

fn list(names: &HashMap<ChangeHash, String>, hashes: &[ChangeHash]) -> String {
    let v: Vec<String> = hashes
        .iter()
        .map(|h| names.get(h).cloned().unwrap_or_else(|| format!("{}..", &h.to_string()[..8])))
        .collect();
    format!("[{}]", v.join(", "))
}

fn main() {
    let plan = scenario::symptom_plan();
    let trace = scenario::run(&plan);
    let names: HashMap<ChangeHash, String> = trace.names.iter().cloned().collect();

    println!("# Sync log: three peers, one lost message");
    println!();
    println!("Peers o, h and p share one document (actors 0x01.., 0x02.., 0x03..). Each edit puts one");
    println!("new key in the root map; a change is named here after the key it wrote (o7 = o's 7th");
    println!("edit). Every link uses fresh `sync::State`s on both ends; messages are encoded and decoded.");
    println!("`have` is the number of Bloom-filter summaries in the message.");
    println!();
    println!("| # | link | heads | need | have | changes |");
    println!("|---|------|-------|------|------|---------|");
    let mut n = 0;
    for step in &trace.steps {
        match step {
            scenario::Step::Note(s) => println!("| | | *{s}* | | | |"),
            scenario::Step::Message(m) => {
                n += 1;
                let changes: Vec<ChangeHash> = m.changes.iter().flatten().copied().collect();
                let whole = m.changes.iter().filter(|c| c.is_none()).count();
                let mut c = list(&names, &changes);
                if whole > 0 {
                    c.push_str(" + whole document");
                }
                if m.lost {
                    c.push_str(" **(lost)**");
                }
                println!(
                    "| {n} | {} -> {} | {} | {} | {} | {c} |",
                    m.from,
                    m.to,
                    list(&names, &m.heads),
                    list(&names, &m.need),
                    m.have
                );
            }
        }
    }
    println!();
    println!("In the first h-p session, after message 6 neither h nor p has a sync message to send.");
    println!();
    println!("## What the run checked");
    println!();
    if trace.violations.is_empty() {
        println!("Nothing went wrong.");
    }
    for v in &trace.violations {
        println!("- {v}");
    }
}
