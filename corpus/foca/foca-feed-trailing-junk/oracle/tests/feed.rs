//! A member joins a cluster whose member list does not fit into one packet: the reply to its
//! Announce must still be a well-formed packet that the joining member can process.

use std::collections::VecDeque;
use std::time::Duration;

use foca::{BincodeCodec, Codec, Config, Foca, Identity, Member, Message, Notification, Runtime, Timer};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Host {
    name: String,
    generation: u8,
}

impl Host {
    fn new(name: &str) -> Self {
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

fn agent(id: Host, seed: u64) -> Agent {
    Foca::new(id, Config::simple(), SmallRng::seed_from_u64(seed), codec())
}

fn run(cluster_size: usize) {
    let seed = Host::new("seed-01.storage.eu-west-1.internal.example.net");
    let joiner = Host::new("ingest-07.storage.eu-west-1.internal.example.net");

    let mut seed_node = agent(seed.clone(), 1);
    let mut seed_out = Outbox::default();
    let members: Vec<Member<Host>> = (0..cluster_size)
        .map(|i| Member::alive(Host::new(&format!("data-{i:03}.storage.eu-west-1.internal.example.net"))))
        .collect();
    seed_node
        .apply_many(members.into_iter(), &mut seed_out)
        .unwrap();
    seed_out.packets.clear();

    let mut joiner_node = agent(joiner.clone(), 2);
    let mut joiner_out = Outbox::default();
    joiner_node.announce(seed.clone(), &mut joiner_out).unwrap();
    let (_, announce) = joiner_out.packets.pop_front().expect("announce sent");
    seed_node.handle_data(&announce, &mut seed_out).unwrap();
    let (dst, feed) = seed_out.packets.pop_front().expect("the seed replies");
    assert_eq!(joiner, dst);

    // The reply decodes as a header, a member count and exactly that many members.
    let mut buf = &feed[..];
    let header: foca::Header<Host> = codec().decode_header(&mut buf).expect("header decodes");
    assert_eq!(Message::Feed, header.message);
    assert!(buf.len() >= 2);
    let count = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    buf = &buf[2..];
    assert!(count > 0, "the feed carries members");
    for _ in 0..count {
        let _: Member<Host> = codec().decode_member(&mut buf).expect("member decodes");
    }
    assert!(
        buf.is_empty(),
        "cluster of {cluster_size}: the feed ({} bytes, {count} members) has {} bytes after its last member",
        feed.len(),
        buf.len()
    );

    // And the joining member processes it and joins.
    assert_eq!(
        Ok(()),
        joiner_node.handle_data(&feed, &mut joiner_out),
        "cluster of {cluster_size}: the joining member rejects the seed's reply"
    );
    assert!(joiner_out.notifications.contains(&Notification::Active));
    assert_eq!(count + 1, joiner_node.num_members());
}

#[test]
fn feed_fits_in_one_packet() {
    run(5);
}

#[test]
fn feed_larger_than_a_packet() {
    for cluster_size in [40, 41, 42, 43] {
        run(cluster_size);
    }
}
