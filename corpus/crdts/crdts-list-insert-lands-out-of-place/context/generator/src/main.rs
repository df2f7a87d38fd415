//! Regenerates `../insert-trace.md` from the oracle's symptom scenario: two users, each with a
//! List replica, type into a shared list; every op is delivered to both replicas right away
//! (after the first two, which are made concurrently).
//! Run: `cargo run --quiet > ../insert-trace.md`

#[path = "../../../oracle/tests/insert_position.rs"]
#[allow(dead_code)]
mod scenario;

use crdts::{CmRDT, List};

fn main() {
    println!("# Two replicas typing into one List\n");
    println!("Actors 10 and 20 each hold a `List<char, u8>` replica. Every op is applied to both replicas as soon");
    println!("as it is made, except the first two, which were made concurrently on empty replicas.\n");
    // Control: the same typing on one replica, with no concurrent first inserts.
    let mut solo: List<char, u8> = List::new();
    solo.apply(solo.insert_index(0, 'p', 10));
    solo.apply(solo.insert_index(1, 'q', 10));
    for (_, ix, c, _) in &scenario::SYMPTOM_STEPS[..3] {
        solo.apply(solo.insert_index(*ix, *c, 10));
    }
    println!("Control, one replica only (`p` at 0, `q` at 1, then `m`, `n`, `o` each at index 1):");
    println!("`{:?}` (as expected).\n", solo.read::<String>());
    println!("## Run with concurrent first inserts\n");
    println!("| step | op (made on the actor's own replica) | text on both replicas after | where the new element is |");
    println!("|---|---|---|---|");
    let mut reps = scenario::after_concurrent_first_inserts();
    println!(
        "| 1 | actor 10: `insert_index(0, 'p')`, concurrently actor 20: `insert_index(0, 'q')` | `{:?}` | |",
        reps[0].read::<String>()
    );
    let mut expected = reps[0].read::<String>();
    for (step, (r, ix, c, actor)) in scenario::SYMPTOM_STEPS.into_iter().enumerate() {
        let op = reps[r].insert_index(ix, c, actor);
        scenario::broadcast(&mut reps, &op);
        expected.insert(ix, c);
        let text = reps[r].read::<String>();
        println!(
            "| {} | actor {actor}: `insert_index({ix}, {c:?})` | `{text:?}` | index {} |",
            step + 2,
            text.find(c).unwrap()
        );
    }
    println!("\nExpected after step 5: `{expected:?}`.\n");
    println!("## Entries of the replicas after step 5 (`iter_entries`, serialized)\n");
    println!("| element | identifier path (rational, actor.counter) |");
    println!("|---|---|");
    for (id, v) in reps[0].iter_entries() {
        println!("| {v} | {} |", path(&serde_json::to_value(id).unwrap()));
    }
}

/// Renders an identifier's serialized path compactly, e.g. `(0, 10.1) (1/2, 20.3)`.
fn path(id: &serde_json::Value) -> String {
    let int = |b: &serde_json::Value| -> i64 {
        let sign = b[0].as_i64().unwrap();
        let mag = b[1].as_array().unwrap().first().map(|d| d.as_i64().unwrap()).unwrap_or(0);
        sign.signum() * mag
    };
    id.as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let (n, d) = (int(&node[0][0]), int(&node[0][1]));
            let r = if d == 1 { n.to_string() } else { format!("{n}/{d}") };
            format!("({r}, {}.{})", node[1]["actor"], node[1]["counter"])
        })
        .collect::<Vec<_>>()
        .join(" ")
}
