//! Replays the oracle's reported run (three replicas of one text: a leading character
//! replaced on one device while another types after it and a third types at the start)
//! and prints every step with each replica's text, then what the run found.

#[path = "../../../oracle/tests/head_insert.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let plan = scenario::symptom_plan();
    let trace = scenario::run(&plan);
    let [w, a, b] = plan.clients;

    println!("# Replica log: three devices, one shared text");
    println!();
    println!("Devices w (client id {w}), a (client id {a}) and b (client id {b}) each hold a y-octo `Doc`");
    println!("with one text. To sync, a device sends `encode_update_v1()` (its whole state) and the");
    println!("receiver applies it with `apply_update_from_binary_v1`. Each row shows every device's");
    println!("text after the step.");
    println!();
    println!("| # | step | w | a | b |");
    println!("|---|------|---|---|---|");
    for (n, step) in trace.steps.iter().enumerate() {
        println!(
            "| {} | {} | {:?} | {:?} | {:?} |",
            n + 1,
            step.what,
            step.texts[0],
            step.texts[1],
            step.texts[2]
        );
    }
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
