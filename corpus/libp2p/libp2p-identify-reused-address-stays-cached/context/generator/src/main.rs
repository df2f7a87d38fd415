//! Produces context/dial-log.md: what node A saw when it dialled a departed peer by id after a
//! new node took that peer's address. The run is the oracle's (`symptom_scenario`); this program
//! only formats what it reports.
//! Run from context/generator: `cargo run -q > ../dial-log.md`. Output is not edited.

#[path = "../../../oracle/tests/stale_address.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let out = scenario::symptom_scenario();
    println!("# Node A: redialling a departed peer");
    println!();
    println!("A, B, C1 and N run libp2p-swarm with libp2p-identify (default configuration) on one");
    println!("memory transport. Each dial below is a dial by peer id with no addresses given, the way");
    println!("A's application reconnects to peers it knew. Each dial line shows the error kind of");
    println!("the `OutgoingConnectionError` A got (or Connected); \"inbound connections at N\" counts");
    println!("`IncomingConnection` events on N during that dial.");
    println!();
    println!("| # | step |");
    println!("|---|---|");
    for (i, line) in out.log.iter().enumerate() {
        println!("| {} | {} |", i + 1, line);
    }
}
