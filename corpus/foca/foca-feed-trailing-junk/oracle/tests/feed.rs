//! A member joins a cluster whose member list does not fit into one packet: the reply to its
//! Announce must still be a well-formed packet that the joining member can process.
//!
//! The seeded test draws host-name lengths (1 to 200 bytes, alike or mixed), cluster sizes
//! around and far beyond what fits, and packet-size limits from `FAULTLINE_SEED`: every reply
//! holds a header, a count and exactly that many members with nothing after them, carries as
//! many members as fit, and the joiner accepts it and learns exactly those members.
//! `join` is also what the bundle generator runs.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{
    BincodeCodec, Codec, Config, Error, Foca, Identity, Member, Message, Notification, Runtime,
    Timer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    pub generation: u8,
}

impl Host {
    pub fn new(name: &str) -> Self {
        Host {
            name: name.to_string(),
            generation: 0,
        }
    }
}

impl Identity for Host {
    fn renew(&self) -> Option<Self> {
        Some(Host {
            name: self.name.clone(),
            generation: self.generation.wrapping_add(1),
        })
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
    fn notify(&mut self, notification: Notification<Host>) {
        self.notifications.push(notification);
    }

    fn send_to(&mut self, to: Host, data: &[u8]) {
        self.packets.push_back((to, data.to_vec()));
    }

    fn submit_after(&mut self, _event: Timer<Host>, _after: Duration) {}
}

type Codec_ = BincodeCodec<bincode::DefaultOptions>;
type Agent = Foca<Host, Codec_, SmallRng, foca::NoCustomBroadcast>;

fn codec() -> Codec_ {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn agent(id: Host, seed: u64, max_packet: usize) -> Agent {
    let mut config = Config::simple();
    config.max_packet_size = max_packet.try_into().expect("non-zero packet size");
    Foca::new(id, config, SmallRng::seed_from_u64(seed), codec())
}

/// What one join attempt looked like on the wire and at the joiner.
pub struct Attempt {
    pub message: Message<Host>,
    pub feed_len: usize,
    pub header_len: usize,
    /// The member count written after the header.
    pub count: usize,
    /// How many members decoded, in order, before the first failure.
    pub decoded: Vec<Member<Host>>,
    /// Bytes left after the last decoded member.
    pub trailing: usize,
    pub joiner_result: Result<(), Error>,
    pub joiner_active: bool,
    pub joiner_members: Vec<Host>,
}

/// `joiner` announces itself to `seed`, which knows `members`; the seed's reply is decoded
/// and then handed to the joiner.
pub fn join(seed: &Host, joiner: &Host, members: &[Host], max_packet: usize) -> Attempt {
    let mut seed_node = agent(seed.clone(), 1, max_packet);
    let mut seed_out = Outbox::default();
    seed_node
        .apply_many(members.iter().cloned().map(Member::alive), &mut seed_out)
        .unwrap();
    seed_out.packets.clear();

    let mut joiner_node = agent(joiner.clone(), 2, max_packet);
    let mut joiner_out = Outbox::default();
    joiner_node.announce(seed.clone(), &mut joiner_out).unwrap();
    let (_, announce) = joiner_out.packets.pop_front().expect("announce sent");
    seed_node.handle_data(&announce, &mut seed_out).unwrap();
    let (dst, feed) = seed_out.packets.pop_front().expect("the seed replies");
    assert_eq!(*joiner, dst);

    let mut buf = &feed[..];
    let header: foca::Header<Host> = codec().decode_header(&mut buf).expect("header decodes");
    let header_len = feed.len() - buf.len();
    let mut count = 0;
    let mut decoded = Vec::new();
    if buf.len() >= 2 {
        count = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
        buf = &buf[2..];
        for _ in 0..count {
            match codec().decode_member(&mut buf) {
                Ok(m) => decoded.push(m),
                Err(_) => break,
            }
        }
    }
    let joiner_result = joiner_node.handle_data(&feed, &mut joiner_out);
    let mut joiner_members: Vec<Host> = joiner_node.iter_members().cloned().collect();
    joiner_members.sort_by(|a, b| a.name.cmp(&b.name));
    Attempt {
        message: header.message,
        feed_len: feed.len(),
        header_len,
        count,
        decoded,
        trailing: buf.len(),
        joiner_result,
        joiner_active: joiner_out.notifications.contains(&Notification::Active),
        joiner_members,
    }
}

/// The encoded size of a member, as the seed would write it.
fn encoded_len(member: &Member<Host>) -> usize {
    let mut buf = Vec::new();
    codec().encode_member(member, &mut buf).unwrap();
    buf.len()
}

/// Checks one join against the property; `what` names the configuration.
fn check(what: &str, seed: &Host, joiner: &Host, members: &[Host], max_packet: usize) -> Result<(), String> {
    let at = join(seed, joiner, members, max_packet);
    let fail = |why: String| Err(format!("{what}: {why}"));
    if at.message != Message::Feed {
        return fail(format!("the seed replied with {:?}", at.message));
    }
    if at.count == 0 || at.decoded.len() != at.count {
        return fail(format!("the count says {} members, {} decode", at.count, at.decoded.len()));
    }
    if at.trailing != 0 {
        return fail(format!(
            "the feed ({} bytes, {} members) has {} bytes after its last member",
            at.feed_len, at.count, at.trailing
        ));
    }
    if at.feed_len > max_packet {
        return fail(format!("the feed is {} bytes, over the limit of {max_packet}", at.feed_len));
    }
    let mut carried: Vec<Host> = at.decoded.iter().map(|m| m.id().clone()).collect();
    carried.sort_by(|a, b| a.name.cmp(&b.name));
    carried.dedup();
    if carried.len() != at.count || carried.iter().any(|h| h == joiner || !(members.contains(h) || h == seed)) {
        return fail(format!("the feed carries members the seed does not have: {carried:?}"));
    }
    let left_out: Vec<&Host> = members.iter().filter(|h| !carried.contains(h)).collect();
    if let Some(largest) = members.iter().map(|h| encoded_len(&Member::alive(h.clone()))).max() {
        if !left_out.is_empty() && max_packet - at.feed_len >= largest {
            return fail(format!(
                "the feed leaves {} members out but still has {} free bytes, room for any of them",
                left_out.len(),
                max_packet - at.feed_len
            ));
        }
    }
    if at.joiner_result != Ok(()) {
        return fail(format!("the joining member rejects the seed's reply: {:?}", at.joiner_result));
    }
    if !at.joiner_active {
        return fail("the joining member did not become active".into());
    }
    let mut expected = carried.clone();
    if !expected.contains(seed) {
        expected.push(seed.clone());
        expected.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if at.joiner_members != expected {
        return fail(format!(
            "the joiner knows {} members, the feed carried {} (plus the seed)",
            at.joiner_members.len(),
            carried.len()
        ));
    }
    Ok(())
}

fn storage_name(i: usize) -> Host {
    Host::new(&format!("data-{i:03}.storage.eu-west-1.internal.example.net"))
}

pub fn symptom_seed() -> Host {
    Host::new("seed-01.storage.eu-west-1.internal.example.net")
}

pub fn symptom_joiner() -> Host {
    Host::new("ingest-07.storage.eu-west-1.internal.example.net")
}

/// The reported naming scheme with `cluster_size` other members.
pub fn symptom_members(cluster_size: usize) -> Vec<Host> {
    (0..cluster_size).map(storage_name).collect()
}

fn symptom_run(cluster_size: usize) {
    let members = symptom_members(cluster_size);
    let what = format!("cluster of {cluster_size}");
    if let Err(why) = check(&what, &symptom_seed(), &symptom_joiner(), &members, 1400) {
        panic!("{why}");
    }
}

#[test]
fn feed_fits_in_one_packet() {
    symptom_run(5);
}

#[test]
fn feed_larger_than_a_packet() {
    for cluster_size in [40, 41, 42, 43] {
        symptom_run(cluster_size);
    }
}

/// The seed, as the grader passes it (1 when absent).
fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// A host name of exactly `len` bytes, unique by `i`.
fn name_of_len(rng: &mut SmallRng, i: usize, len: usize) -> String {
    let mut name = format!("{i}-");
    while name.len() < len {
        name.push(char::from(rng.gen_range(b'a'..=b'z')));
    }
    name.truncate(len.max(format!("{i}-").len()));
    name
}

/// Explores the join configurations drawn from `seed`; returns the first violation.
pub fn explore(seed: u64) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(0xfeed ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for round in 0..8 {
        let max_packet = [1400, 1400, 1024, 512][rng.gen_range(0..4)];
        let base = rng.gen_range(1..=200usize);
        let mixed = rng.gen_bool(0.5);
        let (seed_len, joiner_len) = (rng.gen_range(1..=60), rng.gen_range(1..=60));
        let seed_host = Host::new(&name_of_len(&mut rng, 9000, seed_len));
        let joiner = Host::new(&name_of_len(&mut rng, 9001, joiner_len));
        // Roughly how many members fit, then a cluster around that size or far beyond it.
        let fit = max_packet / (base + 6);
        let size = if round == 0 {
            rng.gen_range(1..=fit.max(1))
        } else {
            fit + rng.gen_range(1..=3 * fit.max(4))
        };
        let members: Vec<Host> = (0..size)
            .map(|i| {
                let len = if mixed { rng.gen_range(1..=200) } else { base };
                Host::new(&name_of_len(&mut rng, i, len))
            })
            .collect();
        let what = format!(
            "round {round}: {size} members, names of {} bytes, max_packet_size {max_packet}",
            if mixed { "1 to 200".to_string() } else { base.to_string() }
        );
        check(&what, &seed_host, &joiner, &members, max_packet)?;
    }
    Ok(())
}

#[test]
fn feed_is_well_formed_for_any_sizes() {
    let seed = seed();
    if let Err(why) = explore(seed) {
        panic!("seed {seed}: {why}");
    }
}
