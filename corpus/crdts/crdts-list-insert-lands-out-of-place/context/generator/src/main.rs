//! Produces the trace in ../insert-trace.md: two users, each with a List replica, type into a
//! shared list; every op is delivered to both replicas right away (after the first two, which
//! are made concurrently).

use crdts::list::Op;
use crdts::{CmRDT, List};

fn main() {
    // Control: the same typing on one replica, with no concurrent first inserts.
    let mut solo: List<char, u8> = List::new();
    for (ix, c) in [(0, 'p'), (1, 'q'), (1, 'm'), (1, 'n'), (1, 'o')] {
        solo.apply(solo.insert_index(ix, c, 10));
    }
    println!("control, one replica, p q then m n o at index 1: {:?}", solo.read::<String>());
    let mut reps: Vec<List<char, u8>> = vec![List::new(), List::new()];
    let show = |l: &List<char, u8>| {
        for (id, v) in l.iter_entries() {
            println!("| {v} | {} |", path(&serde_json::to_value(id).unwrap()));
        }
    };
    let p = reps[0].insert_index(0, 'p', 10);
    let q = reps[1].insert_index(0, 'q', 20);
    for op in [&p, &q] {
        for r in reps.iter_mut() {
            r.apply(op.clone());
        }
    }
    println!("after concurrent inserts: {:?} / {:?}", reps[0].read::<String>(), reps[1].read::<String>());
    let steps: [(usize, usize, char, u8); 4] = [(0, 1, 'm', 10), (0, 1, 'n', 10), (0, 1, 'o', 10), (1, 1, 'z', 20)];
    for (r, ix, c, actor) in steps {
        let op: Op<char, u8> = reps[r].insert_index(ix, c, actor);
        for rep in reps.iter_mut() {
            rep.apply(op.clone());
        }
        let text = reps[r].read::<String>();
        println!("actor {actor} insert_index({ix}, {c:?}) -> {:?}, {c:?} is at index {}", text, text.find(c).unwrap());
    }
    println!("| element | identifier path (rational, actor.counter) |");
    println!("|---|---|");
    show(&reps[0]);
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
