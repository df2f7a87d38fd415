//! Replays the oracle's reported session (a client's cursor relayed between a server and another
//! client after the first client left) and prints what each peer shows over time, as Markdown.
//! Times are rounded to the relay round so that the output does not depend on scheduling.

#[path = "../../../oracle/tests/relayed_presence.rs"]
#[allow(dead_code)]
mod scenario;

struct Log(Vec<String>);

impl scenario::Observer for Log {
    fn note(&mut self, _at_ms: u128, line: String) {
        self.0.push(line);
    }
}

fn main() {
    let mut log = Log(Vec::new());
    let outcome = scenario::reported(&mut log);
    println!("# Replay: a departed client's cursor between a relay and a client (loro-internal 1.9.1)");
    println!();
    println!(
        "Three `EphemeralStore`s with timeout {} ms in one process. After client-a closes, every \
         25 ms the relay's `encode_all()` is applied on client-c and about 12 ms later \
         client-c's `encode_all()` is applied on the relay; client-c also updates its own \
         cursor each round. Rounds are about 25 ms apart; only every sixth round is logged.",
        scenario::TIMEOUT_MS
    );
    println!();
    println!("| # | event |");
    println!("|---|---|");
    for (i, line) in log.0.iter().enumerate() {
        println!("| {} | {} |", i + 1, line.replace('|', "\\|"));
    }
    println!();
    match outcome {
        Ok(()) => println!("Outcome: the departed client's cursor expired everywhere."),
        Err(e) => println!("Outcome: {e}."),
    }
}
