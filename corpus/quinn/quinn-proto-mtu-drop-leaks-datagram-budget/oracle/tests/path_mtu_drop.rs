//! Two QUIC endpoints (a client that streams unreliable datagrams and a server that
//! receives them) connected by a simulated network path. The path delays every datagram by
//! a seeded amount, and at a seeded moment its MTU shrinks: from then on it silently drops
//! every UDP payload larger than the new limit, the way a route change through a tunnel does.
//!
//! Property: whatever the path does to its MTU, the sender's datagram send buffer stays
//! consistent with what is really queued: sending never panics, datagrams sent after the
//! shrink keep reaching the peer, and once the queue has drained the whole configured send
//! buffer is available again (a non-dropping send of a small datagram then succeeds).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event,
    SendDatagramError, ServerConfig, TransportConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed Ed25519 certificate for "peer.test" (fixed, so every run sends the same bytes).
const CERT_HEX: &str = "3082011d3081d0a0030201020214737fea70ce891af105314d729b51e1e300854f39300506032b65703021311f301d06035504030c16726367656e2073656c66207369676e656420636572743020170d3735303130313030303030305a180f34303936303130313030303030305a3021311f301d06035504030c16726367656e2073656c66207369676e65642063657274302a300506032b6570032100d96b9b3a63ed98d050829f812a0e21034a91807c44c86431689deec6a44ed4f9a318301630140603551d11040d300b8209706565722e74657374300506032b6570034100434dfc2b3d96a2d12b6a7ac099d8dbd2b445123d3bcdb761c469db2f1f22c515da947cac03f1991957232a6dca0a42df2d0cb6d7d644d9ebf524a19de1dced0a";
const KEY_HEX: &str = "3051020101300506032b657004220420f562dd56debf659448927cc7ebb49da6a91a329d3e65bae2156eb0d91e2b1131812100d96b9b3a63ed98d050829f812a0e21034a91807c44c86431689deec6a44ed4f9";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// xorshift64*: the only source of randomness in the scenario.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How the application on the client queues its datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// `send(data, true)`: make room by dropping the oldest queued datagrams.
    DropOldest,
    /// `send(data, false)`: report `Blocked` when the send buffer is full.
    NoDrop,
}

/// One run's parameters, all derived from a seed.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub seed: u64,
    pub mode: SendMode,
    /// One-way delay of the path, in milliseconds, plus up to `jitter_ms` more per datagram.
    pub delay_ms: u64,
    pub jitter_ms: u64,
    /// Largest UDP payload the path carries before and after the shrink.
    pub mtu_before: usize,
    pub mtu_after: usize,
    /// Simulated time (ms after the start) at which the path MTU shrinks.
    pub shrink_at_ms: u64,
    /// The client's datagram send buffer, in bytes.
    pub send_buffer: usize,
    /// How many datagrams the application offers per millisecond while it is sending.
    pub per_ms: u64,
    /// Simulated time (ms) at which the application stops offering datagrams.
    pub stop_at_ms: u64,
}

impl Plan {
    pub fn from_seed(seed: u64, mode: SendMode) -> Plan {
        let mut r = Rng::new(seed);
        Plan {
            seed,
            mode,
            delay_ms: 5 + r.below(20),
            jitter_ms: 1 + r.below(6),
            mtu_before: 1500,
            mtu_after: 1240 + r.below(41) as usize,
            shrink_at_ms: 1_500 + r.below(1_500),
            send_buffer: [16 * 1024, 48 * 1024, 160 * 1024][r.below(3) as usize],
            per_ms: 1 + r.below(3),
            stop_at_ms: 9_000,
        }
    }
}

/// One datagram on the wire, for the trace.
#[derive(Clone, Debug)]
pub struct Hop {
    pub sent_ms: u64,
    pub from_client: bool,
    pub len: usize,
    pub delivered: bool,
}

/// What one run observed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Simulated time (ms) at which the path MTU shrank (None if the run ended before).
    pub shrunk_at_ms: Option<u64>,
    /// Datagrams the server received, by the simulated time (ms) the client queued them.
    pub received_queued_ms: Vec<u64>,
    /// Datagrams the client application queued successfully, and those refused as Blocked.
    pub queued: u64,
    pub blocked: u64,
    /// Largest UDP payload the client sent before the shrink.
    pub max_client_payload_before: usize,
    /// Black holes the client reports having detected.
    pub black_holes: u64,
    /// `send_buffer_space()` on the client after the queue had time to drain.
    pub space_after_drain: usize,
    /// The error of a small non-dropping send after the drain (empty: it succeeded).
    pub small_send_after_drain: Option<String>,
    /// Whether the connection was still alive at the end.
    pub alive: bool,
    /// Datagrams offered per phase, for the trace.
    pub hops: Vec<Hop>,
    /// The client's `max_size()` for datagrams, sampled when it changes: (ms, size).
    pub max_size_changes: Vec<(u64, usize)>,
    /// `send_buffer_space()` sampled every 500 ms: (ms, bytes).
    pub space_samples: Vec<(u64, usize)>,
}

struct Side {
    endpoint: Endpoint,
    conn: Option<(ConnectionHandle, Connection)>,
    addr: SocketAddr,
}

struct Packet {
    to_client: bool,
    from: SocketAddr,
    data: Vec<u8>,
}

fn ms(start: Instant, now: Instant) -> u64 {
    now.duration_since(start).as_millis() as u64
}

/// The datagram payload: its queue time and a sequence number, padded to `len`.
fn payload(queued_ms: u64, seq: u64, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&queued_ms.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    while v.len() < len {
        v.push((v.len() as u64 ^ seq) as u8);
    }
    Bytes::from(v)
}

fn configs(plan: &Plan) -> (ClientConfig, Arc<ServerConfig>) {
    let cert = CertificateDer::from(unhex(CERT_HEX));
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(unhex(KEY_HEX)));
    let mut server = ServerConfig::with_single_cert(vec![cert.clone()], key).unwrap();
    let mut st = TransportConfig::default();
    st.datagram_receive_buffer_size(Some(4 * 1024 * 1024));
    server.transport_config(Arc::new(st));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut client = ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    let mut ct = TransportConfig::default();
    ct.datagram_send_buffer_size(plan.send_buffer);
    ct.datagram_receive_buffer_size(Some(64 * 1024));
    client.transport_config(Arc::new(ct));
    (client, Arc::new(server))
}

/// Runs one connection along `plan`. Panics inside quinn-proto propagate to the caller.
pub fn run(plan: Plan) -> Outcome {
    let mut out = Outcome::default();
    run_into(plan, &mut out);
    out
}

/// Like `run`, recording into `out` as the run goes (so a caller that catches a panic keeps
/// what happened before it).
pub fn run_into(plan: Plan, out: &mut Outcome) {
    let mut rng = Rng::new(plan.seed ^ 0x5151_5151);
    let (client_cfg, server_cfg) = configs(&plan);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&plan.seed.to_le_bytes());
    let ep_cfg = Arc::new(EndpointConfig::default());
    let client_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 4433));
    let server_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4433));
    let mut client = Side {
        endpoint: Endpoint::new(ep_cfg.clone(), None, true, Some(seed_bytes)),
        conn: None,
        addr: client_addr,
    };
    seed_bytes[8] = 1;
    let mut server = Side {
        endpoint: Endpoint::new(ep_cfg, Some(server_cfg), true, Some(seed_bytes)),
        conn: None,
        addr: server_addr,
    };

    let start = Instant::now();
    let mut now = start;
    let end = start + Duration::from_millis(plan.stop_at_ms + 6_000);
    let shrink_at = start + Duration::from_millis(plan.shrink_at_ms);
    let stop_at = start + Duration::from_millis(plan.stop_at_ms);

    let conn = client
        .endpoint
        .connect(now, client_cfg, server_addr, "peer.test")
        .unwrap();
    client.conn = Some(conn);

    // In-flight datagrams keyed by (arrival time, sequence).
    let mut wire: BTreeMap<(Instant, u64), Packet> = BTreeMap::new();
    let mut wire_seq = 0u64;
    let mut buf = Vec::new();
    let mut connected = false;
    let mut app_seq = 0u64;
    let mut next_offer = start;
    let mut next_sample = start;
    let mut last_max_size = 0usize;
    let mut drained_checked = false;

    loop {
        let mtu = if now >= shrink_at {
            out.shrunk_at_ms.get_or_insert(plan.shrink_at_ms);
            plan.mtu_after
        } else {
            plan.mtu_before
        };

        // Application on the client: offer datagrams as large as currently allowed.
        if connected && now < stop_at {
            let (_, c) = client.conn.as_mut().unwrap();
            while next_offer <= now {
                for _ in 0..plan.per_ms {
                    let Some(max) = c.datagrams().max_size() else { break };
                    if max != last_max_size {
                        out.max_size_changes.push((ms(start, now), max));
                        last_max_size = max;
                    }
                    let len = max - rng.below(40) as usize;
                    let data = payload(ms(start, now), app_seq, len.max(16));
                    app_seq += 1;
                    match c.datagrams().send(data, plan.mode == SendMode::DropOldest) {
                        Ok(()) => out.queued += 1,
                        Err(SendDatagramError::Blocked(_)) => out.blocked += 1,
                        Err(e) => panic!("unexpected datagram send error: {e}"),
                    }
                }
                next_offer += Duration::from_millis(1);
            }
        }
        if next_sample <= now {
            if let Some((_, c)) = client.conn.as_mut() {
                out.space_samples
                    .push((ms(start, next_sample), c.datagrams().send_buffer_space()));
            }
            next_sample += Duration::from_millis(500);
        }
        // Long after the application stopped, the queue has drained: check the budget.
        if !drained_checked && now >= stop_at + Duration::from_millis(4_000) {
            drained_checked = true;
            let (_, c) = client.conn.as_mut().unwrap();
            out.space_after_drain = c.datagrams().send_buffer_space();
            out.small_send_after_drain =
                match c.datagrams().send(payload(ms(start, now), u64::MAX, 64), false) {
                    Ok(()) => Some(String::new()),
                    Err(e) => Some(e.to_string()),
                };
        }

        // Both connections: endpoint events, application events, transmits.
        for side_is_client in [true, false] {
            let side = if side_is_client { &mut client } else { &mut server };
            let Some((ch, conn)) = side.conn.as_mut() else { continue };
            while let Some(ev) = conn.poll_endpoint_events() {
                if let Some(cev) = side.endpoint.handle_event(*ch, ev) {
                    conn.handle_event(cev);
                }
            }
            while let Some(ev) = conn.poll() {
                match ev {
                    Event::Connected => {
                        if side_is_client {
                            connected = true;
                            next_offer = now;
                        }
                    }
                    Event::DatagramReceived if !side_is_client => {
                        while let Some(d) = conn.datagrams().recv() {
                            let q = u64::from_be_bytes(d[..8].try_into().unwrap());
                            out.received_queued_ms.push(q);
                        }
                    }
                    _ => {}
                }
            }
            loop {
                buf.clear();
                let Some(t) = conn.poll_transmit(now, 1, &mut buf) else { break };
                let data = buf[..t.size].to_vec();
                let delivered = data.len() <= mtu;
                if side_is_client && now < shrink_at {
                    out.max_client_payload_before = out.max_client_payload_before.max(data.len());
                }
                if side_is_client {
                    out.hops.push(Hop {
                        sent_ms: ms(start, now),
                        from_client: true,
                        len: data.len(),
                        delivered,
                    });
                }
                let delay = plan.delay_ms * 1000 + rng.below(plan.jitter_ms * 1000 + 1);
                if delivered {
                    wire_seq += 1;
                    wire.insert(
                        (now + Duration::from_micros(delay), wire_seq),
                        Packet { to_client: !side_is_client, from: side.addr, data },
                    );
                }
            }
        }

        if now >= end {
            break;
        }

        // Advance simulated time to the next event.
        let mut next = end;
        if let Some((&(t, _), _)) = wire.iter().next() {
            next = next.min(t);
        }
        for side in [&mut client, &mut server] {
            if let Some((_, c)) = side.conn.as_mut() {
                if let Some(t) = c.poll_timeout() {
                    next = next.min(t);
                }
            }
        }
        if connected && now < stop_at {
            next = next.min(next_offer);
        }
        if !drained_checked {
            next = next.min(stop_at + Duration::from_millis(4_000));
        }
        next = next.min(next_sample);
        if now < shrink_at {
            next = next.min(shrink_at);
        }
        now = now.max(next);

        // Deliver what has arrived.
        while let Some((&(t, s), _)) = wire.iter().next() {
            if t > now {
                break;
            }
            let p = wire.remove(&(t, s)).unwrap();
            let side = if p.to_client { &mut client } else { &mut server };
            buf.clear();
            let ev = side
                .endpoint
                .handle(now, p.from, None, None, BytesMut::from(&p.data[..]), &mut buf);
            match ev {
                Some(DatagramEvent::ConnectionEvent(_, cev)) => {
                    if let Some((_, c)) = side.conn.as_mut() {
                        c.handle_event(cev);
                    }
                }
                Some(DatagramEvent::NewConnection(incoming)) => {
                    buf.clear();
                    if let Ok(conn) = side.endpoint.accept(incoming, now, &mut buf, None) {
                        side.conn = Some(conn);
                    }
                }
                Some(DatagramEvent::Response(_)) | None => {}
            }
        }
        for side in [&mut client, &mut server] {
            if let Some((_, c)) = side.conn.as_mut() {
                if c.poll_timeout().map_or(false, |t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
    }

    let (_, c) = client.conn.as_mut().unwrap();
    out.black_holes = c.stats().path.black_holes_detected;
    out.alive = !c.is_closed();
}

/// Checks the property on one run's outcome; returns the first violation.
pub fn check(plan: &Plan, out: &Outcome) -> Result<(), String> {
    if out.max_client_payload_before <= 1300 {
        return Err(format!(
            "path MTU discovery never used the larger path before the shrink (largest payload {})",
            out.max_client_payload_before
        ));
    }
    if !out.alive {
        return Err("the connection died".into());
    }
    let shrink = plan.shrink_at_ms;
    let late: Vec<u64> = out
        .received_queued_ms
        .iter()
        .copied()
        .filter(|&q| q >= shrink + 2_000 && q < plan.stop_at_ms)
        .collect();
    if late.len() < 200 {
        return Err(format!(
            "only {} datagrams queued more than 2 s after the MTU shrink reached the peer",
            late.len()
        ));
    }
    if out.space_after_drain != plan.send_buffer {
        return Err(format!(
            "after the queue drained, send_buffer_space() is {} of a {} byte buffer",
            out.space_after_drain, plan.send_buffer
        ));
    }
    match out.small_send_after_drain.as_deref() {
        Some("") => {}
        Some(e) => return Err(format!("a 64-byte send after the drain failed: {e}")),
        None => return Err("the run ended before the drain check".into()),
    }
    Ok(())
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn run_and_check(seed: u64, mode: SendMode) {
    let plan = Plan::from_seed(seed, mode);
    let out = run(plan);
    if let Err(e) = check(&plan, &out) {
        panic!("seed {seed} {mode:?} {plan:?}: {e}");
    }
}

#[test]
fn drop_oldest_sender_survives_mtu_shrink() {
    let base = seed();
    for i in 0..3 {
        run_and_check(base * 1_000 + i, SendMode::DropOldest);
    }
}

#[test]
fn blocking_sender_recovers_budget_after_mtu_shrink() {
    let base = seed();
    for i in 0..3 {
        run_and_check(base * 1_000 + 500 + i, SendMode::NoDrop);
    }
}
