//! Regenerates `../replica-trace.md`: the oracle's symptom scenario (one writer's four edits)
//! delivered to two replicas, in causal and in reverse order, with the replica state after every
//! delivery. Run: `cargo run --quiet > ../replica-trace.md`

#[path = "../../../oracle/tests/convergence.rs"]
#[allow(dead_code)]
mod scenario;

use yrs::{ReadTxn, Transact};

fn main() {
    let edits = scenario::symptom_edits();
    println!("# Replica trace\n");
    println!("Writer (client 7) makes four edits to the text `body`; each edit is sent as one update.\n");
    println!("| update | edit on the writer | bytes |");
    println!("|---|---|---|");
    for (i, e) in edits.iter().enumerate() {
        println!("| u{} | {} | {} |", i + 1, e.label, e.update.len());
    }
    let all: Vec<usize> = (0..edits.len()).collect();
    let writer = scenario::replay(&edits, &all, 7, &mut |_, _| {});
    println!("\nWriter's text after u4: {:?}\n", scenario::text_of(&writer));
    for (name, client, order) in [
        ("replica B (in order)", 21, [0, 1, 2, 3]),
        ("replica C (reverse order)", 22, [3, 2, 1, 0]),
    ] {
        println!("## {name}\n");
        println!("| delivered | text after | state vector after | missing updates reported |");
        println!("|---|---|---|---|");
        scenario::replay(&edits, &order, client, &mut |i, doc| {
            let text = scenario::text_of(doc);
            let txn = doc.transact();
            let sv: Vec<String> = txn
                .state_vector()
                .iter()
                .map(|(c, clock)| format!("{}:{clock}", c.get()))
                .collect();
            println!(
                "| u{} | {:?} | {{{}}} | {} |",
                i + 1,
                text,
                sv.join(", "),
                txn.has_missing_updates()
            );
        });
        println!();
    }
}
