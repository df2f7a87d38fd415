//! Regenerates `../replica-trace.md`: the oracle's symptom scenario (one writer's four inserts)
//! delivered to two replicas, in the order they were made and in the order 1, 4, 3, 2, with each
//! replica's state after every delivery and what a fresh peer loading that state sees.
//! Run: `cargo run --quiet > ../replica-trace.md`

#[path = "../../../oracle/tests/reordered_inserts.rs"]
#[allow(dead_code)]
mod scenario;

use yrs::{ReadTxn, Transact};

fn format_sv(sv: &yrs::StateVector) -> String {
    let mut entries: Vec<(u64, u32)> = sv.iter().map(|(c, clock)| (c.get(), *clock)).collect();
    entries.sort();
    let entries: Vec<String> = entries.iter().map(|(c, clock)| format!("{c}:{clock}")).collect();
    format!("{{{}}}", entries.join(", "))
}

fn state_vector(doc: &yrs::Doc) -> String {
    format_sv(&doc.transact().state_vector())
}

fn main() {
    let s = scenario::symptom_session();
    println!("# Replica trace\n");
    println!("Writer (client 7) makes four inserts into the text `doc`; each insert is sent as one update.\n");
    println!("| update | edit on the writer | bytes |");
    println!("|---|---|---|");
    for (i, e) in s.edits.iter().enumerate() {
        println!("| u{} | {} | {} |", i + 1, e.label, e.update.len());
    }
    println!(
        "\nWriter's text after u4: {:?}, state vector {}\n",
        s.final_text(),
        format_sv(&s.state_vector)
    );
    // Replica B: in order; its own text is shown after every delivery.
    println!("## replica B (in order)\n");
    println!("| delivered | text after | state vector after | pending | fresh peer loading its state shows |");
    println!("|---|---|---|---|---|");
    scenario::replay(&s, &[0, 1, 2, 3], 21, &mut |i, doc| {
        let peer = scenario::load_into_peer(doc, 90);
        println!(
            "| u{} | {:?} | {} | {} | {:?} |",
            i + 1,
            scenario::read_text(doc),
            state_vector(doc),
            doc.transact().store().pending_update().is_some(),
            scenario::read_text(&peer),
        );
    });
    // Replica C: what its state gives other clients. Its own rendering is not printed: it is
    // not the same from one run to the next.
    println!("\n## replica C (order u1, u4, u3, u2)\n");
    println!("| delivered | state vector after | pending | fresh peer loading its state shows |");
    println!("|---|---|---|---|");
    let c = scenario::replay(&s, &[0, 3, 2, 1], 22, &mut |i, doc| {
        let peer = scenario::load_into_peer(doc, 90);
        println!(
            "| u{} | {} | {} | {:?} |",
            i + 1,
            state_vector(doc),
            doc.transact().store().pending_update().is_some(),
            scenario::read_text(&peer),
        );
    });
    let diff = {
        let writer = scenario::replay(&s, &[0, 1, 2, 3], 7, &mut |_, _| {});
        let sv = c.transact().state_vector();
        let diff = writer.transact().encode_state_as_update_v1(&sv);
        diff.len()
    };
    println!("\nThe writer's update for replica C's state vector after u2: {diff} bytes.");
}
