//! Produces context/join-attempts.md: a new member announces to a seed of clusters of growing
//! size; for each, the seed's reply is decoded (header, member count, members, what is left) and
//! handed to the joining member. Run from context/generator: `cargo run -q > ../join-attempts.md`.
//! Output is not edited.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Foca, Header, Identity, Member, Notification, Runtime, Timer};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Host {
    name: String,
    generation: u8,
}

impl Host {
    fn new(name: &str) -> Self {
        Host { name: name.to_string(), generation: 0 }
    }
}

impl Identity for Host {
    fn renew(&self) -> Option<Self> {
        Some(Host { name: self.name.clone(), generation: self.generation.wrapping_add(1) })
    }
    fn has_same_prefix(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

#[derive(Default)]
struct Outbox {
    packets: VecDeque<(Host, Vec<u8>)>,
    notifications: Vec<Notification<Host>>,
}

impl Runtime<Host> for Outbox {
    fn notify(&mut self, n: Notification<Host>) {
        self.notifications.push(n);
    }
    fn send_to(&mut self, to: Host, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }
    fn submit_after(&mut self, _event: Timer<Host>, _after: Duration) {}
}

type Agent = Foca<Host, BincodeCodec<bincode::DefaultOptions>, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> BincodeCodec<bincode::DefaultOptions> {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn main() {
    // Keep error values short: no captured backtraces in their Debug output.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    println!("# Joining clusters of different sizes\n");
    println!("foca 0.7.0, `Config::simple()` (max_packet_size 1400), bincode codec, no custom broadcasts.");
    println!("Identities are host names like `data-017.storage.eu-west-1.internal.example.net` plus a");
    println!("generation byte. `ingest-07...` calls `announce(seed-01...)`; the seed's reply is decoded");
    println!("with the same codec and then given to the joining member's `handle_data`.\n");
    println!("| other members at seed | reply | header | member count field | members decoded | bytes after last member | joiner handle_data | joiner's members after |");
    println!("|---|---|---|---|---|---|---|---|");
    for cluster_size in [5, 20, 24, 25, 30, 40] {
        let seed = Host::new("seed-01.storage.eu-west-1.internal.example.net");
        let joiner = Host::new("ingest-07.storage.eu-west-1.internal.example.net");
        let mut seed_node: Agent = Foca::new(seed.clone(), Config::simple(), SmallRng::seed_from_u64(1), codec());
        let mut seed_out = Outbox::default();
        seed_node
            .apply_many(
                (0..cluster_size).map(|i| Member::alive(Host::new(&format!("data-{i:03}.storage.eu-west-1.internal.example.net")))),
                &mut seed_out,
            )
            .unwrap();
        seed_out.packets.clear();
        let mut joiner_node: Agent = Foca::new(joiner.clone(), Config::simple(), SmallRng::seed_from_u64(2), codec());
        let mut joiner_out = Outbox::default();
        joiner_node.announce(seed.clone(), &mut joiner_out).unwrap();
        let (_, announce) = joiner_out.packets.pop_front().unwrap();
        seed_node.handle_data(&announce, &mut seed_out).unwrap();
        let (_, feed) = seed_out.packets.pop_front().unwrap();

        let mut buf = &feed[..];
        let header: Header<Host> = codec().decode_header(&mut buf).unwrap();
        let header_len = feed.len() - buf.len();
        let count = u16::from_be_bytes([buf[0], buf[1]]);
        buf = &buf[2..];
        let mut decoded = 0;
        for _ in 0..count {
            let m: Result<Member<Host>, _> = codec().decode_member(&mut buf);
            if m.is_err() {
                break;
            }
            decoded += 1;
        }
        let result = joiner_node.handle_data(&feed, &mut joiner_out);
        println!(
            "| {cluster_size} | {:?}, {} bytes | {header_len} bytes | {count} | {decoded} | {} | {:?} | {} |",
            header.message,
            feed.len(),
            buf.len(),
            result,
            joiner_node.num_members()
        );
    }
}
