//! Prints `../follower-trace.md`: the oracle's five-node cluster running three rounds of "read on
//! the leader, then writes", where the link to one follower delivers the read's heartbeat after
//! the writes' appends. It shows the RPCs that follower got (periodic heartbeats left out) and
//! the logs afterwards. Node ids are replaced by roles, since the election picks the leader.
//! What F has applied is left out: whether the leader's next heartbeat gets F to apply the last
//! entry before the snapshot is taken depends on the machine's load.

#[path = "../../../oracle/tests/read_during_writes.rs"]
#[allow(dead_code)]
mod scenario;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scenario::{log_of, round, start, Plan};

#[tokio::main(threaded_scheduler)]
async fn main() {
    let plan = Plan { rounds: vec![1, 2, 1], slow: vec![0] };
    let c = start().await;
    let f = c.followers[0];
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let to_f = format!("to node {} ", f);
    *c.net.trace.lock().unwrap() = Some(Box::new(move |line: String| {
        let interesting = line.contains("held back") || line.contains("delivered late") || !line.contains("entries=[]");
        if line.contains(&to_f) && interesting {
            l.lock().unwrap().push(line.replace(&to_f, "to F "));
        }
    }));
    let start_last = c.net.node(c.leader).metrics().borrow().last_log_index;
    let mut serial = 0;
    for (i, n) in plan.rounds.iter().enumerate() {
        lines.lock().unwrap().push(format!("-- round {}: client_read() on the leader, then {} client_write(s)", i + 1, n));
        round(&c, &plan, *n, &mut serial).await;
    }
    *c.net.trace.lock().unwrap() = None;
    tokio::time::delay_for(Duration::from_millis(2500)).await;

    let leader_log: Vec<u64> = log_of(&c.stores[&c.leader]).await.iter().map(|(i, _)| *i).collect();
    let f_log: Vec<u64> = log_of(&c.stores[&f]).await.iter().map(|(i, _)| *i).collect();
    let m = c.net.node(f).metrics().borrow().clone();

    println!("# Trace: reads on the leader while it replicates writes (five nodes)\n");
    println!("async-raft with the in-memory example store, five voters in one process, heartbeat_interval");
    println!("1000 ms. Before the rounds the leader's log ended at index {}. Each round calls client_read()", start_last);
    println!("on the leader and then client_write() once or twice (each awaited). The link from the leader");
    println!("to follower F happened to deliver the read's heartbeat after the following appends; the other");
    println!("three followers got everything at once. RPCs from the leader to F (periodic heartbeats omitted):\n");
    println!("```text");
    for l in lines.lock().unwrap().iter() {
        println!("{}", l);
    }
    println!("```\n");
    println!("2.5 s after the last write, no more traffic:\n");
    println!("```text");
    println!("leader log indexes:      {:?}", leader_log);
    println!("follower F log indexes:  {:?}", f_log);
    println!("follower F metrics:      last_log_index={}", m.last_log_index);
    println!("```");
}
