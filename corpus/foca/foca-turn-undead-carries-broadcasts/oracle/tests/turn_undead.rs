//! Two members that use custom broadcasts. One was declared down by the other during a
//! partition; when the partition heals, the down member must be told so (`TurnUndead`) and
//! be able to act on it.

use std::collections::HashMap;

use foca::{
    AccumulatingRuntime, BincodeCodec, BroadcastHandler, Config, Foca, Identity, Invalidates,
    Member, Notification, State, Timer,
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
        Some(Node {
            addr: self.addr,
            generation: self.generation.wrapping_add(1),
        })
    }

    fn addr(&self) -> u8 {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

/// A versioned key-value setting disseminated through custom broadcasts:
/// item bytes are `[key, version, value...]`.
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

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&Node>,
    ) -> Result<Option<SettingKey>, String> {
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

fn agent(id: Node, seed: u64) -> Agent {
    let mut config = Config::simple();
    config.notify_down_members = true;
    Foca::with_custom_broadcast(
        id,
        config,
        SmallRng::seed_from_u64(seed),
        BincodeCodec(bincode::DefaultOptions::new()),
        Settings::default(),
    )
}

#[derive(Default)]
struct Drained {
    packets: Vec<(Node, Vec<u8>)>,
    timers: Vec<Timer<Node>>,
    notifications: Vec<Notification<Node>>,
}

fn drain(rt: &mut AccumulatingRuntime<Node>) -> Drained {
    let mut out = Drained::default();
    while let Some((dst, data)) = rt.to_send() {
        out.packets.push((dst, data.to_vec()));
    }
    while let Some((_, timer)) = rt.to_schedule() {
        out.timers.push(timer);
    }
    while let Some(n) = rt.to_notify() {
        out.notifications.push(n);
    }
    out
}

#[test]
fn down_member_learns_it_was_declared_down() {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };

    // X still believes Y is alive.
    let mut node_x = agent(x, 7);
    let mut rt_x = AccumulatingRuntime::new();
    node_x
        .apply_many([Member::alive(y)].into_iter(), &mut rt_x)
        .unwrap();
    let probe = drain(&mut rt_x)
        .timers
        .into_iter()
        .find(|t| matches!(t, Timer::ProbeRandomMember(_)))
        .expect("X schedules a probe");

    // Y declared X down while they could not reach each other, and has settings of its own
    // to disseminate.
    let mut node_y = agent(y, 8);
    let mut rt_y = AccumulatingRuntime::new();
    node_y
        .apply_many([Member::new(x, 0, State::Down)].into_iter(), &mut rt_y)
        .unwrap();
    assert_eq!(Ok(true), node_y.add_broadcast(&[1, 1, b'o', b'n']));
    assert_eq!(Ok(true), node_y.add_broadcast(&[2, 3, b'4', b'2']));
    drain(&mut rt_y);

    // The partition heals. X probes Y.
    node_x.handle_timer(probe, &mut rt_x).unwrap();
    let pings = drain(&mut rt_x).packets;
    assert_eq!(1, pings.len());
    assert_eq!(y, pings[0].0);

    // Y does not talk to members it considers down, except to tell them so.
    node_y.handle_data(&pings[0].1, &mut rt_y).unwrap();
    let replies = drain(&mut rt_y).packets;
    assert_eq!(1, replies.len(), "Y replies to the down member once");
    assert_eq!(x, replies[0].0);

    // X must understand the reply and rejoin under a fresh identity.
    let result = node_x.handle_data(&replies[0].1, &mut rt_x);
    assert_eq!(
        Ok(()),
        result,
        "X could not process Y's reply to its ping"
    );
    let after = drain(&mut rt_x);
    let renewed = Node { addr: 1, generation: 1 };
    assert_eq!(&renewed, node_x.identity(), "X did not rejoin under a new identity");
    assert!(after.notifications.contains(&Notification::Rejoin(renewed)));

    // And Y accepts the renewed identity once X talks to it again.
    for (dst, data) in after.packets {
        assert_eq!(y.addr, dst.addr);
        node_y.handle_data(&data, &mut rt_y).unwrap();
    }
    assert_eq!(
        Some((renewed, State::Alive)),
        node_y
            .iter_membership_state()
            .find(|m| m.id().addr == 1)
            .map(|m| (*m.id(), m.state()))
    );
}
