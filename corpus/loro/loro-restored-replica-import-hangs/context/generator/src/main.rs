//! Prints `../import-trace.md`: the oracle's reported history, step by step, as the sync
//! service's message log would show it, with each replica's version after its edits, up to the
//! restored replica's import of the writer's update.
//! Run: `cargo run -q > ../import-trace.md`

#[path = "../../../oracle/tests/restored_replica.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{run_logged, Plan, ARCHIVE, DEADLINE, HUB, RELAY, RESTORED, REVIEWER, WRITER};

fn main() {
    let plan = Plan::reported();
    let (steps, outcome) = run_logged(&plan);
    println!("# Message log of the restored instance's history\n");
    println!("One shared `LoroText` per replica. Peer ids: writer {WRITER}, reviewer {REVIEWER}, hub {HUB}, relay {RELAY} (unused here), archive {ARCHIVE} (unused here), restored instance {RESTORED}.");
    println!("Each edit inserts two characters; each turn ends with `commit()`. Updates are `export(ExportMode::updates(&receiver.oplog_vv()))`, applied with `import`.");
    println!("Versions are `oplog_vv()` as `{{peer: end counter}}`.\n");
    println!("```text");
    for (i, step) in steps.iter().enumerate() {
        println!("{:>2}. {step}", i + 1);
    }
    match outcome {
        Some(o) => {
            println!("--  restored text {:?}, version {}", o.restored_text, o.restored_vv);
            println!("--  hub+writer text {:?}, version {}", o.direct_text, o.direct_vv);
        }
        None => println!("--  no return from import after {} s; the thread stays busy at 100 % CPU", DEADLINE.as_secs()),
    }
    println!("```");
}
