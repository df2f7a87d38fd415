//! Produces context/run.md: what the hub and its subscribers saw in the reported run (one
//! subscriber before the hub's first publish, three after). The run is the oracle's
//! (`symptom_scenario`); this program only formats what it reports.
//! Run from context/generator: `cargo run -q > ../run.md`. Output is not edited.

#[path = "../../../oracle/tests/fanout.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let out = scenario::symptom_scenario();
    println!("# Hub and subscribers: one run");
    println!();
    println!("Star network: every subscriber is connected to the hub only. The hub publishes on");
    println!("topic `status` without subscribing to it. Hub config: defaults except");
    println!("flood_publish = false, gossip_lazy = 0, gossip_factor = 0.0, heartbeat_interval =");
    println!("{} ms. Each later publish is spaced one heartbeat_interval apart.", scenario::HEARTBEAT.as_millis());
    println!();
    println!("| # | step |");
    println!("|---|---|");
    for (i, line) in out.log.iter().enumerate() {
        println!("| {} | {} |", i + 1, line);
    }
    println!();
    println!("## Messages delivered to each subscriber's application");
    println!();
    println!("| subscriber | subscribed | messages received |");
    println!("|---|---|---|");
    let total = out.received.len();
    for i in 1..=4 {
        let got = out.received.values().filter(|r| r.contains(&i)).count();
        let when = if i == 1 { "before m0" } else { "after m0" };
        println!("| {} | {} | {} of {} |", scenario::name(i), when, got, total);
    }
    println!();
    let failed = out.violations.iter().filter(|v| v.starts_with("publish ")).count();
    if failed == 0 {
        println!("Every `publish` call on the hub returned Ok.");
    } else {
        println!("{failed} `publish` calls on the hub returned an error.");
    }
}
