//! Prints `../leader-timeline.md`: the oracle's scenario in the symptom's shape (one voter,
//! learner 1 hangs, learner 2 is unreachable, then the membership drops the learners) on tokio's
//! paused clock, so every time printed is virtual and the same on every run.

#[path = "../../../oracle/tests/hung_learner.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};

use scenario::{run, Net, Op, Plan};
use tokio::time::Instant;

fn name(op: &Op) -> String {
    match op {
        Op::AddLearner { id, .. } => format!("add_learner({id})"),
        Op::Write => "client_write".to_string(),
        Op::Voters(v) => format!("change_membership({v:?}, retain=false)"),
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let start = Instant::now();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let ms = move || start.elapsed().as_millis();
    let out = lines.clone();
    let mut net = Net::default();
    net.on_hang = Some(Arc::new(move |target| {
        out.lock().unwrap().push(format!("{:>6} ms  network: RPC to node {target} sent, it will never be answered", ms()));
    }));
    let out = lines.clone();
    let (_, m) = run(&Plan::symptom(), net, &mut |t| {
        let end = start.elapsed();
        out.lock().unwrap().push(format!(
            "{:>6} ms  {}: returned {} after {} ms",
            end.as_millis(),
            name(&t.op),
            t.result,
            t.took.as_millis()
        ));
    })
    .await;

    println!("# Leader timeline with a hung learner\n");
    println!("One voter (node 0) on openraft-memstore; `heartbeat_interval = 4000` ms, election timeouts");
    println!("8000-9000 ms, heartbeats and ticks off. The network never answers any RPC to node 1 (the future");
    println!("stays pending); node 2 is unreachable (every RPC fails at once). The calls are made one after the");
    println!("other on the leader; times are milliseconds since the leader was created. \"network\" lines are");
    println!("printed by the `RaftNetwork` implementation.\n");
    println!("```text");
    for l in lines.lock().unwrap().iter() {
        println!("{l}");
    }
    println!(
        "{:>6} ms  leader: state={:?} last_log_index={:?} last_applied={}",
        start.elapsed().as_millis(),
        m.state,
        m.last_log_index,
        m.last_applied.map(|l| l.to_string()).unwrap_or("-".into())
    );
    println!("```\n");
    println!("The leader stays Leader throughout and the log is intact.");
}
