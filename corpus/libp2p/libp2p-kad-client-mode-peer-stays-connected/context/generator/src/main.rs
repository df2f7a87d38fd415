//! Produces context/observer-log.md: what the observer node saw in the reported run (two
//! server-mode peers, one of which switches to client mode). The run is the oracle's
//! (`symptom_scenario`); this program only formats what it reports.
//! Run from context/generator: `cargo run -q > ../observer-log.md`. Output is not edited.

#[path = "../../../oracle/tests/routing_modes.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let out = scenario::symptom_scenario();
    println!("# Observer node: one run");
    println!();
    println!("O, P1 and P2 each run libp2p-kad (in-memory record store, default configuration)");
    println!("and libp2p-identify in one composed behaviour; the Kademlia mode of");
    println!("every node is set explicitly with `set_mode`. O dials both peers. \"O's identify info\"");
    println!("lines are the `identify::Event::Received` events O got since the previous line; \"O's");
    println!("routing table\" lines read the status of each entry from `kbuckets()` on O (Absent: no");
    println!("entry). After a switch, O's routing table is read once it matches the new modes, or");
    println!("after 3 s if it does not, and read again 0.3 s later (the line shows the later read).");
    println!();
    println!("| # | step |");
    println!("|---|---|");
    for (i, line) in out.log.iter().enumerate() {
        println!("| {} | {} |", i + 1, line);
    }
    println!();
    if out.log.iter().any(|l| l.contains("O is no longer connected")) {
        println!("O lost a connection during the run.");
    } else {
        println!("Both connections stayed open for the whole run.");
    }
}
