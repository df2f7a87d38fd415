//! Produces context/partition-heal.md: two members with custom broadcasts after a partition in
//! which Y declared X down. X keeps probing Y; every packet between them is decoded (header,
//! size of what follows the header) and every `handle_data` result is shown, along with X's
//! identity after each probe period. Run from context/generator:
//! `cargo run -q > ../partition-heal.md`. Output is not edited.

use std::collections::HashMap;

use foca::{
    AccumulatingRuntime, BincodeCodec, BroadcastHandler, Codec, Config, Foca, Identity,
    Invalidates, Member, State, Timer,
};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    addr: u8,
    generation: u8,
}

impl Identity for Node {
    type Addr = u8;
    fn renew(&self) -> Option<Self> {
        Some(Node { addr: self.addr, generation: self.generation.wrapping_add(1) })
    }
    fn addr(&self) -> u8 {
        self.addr
    }
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

#[derive(Default)]
struct Settings(HashMap<u8, (u8, Vec<u8>)>);
struct SettingKey {
    key: u8,
    version: u8,
}
impl Invalidates for SettingKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.key == other.key && self.version > other.version
    }
}
impl BroadcastHandler<Node> for Settings {
    type Key = SettingKey;
    type Error = String;
    fn receive_item(&mut self, data: &[u8], _sender: Option<&Node>) -> Result<Option<SettingKey>, String> {
        if data.len() < 2 {
            return Err(format!("setting too short: {} bytes", data.len()));
        }
        let (key, version) = (data[0], data[1]);
        match self.0.get(&key) {
            Some((known, _)) if *known >= version => Ok(None),
            _ => {
                self.0.insert(key, (version, data[2..].to_vec()));
                Ok(Some(SettingKey { key, version }))
            }
        }
    }
}

type Agent = Foca<Node, BincodeCodec<bincode::DefaultOptions>, SmallRng, Settings>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn agent(id: Node, seed: u64) -> Agent {
    let mut config = Config::simple();
    config.notify_down_members = true;
    Foca::with_custom_broadcast(id, config, SmallRng::seed_from_u64(seed), codec(), Settings::default())
}

fn name(n: &Node) -> String {
    format!("{}#{}", if n.addr == 1 { "X" } else { "Y" }, n.generation)
}

fn describe(data: &[u8]) -> String {
    let mut buf = data;
    let h = codec().decode_header(&mut buf).unwrap();
    format!(
        "{} -> {}: {:?}, {} bytes total, {} bytes after the header: {:02x?}",
        name(&h.src), name(&h.dst), h.message, data.len(), buf.len(), buf
    )
}

fn packets(rt: &mut AccumulatingRuntime<Node>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((_, d)) = rt.to_send() {
        out.push(d.to_vec());
    }
    out
}

fn result(r: Result<(), foca::Error>) -> String {
    match r {
        Ok(()) => "Ok(())".to_string(),
        Err(e) => format!("Err: {e}"),
    }
}

/// Delivers X's pending packets to Y and Y's replies back to X.
fn exchange(node_x: &mut Agent, rt_x: &mut AccumulatingRuntime<Node>, node_y: &mut Agent, rt_y: &mut AccumulatingRuntime<Node>, rows: &mut Vec<String>) {
    for p in packets(rt_x) {
        rows.push(describe(&p));
        let r = node_y.handle_data(&p, &mut *rt_y);
        rows.push(format!("Y handle_data -> {}", result(r)));
        for q in packets(rt_y) {
            rows.push(describe(&q));
            let r = node_x.handle_data(&q, &mut *rt_x);
            rows.push(format!("X handle_data -> {}", result(r)));
        }
    }
}

fn main() {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };
    let mut rows = Vec::new();

    let mut node_x = agent(x, 7);
    let mut rt_x = AccumulatingRuntime::new();
    node_x.apply_many([Member::alive(y)].into_iter(), &mut rt_x).unwrap();
    let mut probe = None;
    while let Some((_, t)) = rt_x.to_schedule() {
        if matches!(t, Timer::ProbeRandomMember(_)) {
            probe = Some(t);
        }
    }
    while rt_x.to_notify().is_some() {}

    let mut node_y = agent(y, 8);
    let mut rt_y = AccumulatingRuntime::new();
    node_y.apply_many([Member::new(x, 0, State::Down)].into_iter(), &mut rt_y).unwrap();
    node_y.add_broadcast(&[1, 1, b'o', b'n']).unwrap();
    node_y.add_broadcast(&[2, 3, b'4', b'2']).unwrap();
    while rt_y.to_schedule().is_some() {}
    while rt_y.to_notify().is_some() {}

    rows.push(format!("setup: X knows Y as Alive; Y has X as Down (partition); Y has {} custom broadcasts queued", node_y.custom_broadcast_backlog()));
    for period in 1..=3 {
        rows.push(format!("**probe period {period}** (X's ProbeRandomMember timer fires)"));
        node_x.handle_timer(probe.take().unwrap(), &mut rt_x).unwrap();
        let mut indirect = None;
        while let Some((_, t)) = rt_x.to_schedule() {
            match t {
                Timer::ProbeRandomMember(_) => probe = Some(t),
                Timer::SendIndirectProbe { .. } => indirect = Some(t),
                _ => {}
            }
        }
        exchange(&mut node_x, &mut rt_x, &mut node_y, &mut rt_y, &mut rows);
        if let Some(t) = indirect {
            rows.push("X's SendIndirectProbe timer fires".to_string());
            node_x.handle_timer(t, &mut rt_x).unwrap();
            while rt_x.to_schedule().is_some() {}
            exchange(&mut node_x, &mut rt_x, &mut node_y, &mut rt_y, &mut rows);
        }
        while let Some(n) = rt_x.to_notify() {
            rows.push(format!("X notification: {n:?}"));
        }
        rows.push(format!(
            "end of period: X's identity {}, Y's view of address 1: {:?}",
            name(node_x.identity()),
            node_y.iter_membership_state().find(|m| m.id().addr == 1).map(|m| (name(m.id()), m.state()))
        ));
        while rt_y.to_schedule().is_some() {}
        while rt_y.to_notify().is_some() {}
        let _ = packets(&mut rt_x);
    }

    println!("# After the partition heals\n");
    println!("foca 0.17.1, two members, `Config::simple()` with `notify_down_members = true`, both");
    println!("with a custom broadcast handler (items are `[key, version, value..]`). Identities are");
    println!("`NAME#generation`. Only the probe timers (direct and indirect stage) are fired; suspicion");
    println!("timeouts are not.\n");
    for r in rows {
        println!("- {r}");
    }
}
