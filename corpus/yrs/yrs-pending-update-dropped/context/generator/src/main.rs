//! Replays the oracle's reported order (u1, u3, u2 from one writer, then u4) and the two-writer
//! order (A1, A3, B1, A2), and prints what the receiving replica shows after each update.

#[path = "../../../oracle/tests/out_of_order_delivery.rs"]
#[allow(dead_code)]
mod scenario;

struct Log(Vec<String>);

impl scenario::Observer for Log {
    fn note(&mut self, line: String) {
        self.0.push(line);
    }
}

fn section(title: &str, log: &Log, outcome: Result<(), String>) {
    println!("## {title}");
    println!();
    for line in &log.0 {
        println!("- {}", line);
    }
    println!();
    match outcome {
        Ok(()) => println!("Outcome: the replica matches the in-order replica."),
        Err(e) => println!("Outcome: {e}"),
    }
    println!();
}

fn main() {
    println!("# Receiver trace (yrs 0.18.2, in process)");
    println!();
    println!("Updates are the bytes from `observe_update_v1`, one per write transaction, applied with");
    println!("`Update::decode_v1` and `TransactionMut::apply_update` on a replica with client id 9.");
    println!("`shows` is the text `t` and the map `m` (keys sorted).");
    println!();
    let mut one = Log(Vec::new());
    let r = scenario::reported(&mut one);
    section("One writer, u1 u3 u2 then u4", &one, r);
    let mut two = Log(Vec::new());
    let r = scenario::interleaved(&mut two);
    section("Two writers (A: client 1 types into the text, B: client 2 sets a map key)", &two, r);
}
