//! Replays the oracle's reported run (a device restored from an older save, keeping its actor
//! id, receives changes from a relay and keeps editing) and prints, after every step, what the
//! call returned and whether the document's save loads again, as Markdown.

#[path = "../../../oracle/tests/restored_replica.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let plan = scenario::symptom_plan();
    let trace = scenario::run(&plan, false);
    println!("# Restored device: step log");
    println!();
    println!("Device d (actor 0x01 x16) made {} changes (keys d1..d{}); every change also went", plan.before_crash, plan.before_crash);
    println!("to the relay. Editor e (actor 0x02 x16) made {} change(s) (keys e1..). d's disk was", plan.other);
    println!("lost and d was restored from a save taken after its change {}; it loaded that save with", plan.in_save);
    println!("its old actor id and kept editing (new keys d101, d102, ...). The relay then forwarded");
    println!("what it holds for d, one change per `apply_changes` call.");
    println!();
    println!("After every step the app saves the document and loads the bytes into a fresh");
    println!("document (\"reload\"); `keys` is the number of keys d's document shows and `waiting` the");
    println!("number of hashes its list of missing dependencies reports.");
    println!();
    println!("| step | result | keys | waiting | reload |");
    println!("|------|--------|------|---------|--------|");
    for l in &trace.lines {
        println!("| {} | {} | {} | {} | {} |", l.step, l.outcome, l.keys, l.waiting, l.reload);
    }
    println!();
    println!("## Checks that failed");
    println!();
    if trace.violations.is_empty() {
        println!("None.");
    }
    for v in &trace.violations {
        println!("- {v}");
    }
}
