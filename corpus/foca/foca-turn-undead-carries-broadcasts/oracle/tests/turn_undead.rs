//! Two members that use custom broadcasts. One was declared down by the other during a
//! partition; when the partition heals, the down member must be told so (`TurnUndead`) and
//! be able to act on it.
//!
//! Beyond the reported run: the down member keeps talking before it has processed the notice
//! (its ping arrives many times); every notice must be one it can act on, and notices to a down
//! member must not use up the broadcasts meant for the live members.
//! `symptom_scenario` is the reported run, which the bundle generator replays.

use std::collections::HashMap;

use foca::{
    AccumulatingRuntime, BincodeCodec, BroadcastHandler, Config, Foca, Identity, Invalidates,
    Member, Notification, State, Timer,
};
use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub addr: u8,
    pub generation: u8,
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

fn packets(rt: &mut AccumulatingRuntime<Node>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((_, d)) = rt.to_send() {
        out.push(d.to_vec());
    }
    out
}

/// What the reported run shows, in order.
pub enum Event<'a> {
    /// Y's custom broadcasts queued at the start.
    Setup(usize),
    Period(usize),
    Packet(&'a [u8]),
    /// `'X'` or `'Y'` handled the packet just shown.
    Handled(char, &'a Result<(), foca::Error>),
    IndirectFires,
    Notified(&'a Notification<Node>),
    /// X's identity and Y's view of address 1 at the end of a probe period.
    EndOfPeriod(Node, Option<(Node, State)>),
}

/// Hooks for the bundle generator; the oracle uses the defaults.
pub trait Observer {
    fn event(&mut self, _event: Event<'_>) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// What X ran into, and where the run ended.
pub struct SymptomOutcome {
    pub x_results: Vec<Result<(), foca::Error>>,
    pub x_notifications: Vec<Notification<Node>>,
    pub x_identity: Node,
    pub y_view_of_x: Option<(Node, State)>,
}

/// Delivers X's pending packets to Y and Y's replies back to X.
fn exchange(
    node_x: &mut Agent,
    rt_x: &mut AccumulatingRuntime<Node>,
    node_y: &mut Agent,
    rt_y: &mut AccumulatingRuntime<Node>,
    x_results: &mut Vec<Result<(), foca::Error>>,
    obs: &mut dyn Observer,
) {
    for p in packets(rt_x) {
        obs.event(Event::Packet(&p));
        let r = node_y.handle_data(&p, &mut *rt_y);
        obs.event(Event::Handled('Y', &r));
        for q in packets(rt_y) {
            obs.event(Event::Packet(&q));
            let r = node_x.handle_data(&q, &mut *rt_x);
            obs.event(Event::Handled('X', &r));
            x_results.push(r);
        }
    }
}

/// The reported run: X still believes Y is alive; Y declared X down during a partition and has
/// two settings to disseminate. The partition heals and X's probe timers (direct and indirect
/// stage) fire for `periods` probe periods; suspicion timeouts do not.
pub fn symptom_scenario(periods: usize, obs: &mut dyn Observer) -> SymptomOutcome {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };

    let mut node_x = agent(x, 7);
    let mut rt_x = AccumulatingRuntime::new();
    node_x
        .apply_many([Member::alive(y)].into_iter(), &mut rt_x)
        .unwrap();
    let mut probe = drain(&mut rt_x)
        .timers
        .into_iter()
        .find(|t| matches!(t, Timer::ProbeRandomMember(_)));

    let mut node_y = agent(y, 8);
    let mut rt_y = AccumulatingRuntime::new();
    node_y
        .apply_many([Member::new(x, 0, State::Down)].into_iter(), &mut rt_y)
        .unwrap();
    node_y.add_broadcast(&[1, 1, b'o', b'n']).unwrap();
    node_y.add_broadcast(&[2, 3, b'4', b'2']).unwrap();
    drain(&mut rt_y);
    obs.event(Event::Setup(node_y.custom_broadcast_backlog()));

    let mut x_results = Vec::new();
    let mut x_notifications = Vec::new();
    for period in 1..=periods {
        // (A renewed identity starts its probing afresh, with timers this run does not fire.)
        let Some(timer) = probe.take() else {
            break;
        };
        obs.event(Event::Period(period));
        node_x.handle_timer(timer, &mut rt_x).unwrap();
        let mut indirect = None;
        while let Some((_, t)) = rt_x.to_schedule() {
            match t {
                Timer::ProbeRandomMember(_) => probe = Some(t),
                Timer::SendIndirectProbe { .. } => indirect = Some(t),
                _ => {}
            }
        }
        exchange(&mut node_x, &mut rt_x, &mut node_y, &mut rt_y, &mut x_results, obs);
        if let Some(t) = indirect {
            obs.event(Event::IndirectFires);
            node_x.handle_timer(t, &mut rt_x).unwrap();
            while let Some((_, t)) = rt_x.to_schedule() {
                if matches!(t, Timer::ProbeRandomMember(_)) {
                    probe = Some(t);
                }
            }
            exchange(&mut node_x, &mut rt_x, &mut node_y, &mut rt_y, &mut x_results, obs);
        }
        while let Some(n) = rt_x.to_notify() {
            obs.event(Event::Notified(&n));
            x_notifications.push(n);
        }
        let y_view = node_y
            .iter_membership_state()
            .find(|m| m.id().addr == 1)
            .map(|m| (*m.id(), m.state()));
        obs.event(Event::EndOfPeriod(*node_x.identity(), y_view));
        drain(&mut rt_y);
        let _ = packets(&mut rt_x);
    }

    let y_view_of_x = node_y
        .iter_membership_state()
        .find(|m| m.id().addr == 1)
        .map(|m| (*m.id(), m.state()));
    SymptomOutcome {
        x_results,
        x_notifications,
        x_identity: *node_x.identity(),
        y_view_of_x,
    }
}

#[test]
fn down_member_learns_it_was_declared_down() {
    let out = symptom_scenario(3, &mut Quiet);
    assert!(!out.x_results.is_empty(), "Y never answered X");
    for r in &out.x_results {
        assert_eq!(&Ok(()), r, "X could not process Y's reply to its ping");
    }
    let renewed = Node { addr: 1, generation: 1 };
    assert_eq!(renewed, out.x_identity, "X did not rejoin under a new identity (once)");
    assert!(out.x_notifications.contains(&Notification::Rejoin(renewed)));
    assert_eq!(
        Some((renewed, State::Alive)),
        out.y_view_of_x,
        "Y does not have X's renewed identity as alive"
    );
}

#[test]
fn repeated_notices_spend_no_broadcasts() {
    let x = Node { addr: 1, generation: 0 };
    let y = Node { addr: 2, generation: 0 };
    let z = Node { addr: 3, generation: 0 };

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
    node_x.handle_timer(probe, &mut rt_x).unwrap();
    let ping = drain(&mut rt_x).packets.remove(0).1;

    // Y considers X down, Z alive, and has three settings to disseminate.
    let mut node_y = agent(y, 8);
    let mut rt_y = AccumulatingRuntime::new();
    node_y
        .apply_many(
            [Member::new(x, 0, State::Down), Member::alive(z)].into_iter(),
            &mut rt_y,
        )
        .unwrap();
    for setting in [[1, 1, b'o', b'n'], [2, 3, b'4', b'2'], [3, 1, b'n', b'o']] {
        assert_eq!(Ok(true), node_y.add_broadcast(&setting));
    }
    drain(&mut rt_y);
    let backlog = node_y.custom_broadcast_backlog();

    // X's ping reaches Y over and over (retransmissions, duplicates) before X hears back.
    for i in 0..15 {
        node_y.handle_data(&ping, &mut rt_y).unwrap();
        let replies = drain(&mut rt_y).packets;
        assert_eq!(1, replies.len(), "delivery {i}: Y replies to the down member once");
        assert_eq!(x, replies[0].0);

        // Whichever of these notices X processes first, it can act on it.
        let mut fresh_x = agent(x, 100 + i);
        let mut fresh_rt = AccumulatingRuntime::new();
        fresh_x
            .apply_many([Member::alive(y)].into_iter(), &mut fresh_rt)
            .unwrap();
        assert_eq!(
            Ok(()),
            fresh_x.handle_data(&replies[0].1, &mut fresh_rt),
            "delivery {i}: X could not process Y's notice"
        );
        assert_eq!(Node { addr: 1, generation: 1 }, *fresh_x.identity());
    }

    assert_eq!(
        backlog,
        node_y.custom_broadcast_backlog(),
        "Y used up broadcasts meant for live members on notices to a member it considers down"
    );
}
