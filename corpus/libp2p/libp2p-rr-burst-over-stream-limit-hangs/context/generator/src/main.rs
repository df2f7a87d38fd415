//! Produces context/run.md: what the client and the server saw in the reported run (a client
//! limited to 3 concurrent streams sends 6 requests at once). The run is the oracle's
//! (`symptom_scenario`); this program only formats what it reports.
//! Run from context/generator: `cargo run -q > ../run.md`. Output is not edited.

#[path = "../../../oracle/tests/capacity.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let rep = scenario::symptom_scenario();
    println!("# Client and server: one run");
    println!();
    println!("Two swarms in one process, one connection (memory transport, plaintext, yamux).");
    println!("Request and response are a u32 each; the server answers request n with n + 1000.");
    println!("After the server answered, the client was driven {} s more (request_timeout + 2 s).", scenario::REQUEST_TIMEOUT.as_secs() + 2);
    println!();
    println!("| # | step |");
    println!("|---|---|");
    for (i, line) in rep.log.iter().enumerate() {
        println!("| {} | {} |", i + 1, line);
    }
    println!();
    println!("Most client requests the server's application held at one time: {}.", rep.server_peak);
}
