//! A member restarts (new identity, same address) while another member is in the middle of
//! probing its old identity. The prober must not ask the restarted process to ping the
//! identity it just replaced: that request ends up back at the restarted process itself.
//!
//! Beyond that run, the seeded test checks the property with several members, a probe target
//! chosen by the prober, the change reaching the prober in different ways (an announce or a
//! ping from the new identity, a third member's gossip, the application itself, duplicated) or
//! the target going down instead: once the probed identity is no longer an active member, the
//! indirect stage asks nobody to ping it; and probing keeps working for active members.
//! `symptom_scenario` is the reported run, which the bundle generator replays.

use std::time::Duration;

use foca::{
    AccumulatingRuntime, BincodeCodec, Codec, Config, Error, Foca, Header, Identity, Member,
    Message, Notification, State, Timer,
};
use rand::{rngs::SmallRng, seq::SliceRandom, Rng, SeedableRng};
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

type Codec_ = BincodeCodec<bincode::DefaultOptions>;
pub type Agent = Foca<Node, Codec_, SmallRng, foca::NoCustomBroadcast>;

pub fn codec() -> Codec_ {
    BincodeCodec(bincode::DefaultOptions::new())
}

fn agent(id: Node, seed: u64) -> Agent {
    Foca::new(id, Config::simple(), SmallRng::seed_from_u64(seed), codec())
}

#[derive(Default)]
struct Drained {
    packets: Vec<(Node, Vec<u8>)>,
    timers: Vec<Timer<Node>>,
}

fn drain(rt: &mut AccumulatingRuntime<Node>) -> Drained {
    drain_seen("", rt, &mut Quiet)
}

/// Drains a runtime, telling `obs` what `who` scheduled and was notified of.
fn drain_seen(who: &str, rt: &mut AccumulatingRuntime<Node>, obs: &mut dyn Observer) -> Drained {
    let mut out = Drained::default();
    while let Some((dst, data)) = rt.to_send() {
        out.packets.push((dst, data.to_vec()));
    }
    while let Some((after, timer)) = rt.to_schedule() {
        obs.event(who, Event::Schedules(&timer, after));
        out.timers.push(timer);
    }
    while let Some(n) = rt.to_notify() {
        obs.event(who, Event::Notified(&n));
    }
    out
}

fn message_of(data: &[u8]) -> Message<Node> {
    let mut buf = data;
    codec().decode_header(&mut buf).expect("valid header").message
}

/// What happens in the reported run, as the bundle generator shows it.
pub enum Event<'a> {
    Learns(Node),
    Schedules(&'a Timer<Node>, Duration),
    Notified(&'a Notification<Node>),
    /// A timer fires; with the members A lists at that moment when they matter.
    Fires(&'a Timer<Node>, Option<Vec<Node>>),
    /// A packet on the network; `true` when nobody receives it.
    Packet(&'a [u8], bool),
    Restarted(Node),
    Handled(&'a Result<(), Error>),
}

/// Hooks for the bundle generator; the oracle uses the defaults.
pub trait Observer {
    fn event(&mut self, _at: &str, _event: Event<'_>) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// A two-process "network": packets are delivered to whichever process currently listens on
/// the destination address. Every `handle_data` result is recorded.
struct Net<'o> {
    a: (Agent, AccumulatingRuntime<Node>),
    p: (Agent, AccumulatingRuntime<Node>),
    errors: Vec<(Node, Error)>,
    ping_reqs_to_p: Vec<Message<Node>>,
    obs: &'o mut dyn Observer,
}

impl Net<'_> {
    fn deliver(&mut self, mut queue: Vec<(Node, Vec<u8>)>) {
        let mut hops = 0;
        while !queue.is_empty() {
            hops += 1;
            assert!(hops < 100, "packets keep bouncing");
            let mut next = Vec::new();
            for (dst, data) in queue.drain(..) {
                self.obs.event("network", Event::Packet(&data, false));
                let (node, rt, who) = match dst.addr {
                    1 => (&mut self.a.0, &mut self.a.1, "A#0"),
                    2 => (&mut self.p.0, &mut self.p.1, "P#1"),
                    _ => panic!("no process at {dst:?}"),
                };
                let me = *node.identity();
                let res = node.handle_data(&data, &mut *rt);
                self.obs.event(who, Event::Handled(&res));
                if let Err(e) = res {
                    self.errors.push((me, e));
                }
                for (to, d) in drain_seen(who, rt, &mut *self.obs).packets {
                    if me.addr == 1 && to.addr == 2 {
                        if let m @ Message::PingReq { .. } = message_of(&d) {
                            self.ping_reqs_to_p.push(m);
                        }
                    }
                    next.push((to, d));
                }
            }
            queue = next;
        }
    }
}

/// What the reported run ended with.
pub struct SymptomOutcome {
    pub first_probe: Vec<(Node, Message<Node>)>,
    pub indirect_for: Option<Node>,
    pub join_errors: Vec<(Node, Error)>,
    pub a_members: Vec<Node>,
    pub p_members: usize,
    pub ping_reqs_to_p: Vec<Message<Node>>,
    pub errors: Vec<(Node, Error)>,
}

/// The reported run: A probes P#0, which hangs; P restarts as P#1 and announces itself to A;
/// then A's indirect-probe timer for P#0 fires.
pub fn symptom_scenario(obs: &mut dyn Observer) -> SymptomOutcome {
    let a = Node { addr: 1, generation: 0 };
    let p_old = Node { addr: 2, generation: 0 };
    let p_new = Node { addr: 2, generation: 1 };

    let mut node_a = agent(a, 11);
    let mut rt_a = AccumulatingRuntime::new();
    node_a
        .apply_many([Member::alive(p_old)].into_iter(), &mut rt_a)
        .unwrap();
    obs.event("A#0", Event::Learns(p_old));
    let mut timers = drain_seen("A#0", &mut rt_a, obs).timers;
    let probe_timer = timers.remove(0);
    assert!(matches!(probe_timer, Timer::ProbeRandomMember(_)));

    // A's probe period starts: it pings P's current identity. P's process is hanging and
    // never answers; A schedules the indirect stage of the cycle.
    obs.event("A#0", Event::Fires(&probe_timer, None));
    node_a.handle_timer(probe_timer, &mut rt_a).unwrap();
    let probing = drain_seen("A#0", &mut rt_a, obs);
    for (_, d) in &probing.packets {
        obs.event("network", Event::Packet(d, true));
    }
    let first_probe = probing
        .packets
        .iter()
        .map(|(to, d)| (*to, message_of(d)))
        .collect();
    let indirect = probing
        .timers
        .into_iter()
        .find(|t| matches!(t, Timer::SendIndirectProbe { .. }))
        .expect("A schedules the indirect probe");
    let indirect_for = match &indirect {
        Timer::SendIndirectProbe { probed_id, .. } => Some(*probed_id),
        _ => None,
    };

    // Before that timer fires, P's process is restarted with the next generation and
    // announces itself to A, which replaces the old identity.
    obs.event("P", Event::Restarted(p_new));
    let mut node_p = agent(p_new, 22);
    let mut rt_p = AccumulatingRuntime::new();
    node_p.announce(a, &mut rt_p).unwrap();
    let announce = drain_seen("P#1", &mut rt_p, obs).packets;

    let mut net = Net {
        a: (node_a, rt_a),
        p: (node_p, rt_p),
        errors: Vec::new(),
        ping_reqs_to_p: Vec::new(),
        obs,
    };
    net.deliver(announce);
    let join_errors = std::mem::take(&mut net.errors);
    let a_members: Vec<Node> = net.a.0.iter_members().map(|m| *m.id()).collect();
    let p_members = net.p.0.num_members();

    // Now A's indirect-probe timer for the old identity fires.
    net.obs.event("A#0", Event::Fires(&indirect, Some(a_members.clone())));
    net.a.0.handle_timer(indirect, &mut net.a.1).unwrap();
    let out = drain_seen("A#0", &mut net.a.1, &mut *net.obs).packets;
    for (to, d) in &out {
        if let m @ Message::PingReq { .. } = message_of(d) {
            if to.addr == p_new.addr {
                net.ping_reqs_to_p.push(m);
            }
        }
    }
    net.deliver(out);

    SymptomOutcome {
        first_probe,
        indirect_for,
        join_errors,
        a_members,
        p_members,
        ping_reqs_to_p: net.ping_reqs_to_p,
        errors: net.errors,
    }
}

#[test]
fn restarted_member_is_not_asked_to_probe_its_old_identity() {
    let p_old = Node { addr: 2, generation: 0 };
    let p_new = Node { addr: 2, generation: 1 };
    let out = symptom_scenario(&mut Quiet);
    assert_eq!(1, out.first_probe.len());
    assert_eq!(p_old, out.first_probe[0].0);
    assert!(matches!(out.first_probe[0].1, Message::Ping(_)));
    assert_eq!(Some(p_old), out.indirect_for);
    assert!(out.join_errors.is_empty(), "join failed: {:?}", out.join_errors);
    assert_eq!(vec![p_new], out.a_members);
    assert_eq!(1, out.p_members);
    assert!(
        out.ping_reqs_to_p.is_empty(),
        "A asked P's new process to ping P's replaced identity on its behalf: {:?}",
        out.ping_reqs_to_p
    );
    assert!(
        out.errors.is_empty(),
        "handle_data failed during the probe: {:?}",
        out.errors
    );
}

/// The seed, as the grader passes it (1 when absent).
fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn packet(src: Node, dst: Node, message: Message<Node>, updates: &[Member<Node>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let header = Header {
        src,
        src_incarnation: 0,
        dst,
        message,
    };
    codec().encode_header(&header, &mut buf).unwrap();
    if !updates.is_empty() {
        buf.extend_from_slice(&(updates.len() as u16).to_be_bytes());
        for m in updates {
            codec().encode_member(m, &mut buf).unwrap();
        }
    }
    buf
}

fn take_timer(timers: &mut Vec<Timer<Node>>, pick: impl Fn(&Timer<Node>) -> bool) -> Option<Timer<Node>> {
    let pos = timers.iter().position(pick)?;
    Some(timers.remove(pos))
}

fn ping_reqs(packets: &[(Node, Vec<u8>)]) -> Vec<(Node, Message<Node>)> {
    packets
        .iter()
        .map(|(to, d)| (*to, message_of(d)))
        .filter(|(_, m)| matches!(m, Message::PingReq { .. }))
        .collect()
}

/// Runs the probe rounds drawn from `seed`; returns the first violation.
pub fn explore(seed: u64) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(0x1d1e ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let a = Node { addr: 1, generation: 0 };
    let n = rng.gen_range(2..=5u8);
    let mut current: Vec<Node> = (2..2 + n).map(|addr| Node { addr, generation: 0 }).collect();
    let mut node_a = agent(a, rng.gen());
    let mut rt = AccumulatingRuntime::new();
    node_a.apply_many(current.iter().map(|m| Member::alive(*m)), &mut rt).unwrap();
    let mut timers = drain(&mut rt).timers;
    let mut log = Vec::new();

    for round in 0..3 {
        // A probes a member of its choice, which does not answer.
        let probe = take_timer(&mut timers, |t| matches!(t, Timer::ProbeRandomMember(_)))
            .ok_or("no probe scheduled")?;
        node_a
            .handle_timer(probe, &mut rt)
            .map_err(|e| format!("{}\nprobe timer failed: {e:?}", log.join("\n")))?;
        let out = drain(&mut rt);
        timers.extend(out.timers);
        let Some(target) = out
            .packets
            .iter()
            .find(|(_, d)| matches!(message_of(d), Message::Ping(_)))
            .map(|(to, _)| *to)
        else {
            return Err(format!("{}\nround {round}: A pinged nobody", log.join("\n")));
        };
        let indirect = take_timer(&mut timers, |t| matches!(t, Timer::SendIndirectProbe { .. }))
            .ok_or("no indirect stage scheduled")?;
        let i = current.iter().position(|m| *m == target).ok_or("A pinged an unknown identity")?;
        let active_others: Vec<usize> = (0..current.len())
            .filter(|j| {
                *j != i
                    && node_a
                        .iter_membership_state()
                        .any(|m| *m.id() == current[*j] && m.state() != State::Down)
            })
            .collect();

        // Before the indirect stage, the target stops being an active member.
        // (Only while two others stay active, so that A keeps probing someone.)
        let goes_down = round > 0 && active_others.len() >= 2 && rng.gen_ratio(1, 3);
        let replaced = if goes_down {
            target
        } else {
            Node { addr: target.addr, generation: target.generation + 1 }
        };
        let update = if goes_down {
            Member::new(target, 0, State::Down)
        } else {
            Member::alive(replaced)
        };
        let deliveries = rng.gen_range(1..=2);
        let how = rng.gen_range(0..4);
        for _ in 0..deliveries {
            match (how, active_others.choose(&mut rng)) {
                (0, _) if !goes_down => {
                    let _ = node_a.handle_data(&packet(replaced, a, Message::Announce, &[]), &mut rt);
                }
                (1, _) if !goes_down => {
                    let _ = node_a.handle_data(&packet(replaced, a, Message::Ping(9), &[]), &mut rt);
                }
                (2, Some(j)) => {
                    let _ = node_a
                        .handle_data(&packet(current[*j], a, Message::Gossip, &[update.clone()]), &mut rt);
                }
                _ => node_a.apply_many(std::iter::once(update.clone()), &mut rt).unwrap(),
            }
        }
        timers.extend(drain(&mut rt).timers);
        log.push(format!(
            "round {round}: A probes {target:?}; before the indirect stage it learns {update:?} ({deliveries}x, way {how})"
        ));
        let still = node_a.iter_membership_state().any(|m| *m.id() == target && m.state() != State::Down);
        if still {
            return Err(format!("{}\nA did not take the update", log.join("\n")));
        }
        current[i] = replaced;

        node_a
            .handle_timer(indirect, &mut rt)
            .map_err(|e| format!("{}\nindirect timer failed: {e:?}", log.join("\n")))?;
        let out = drain(&mut rt);
        timers.extend(out.timers);
        let reqs = ping_reqs(&out.packets);
        if !reqs.is_empty() {
            return Err(format!(
                "{}\nA asked others to ping {target:?}, which is no longer an active member: {reqs:?}",
                log.join("\n")
            ));
        }

        // The next cycle probes an active member, which again does not answer: this time
        // the indirect stage must go ahead through the other active members.
        let probe = take_timer(&mut timers, |t| matches!(t, Timer::ProbeRandomMember(_)))
            .ok_or("no probe scheduled after the skipped stage")?;
        node_a
            .handle_timer(probe, &mut rt)
            .map_err(|e| format!("{}\nnext probe failed: {e:?}", log.join("\n")))?;
        let out = drain(&mut rt);
        timers.extend(out.timers);
        let Some(next_target) = out
            .packets
            .iter()
            .find(|(_, d)| matches!(message_of(d), Message::Ping(_)))
            .map(|(to, _)| *to)
        else {
            return Err(format!("{}\nprobing stopped after round {round}", log.join("\n")));
        };
        let indirect = take_timer(&mut timers, |t| matches!(t, Timer::SendIndirectProbe { .. }))
            .ok_or("no indirect stage scheduled")?;
        let relays = node_a
            .iter_membership_state()
            .filter(|m| m.state() != State::Down && *m.id() != next_target)
            .count()
            .min(3);
        node_a
            .handle_timer(indirect, &mut rt)
            .map_err(|e| format!("{}\nindirect timer failed: {e:?}", log.join("\n")))?;
        let out = drain(&mut rt);
        timers.extend(out.timers);
        let reqs = ping_reqs(&out.packets);
        log.push(format!("round {round}: A probes {next_target:?}, silent; it asks {reqs:?}"));
        let wrong = reqs.iter().any(|(to, m)| {
            to.addr == next_target.addr
                || !matches!(m, Message::PingReq { target, .. } if *target == next_target)
        });
        if reqs.len() != relays || wrong {
            return Err(format!(
                "{}\nthe indirect stage for the active member {next_target:?} should ask {relays} other active member(s)",
                log.join("\n")
            ));
        }
    }
    Ok(())
}

#[test]
fn no_indirect_probe_of_an_inactive_identity() {
    let seed = seed();
    if let Err(why) = explore(seed) {
        panic!("seed {seed}:\n{why}");
    }
}
