//! Peers share presence (cursors, status) through loro's `EphemeralStore`: each peer sets its own
//! keys and the peers pass encoded states to each other, some of them relaying everything they
//! hold. A key's age is the age of its owner's last write, on every peer: it expires everywhere
//! once its owner has been silent for the timeout, a newer write of the owner always wins over an
//! older one, and a state that was already expired when it arrived is never shown.

use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use loro_internal::awareness::EphemeralStore;
use loro_internal::LoroValue;

/// The timeout of every store in the scenarios, in milliseconds.
pub const TIMEOUT_MS: i64 = 150;

/// A small deterministic generator (splitmix64), so that a seed always replays the same schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2545f4914f6cdd1d)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// What the scenarios tell an observer (the bundle generator prints it; the tests ignore it).
pub trait Observer {
    fn note(&mut self, _at_ms: u128, _line: String) {}
}

pub struct Quiet;
impl Observer for Quiet {}

pub struct Peer {
    pub name: String,
    pub store: EphemeralStore,
    /// Keys that appeared through an import, as the store's subscribers were told.
    pub added: Arc<Mutex<Vec<String>>>,
    _sub: loro_internal::Subscription,
}

impl Peer {
    pub fn new(name: &str) -> Peer {
        let store = EphemeralStore::new(TIMEOUT_MS);
        let added = Arc::new(Mutex::new(Vec::new()));
        let seen = added.clone();
        let sub = store.subscribe(Box::new(move |e| {
            seen.lock().unwrap().extend(e.added.iter().cloned());
            true
        }));
        Peer { name: name.into(), store, added, _sub: sub }
    }

    pub fn show(&self, key: &str) -> String {
        match self.store.get(key) {
            Some(v) => format!("{v:?}"),
            None => "-".into(),
        }
    }
}

pub fn int(v: i64) -> LoroValue {
    LoroValue::I64(v)
}

/// Time since the scenario started, for the observer.
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }
    pub fn ms(&self) -> u128 {
        self.0.elapsed().as_millis()
    }
}

/// The reported session: client A and client C talk through a relay S; every 25 ms S sends C
/// everything it holds, and about 12 ms later C sends S everything it holds. A publishes its
/// cursor, then closes. Three timeouts later, S and C must have dropped A's cursor while C's own
/// keeps being renewed.
pub fn reported(obs: &mut dyn Observer) -> Result<(), String> {
    let clock = Clock::start();
    let a = Peer::new("client-a");
    let s = Peer::new("relay");
    let c = Peer::new("client-c");
    a.store.set("cursor/a", int(7));
    s.store.apply(&a.store.encode("cursor/a")).map_err(|e| e.to_string())?;
    obs.note(clock.ms(), "client-a sets cursor/a = 7 and sends it to the relay".into());
    c.store.set("cursor/c", int(1));
    obs.note(clock.ms(), "client-c sets cursor/c = 1".into());
    obs.note(clock.ms(), "client-a closes (it sends nothing more)".into());
    // Eighteen rounds of at least 25 ms each: three timeouts or more.
    for round in 0..18 {
        // The relay's broadcast timer and client-c's timer fire about 12 ms apart.
        sleep(Duration::from_millis(13));
        c.store.apply(&s.store.encode_all()).map_err(|e| e.to_string())?;
        sleep(Duration::from_millis(12));
        c.store.set("cursor/c", int(1 + (round % 3) as i64));
        s.store.apply(&c.store.encode_all()).map_err(|e| e.to_string())?;
        if round % 6 == 0 {
            obs.note(
                clock.ms(),
                format!(
                    "round {round}: relay <-> client-c exchange encode_all; relay shows cursor/a = {}, client-c shows cursor/a = {}",
                    s.show("cursor/a"),
                    c.show("cursor/a")
                ),
            );
        }
    }
    s.store.remove_outdated();
    c.store.remove_outdated();
    obs.note(
        clock.ms(),
        format!(
            "after remove_outdated: relay shows cursor/a = {}, cursor/c = {}; client-c shows cursor/a = {}, cursor/c = {}",
            s.show("cursor/a"),
            s.show("cursor/c"),
            c.show("cursor/a"),
            c.show("cursor/c")
        ),
    );
    for p in [&s, &c] {
        if p.store.get("cursor/a").is_some() {
            return Err(format!(
                "{} still shows client-a's cursor three timeouts ({} ms) after client-a's last write",
                p.name,
                3 * TIMEOUT_MS
            ));
        }
    }
    if s.store.get("cursor/c").is_none() {
        return Err("the relay dropped client-c's cursor although client-c keeps writing it".into());
    }
    Ok(())
}

/// A writer's two writes reach a reader late but in order: the reader must end with the second.
/// With `via_relay` they pass through a relay first.
pub fn late_in_order(via_relay: bool, obs: &mut dyn Observer) -> Result<(), String> {
    let clock = Clock::start();
    let w = Peer::new("writer");
    let relay = Peer::new("relay");
    let r = Peer::new("reader");
    w.store.set("status/w", LoroValue::from("typing"));
    let first = w.store.encode("status/w");
    sleep(Duration::from_millis(10));
    w.store.set("status/w", LoroValue::from("idle"));
    let second = w.store.encode("status/w");
    obs.note(clock.ms(), "writer sets status/w = typing, then 10 ms later idle".into());
    sleep(Duration::from_millis(30));
    if via_relay {
        relay.store.apply(&first).map_err(|e| e.to_string())?;
        let one = relay.store.encode_all();
        relay.store.apply(&second).map_err(|e| e.to_string())?;
        let two = relay.store.encode_all();
        r.store.apply(&one).map_err(|e| e.to_string())?;
        r.store.apply(&two).map_err(|e| e.to_string())?;
    } else {
        r.store.apply(&first).map_err(|e| e.to_string())?;
        r.store.apply(&second).map_err(|e| e.to_string())?;
    }
    obs.note(clock.ms(), format!("reader receives both, in order, 30 ms late: shows status/w = {}", r.show("status/w")));
    if r.store.get("status/w") != Some(LoroValue::from("idle")) {
        return Err(format!("the reader shows status/w = {} after receiving the writer's later write", r.show("status/w")));
    }
    Ok(())
}

/// A state delayed past the timeout must not appear on the peer it finally reaches.
pub fn expired_on_arrival(obs: &mut dyn Observer) -> Result<(), String> {
    let clock = Clock::start();
    let w = Peer::new("writer");
    let r = Peer::new("reader");
    w.store.set("cursor/w", int(3));
    let msg = w.store.encode("cursor/w");
    let written = Instant::now();
    sleep(Duration::from_millis(TIMEOUT_MS as u64 + 60));
    while written.elapsed() < Duration::from_millis(TIMEOUT_MS as u64 + 60) {
        sleep(Duration::from_millis(5));
    }
    r.store.apply(&msg).map_err(|e| e.to_string())?;
    obs.note(clock.ms(), format!("reader receives cursor/w {} ms after it was written: shows {}", written.elapsed().as_millis(), r.show("cursor/w")));
    if r.store.get("cursor/w").is_some() || !r.added.lock().unwrap().is_empty() {
        return Err("a state that had expired before it arrived is shown to the reader".into());
    }
    Ok(())
}

/// A message in flight: what was encoded, from whom, and when it is delivered.
struct Flight {
    to: usize,
    at_tick: u64,
    bytes: Vec<u8>,
}

/// One seeded session: three to five peers, one of them a relay that everyone talks to or a full
/// mesh, each peer writing its own keys at random ticks, messages (single keys or whole stores)
/// delayed by up to a few ticks, one peer leaving for good. Checks that a newer write never loses
/// to an older one, that the leaver's keys vanish everywhere once it has been silent for the
/// timeout, and that the others converge.
pub fn session(seed: u64, obs: &mut dyn Observer) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let n = 3 + rng.below(3) as usize;
    let star = rng.below(2) == 0;
    let peers: Vec<Peer> = (0..n).map(|i| Peer::new(&format!("p{i}"))).collect();
    let leaver = 1 + rng.below(n as u64 - 1) as usize;
    let leave_tick = 4 + rng.below(6);
    let ticks = leave_tick + 3 * (TIMEOUT_MS as u64 / 10) + 4;
    // The last value each peer wrote for its key, and its sequence number.
    let mut version = vec![0i64; n];
    // The highest version of each owner's key a peer has shown so far.
    let mut seen = vec![vec![0i64; n]; n];
    let mut flights: Vec<Flight> = Vec::new();
    let mut left_at: Option<Instant> = None;
    for tick in 0..ticks {
        // Writes.
        for i in 0..n {
            if i == leaver && tick >= leave_tick {
                continue;
            }
            if tick == 0 || rng.below(3) == 0 {
                version[i] += 1;
                peers[i].store.set(&format!("k/{i}"), int(version[i]));
                // Owners push their own key to their neighbours.
                for j in 0..n {
                    if j != i && (!star || i == 0 || j == 0) {
                        let delay = rng.below(3);
                        flights.push(Flight { to: j, at_tick: tick + delay, bytes: peers[i].store.encode(&format!("k/{i}")) });
                    }
                }
            }
        }
        if tick == leave_tick {
            left_at = Some(Instant::now());
            obs.note(0, format!("tick {tick}: p{leaver} leaves"));
        }
        // Gossip of whole stores between neighbours (the relay in a star, anyone in a mesh).
        for i in 0..n {
            if i == leaver && tick >= leave_tick {
                continue;
            }
            if rng.below(2) == 0 {
                let j = if star {
                    if i == 0 { 1 + rng.below(n as u64 - 1) as usize } else { 0 }
                } else {
                    (i + 1 + rng.below(n as u64 - 1) as usize) % n
                };
                if j == leaver && tick >= leave_tick {
                    continue;
                }
                let delay = rng.below(3);
                flights.push(Flight { to: j, at_tick: tick + delay, bytes: peers[i].store.encode_all() });
            }
        }
        // Deliveries due now, oldest first.
        let mut due = Vec::new();
        let mut k = 0;
        while k < flights.len() {
            if flights[k].at_tick <= tick {
                due.push(flights.remove(k));
            } else {
                k += 1;
            }
        }
        for f in due {
            if f.to == leaver && tick >= leave_tick {
                continue;
            }
            peers[f.to].store.apply(&f.bytes).map_err(|e| e.to_string())?;
        }
        // A newer write of an owner is never replaced by an older one.
        for p in 0..n {
            for o in 0..n {
                if let Some(LoroValue::I64(v)) = peers[p].store.get(&format!("k/{o}")) {
                    if v < seen[p][o] {
                        return Err(format!(
                            "seed {seed}, tick {tick}: p{p} went back from version {} to {v} of p{o}'s key",
                            seen[p][o]
                        ));
                    }
                    seen[p][o] = v;
                }
            }
        }
        sleep(Duration::from_millis(10));
    }
    let left_at = left_at.ok_or("the leaver never left")?;
    while left_at.elapsed() < Duration::from_millis(TIMEOUT_MS as u64 + 40) {
        sleep(Duration::from_millis(5));
    }
    // Everyone still there exchanges whole stores once more, promptly.
    for _ in 0..2 {
        for i in 0..n {
            for j in 0..n {
                if i != j && i != leaver && j != leaver && (!star || i == 0 || j == 0) {
                    let bytes = peers[i].store.encode_all();
                    peers[j].store.apply(&bytes).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    for p in 0..n {
        if p == leaver {
            continue;
        }
        peers[p].store.remove_outdated();
        if peers[p].store.get(&format!("k/{leaver}")).is_some() {
            return Err(format!(
                "seed {seed}: p{p} still shows p{leaver}'s key {} ms after p{leaver} left (timeout {TIMEOUT_MS} ms)",
                left_at.elapsed().as_millis()
            ));
        }
    }
    // The others converge on each owner's last write.
    for o in 0..n {
        if o == leaver {
            continue;
        }
        version[o] += 1;
        peers[o].store.set(&format!("k/{o}"), int(version[o]));
    }
    for _ in 0..2 {
        for i in 0..n {
            for j in 0..n {
                if i != j && i != leaver && j != leaver && (!star || i == 0 || j == 0) {
                    let bytes = peers[i].store.encode_all();
                    peers[j].store.apply(&bytes).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    for p in 0..n {
        if p == leaver {
            continue;
        }
        for o in 0..n {
            if o == leaver {
                continue;
            }
            if peers[p].store.get(&format!("k/{o}")) != Some(int(version[o])) {
                return Err(format!(
                    "seed {seed}: p{p} shows {} for p{o}'s key, whose last write is {}",
                    peers[p].show(&format!("k/{o}")),
                    version[o]
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn departed_client_cursor_expires_through_relay() {
    reported(&mut Quiet).unwrap();
}

#[test]
fn later_write_wins_when_delivered_late() {
    late_in_order(false, &mut Quiet).unwrap();
    late_in_order(true, &mut Quiet).unwrap();
}

#[test]
fn state_expired_in_flight_is_not_shown() {
    expired_on_arrival(&mut Quiet).unwrap();
}

#[test]
fn seeded_sessions_keep_presence_consistent() {
    let base = seed();
    for k in 0..3 {
        session(base.wrapping_mul(104_729).wrapping_add(k), &mut Quiet).unwrap();
    }
}
