//! A client sends a burst of requests to a server over one connection whose stream limit
//! (`Config::with_max_concurrent_streams`) is smaller than the burst. The server's application
//! holds the requests it receives for a while before answering.
//!
//! The property: every request the client sends ends with exactly one event for it, a response
//! or an outbound failure, within the request timeout; the client never has more streams open on
//! the connection than the limit (the server never holds more than that many of its requests at
//! once); streams the server opened towards the client count against the same limit; and the
//! connection keeps serving requests afterwards.
//!
//! The seeded test draws the limit, the burst size, the server's answer order and whether the
//! server first sends requests of its own that the client holds. `symptom_scenario` is the
//! reported run, which the bundle generator replays.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::{poll_fn, Future},
    io,
    pin::pin,
    task::Poll,
    time::Duration,
};

use async_trait::async_trait;
use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p_core::{transport::MemoryTransport, upgrade::Version, Multiaddr, Transport};
use libp2p_identity::Keypair;
use libp2p_request_response as rr;
use libp2p_swarm::{StreamProtocol, Swarm, SwarmEvent};

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
pub const HOLD: Duration = Duration::from_millis(300);

#[derive(Clone, Default)]
pub struct U32Codec;

async fn read_u32<T: futures::AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<u32> {
    let mut b = [0u8; 4];
    io.read_exact(&mut b).await?;
    Ok(u32::from_be_bytes(b))
}

async fn write_u32<T: futures::AsyncWrite + Unpin + Send>(io: &mut T, v: u32) -> io::Result<()> {
    io.write_all(&v.to_be_bytes()).await
}

#[async_trait]
impl rr::Codec for U32Codec {
    type Protocol = StreamProtocol;
    type Request = u32;
    type Response = u32;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<u32>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        read_u32(io).await
    }
    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<u32>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        read_u32(io).await
    }
    async fn write_request<T>(&mut self, _: &StreamProtocol, io: &mut T, v: u32) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        write_u32(io, v).await
    }
    async fn write_response<T>(&mut self, _: &StreamProtocol, io: &mut T, v: u32) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        write_u32(io, v).await
    }
}

type Node = Swarm<rr::Behaviour<U32Codec>>;
type Ev = rr::Event<u32, u32>;

fn node(index: u8, limit: usize) -> Node {
    let key = Keypair::ed25519_from_bytes([index + 1; 32]).expect("key");
    let peer_id = key.public().to_peer_id();
    let transport = MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(libp2p_plaintext::Config::new(&key))
        .multiplex(libp2p_yamux::Config::default())
        .boxed();
    let cfg = rr::Config::default()
        .with_request_timeout(REQUEST_TIMEOUT)
        .with_max_concurrent_streams(limit);
    let behaviour = rr::Behaviour::new([(StreamProtocol::new("/echo/1"), rr::ProtocolSupport::Full)], cfg);
    Swarm::new(
        transport,
        behaviour,
        peer_id,
        libp2p_swarm::Config::with_tokio_executor().with_idle_connection_timeout(Duration::from_secs(60)),
    )
}

/// The scenario's knobs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The client's stream limit.
    pub limit: usize,
    /// Requests the client sends at once.
    pub burst: usize,
    /// Requests the server sends to the client first; the client holds them during the burst.
    pub reverse: usize,
    /// The server answers its held requests in reverse arrival order.
    pub answer_reversed: bool,
}

/// What happened to one client request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Response(u32),
    Failure(String),
}

#[derive(Debug, Default)]
pub struct Report {
    /// Steps in the order the scenario took them, for the bundle.
    pub log: Vec<String>,
    /// Every event the client got for each of its requests, by request number.
    pub outcomes: BTreeMap<u32, Vec<Outcome>>,
    /// The most client requests the server held at one time.
    pub server_peak: usize,
    /// Whether the follow-up request after the burst got its response.
    pub follow_up_answered: bool,
    pub violations: Vec<String>,
}

struct Net {
    client: Node,
    server: Node,
    /// Client request id -> request number.
    ids: BTreeMap<rr::OutboundRequestId, u32>,
    outcomes: BTreeMap<u32, Vec<Outcome>>,
    /// Requests the server holds: (request number, channel).
    server_held: Vec<(u32, rr::ResponseChannel<u32>)>,
    server_peak: usize,
    server_received: usize,
    /// Requests the client holds from the server.
    client_held: Vec<rr::ResponseChannel<u32>>,
    reverse_answers: usize,
}

impl Net {
    fn on_client(&mut self, ev: SwarmEvent<Ev>) {
        match ev {
            SwarmEvent::Behaviour(rr::Event::Message { message, .. }) => match message {
                rr::Message::Request { channel, .. } => self.client_held.push(channel),
                rr::Message::Response { request_id, response } => {
                    if let Some(n) = self.ids.get(&request_id) {
                        self.outcomes.entry(*n).or_default().push(Outcome::Response(response));
                    }
                }
            },
            SwarmEvent::Behaviour(rr::Event::OutboundFailure { request_id, error, .. }) => {
                if let Some(n) = self.ids.get(&request_id) {
                    self.outcomes.entry(*n).or_default().push(Outcome::Failure(failure_name(&error)));
                }
            }
            _ => {}
        }
    }

    fn on_server(&mut self, ev: SwarmEvent<Ev>) {
        match ev {
            SwarmEvent::Behaviour(rr::Event::Message { message, .. }) => match message {
                rr::Message::Request { request, channel, .. } => {
                    self.server_received += 1;
                    self.server_held.push((request, channel));
                    self.server_peak = self.server_peak.max(self.server_held.len());
                }
                rr::Message::Response { .. } => self.reverse_answers += 1,
            },
            SwarmEvent::Behaviour(rr::Event::OutboundFailure { .. }) => self.reverse_answers += 1,
            _ => {}
        }
    }

    async fn pump(&mut self, limit: Duration, mut until: impl FnMut(&Net) -> bool) -> bool {
        let mut sleep = pin!(tokio::time::sleep(limit));
        poll_fn(|cx| {
            loop {
                let mut progressed = false;
                while let Poll::Ready(Some(ev)) = self.client.poll_next_unpin(cx) {
                    progressed = true;
                    self.on_client(ev);
                }
                while let Poll::Ready(Some(ev)) = self.server.poll_next_unpin(cx) {
                    progressed = true;
                    self.on_server(ev);
                }
                if until(self) {
                    return Poll::Ready(true);
                }
                if !progressed {
                    break;
                }
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            Poll::Pending
        })
        .await
    }

    fn send(&mut self, n: u32) {
        let server = *self.server.local_peer_id();
        let id = self.client.behaviour_mut().send_request(&server, n);
        self.ids.insert(id, n);
    }

    /// The server answers everything it holds (with the request number plus 1000).
    fn release(&mut self, reversed: bool) {
        let mut held = std::mem::take(&mut self.server_held);
        if reversed {
            held.reverse();
        }
        for (n, ch) in held {
            let _ = self.server.behaviour_mut().send_response(ch, n + 1000);
        }
    }
}

fn failure_name(e: &rr::OutboundFailure) -> String {
    match e {
        rr::OutboundFailure::DialFailure => "DialFailure".into(),
        rr::OutboundFailure::Timeout => "Timeout".into(),
        rr::OutboundFailure::ConnectionClosed => "ConnectionClosed".into(),
        rr::OutboundFailure::UnsupportedProtocols => "UnsupportedProtocols".into(),
        rr::OutboundFailure::Io(e) => format!("Io({:?})", e.kind()),
    }
}

pub async fn run(plan: &Plan, port: u64) -> Report {
    let mut rep = Report::default();
    let client = node(0, plan.limit);
    let server = node(1, 64);
    let mut net = Net {
        client,
        server,
        ids: BTreeMap::new(),
        outcomes: BTreeMap::new(),
        server_held: Vec::new(),
        server_peak: 0,
        server_received: 0,
        client_held: Vec::new(),
        reverse_answers: 0,
    };
    let addr: Multiaddr = format!("/memory/{port}").parse().unwrap();
    net.server.listen_on(addr.clone()).expect("listen");
    net.client.dial(addr).expect("dial");
    assert!(
        net.pump(Duration::from_secs(10), |n| n.client.connected_peers().count() == 1
            && n.server.connected_peers().count() == 1)
            .await,
        "setup: no connection"
    );
    rep.log.push(format!(
        "client connected to server; client max_concurrent_streams = {}, request_timeout = {} s",
        plan.limit,
        REQUEST_TIMEOUT.as_secs()
    ));

    // The server's own requests, held by the client's application.
    if plan.reverse > 0 {
        let client_id = *net.client.local_peer_id();
        for k in 0..plan.reverse {
            net.server.behaviour_mut().send_request(&client_id, 500 + k as u32);
        }
        let want = plan.reverse;
        assert!(
            net.pump(Duration::from_secs(10), |n| n.client_held.len() == want).await,
            "setup: client did not receive the server's requests"
        );
        rep.log.push(format!("server sends {want} requests to client; client holds them unanswered"));
    }

    // The burst.
    let burst: Vec<u32> = (1..=plan.burst as u32).collect();
    for &n in &burst {
        net.send(n);
    }
    rep.log.push(format!("client sends requests {}..={} at once", burst[0], burst[burst.len() - 1]));
    let expect_held = plan.burst.min(plan.limit.saturating_sub(plan.reverse)).max(1);
    net.pump(Duration::from_secs(5), |n| n.server_received >= expect_held).await;
    net.pump(HOLD, |_| false).await;
    rep.log.push(format!(
        "server application holds {} requests for {} ms, then answers them",
        net.server_held.len(),
        HOLD.as_millis()
    ));
    net.release(plan.answer_reversed);
    // Answer the server's requests too, so the client's streams free up.
    for ch in std::mem::take(&mut net.client_held) {
        let _ = net.client.behaviour_mut().send_response(ch, 0);
    }

    // Every burst request must end, within the request timeout and some slack.
    let want: BTreeSet<u32> = burst.iter().copied().collect();
    net.pump(REQUEST_TIMEOUT + Duration::from_secs(2), |n| {
        n.outcomes.keys().copied().collect::<BTreeSet<_>>() == want
    })
    .await;
    // Anything the server received late is answered as well.
    loop {
        if net.server_held.is_empty() {
            break;
        }
        net.release(false);
        net.pump(Duration::from_millis(200), |_| false).await;
    }
    net.pump(Duration::from_millis(200), |_| false).await;

    // A follow-up request on the same connection.
    net.send(99);
    let answered = net
        .pump(REQUEST_TIMEOUT, |n| {
            if !n.server_held.is_empty() {
                return true;
            }
            n.outcomes.contains_key(&99)
        })
        .await;
    if answered && !net.server_held.is_empty() {
        net.release(false);
        net.pump(REQUEST_TIMEOUT, |n| n.outcomes.contains_key(&99)).await;
    }
    rep.follow_up_answered = net.outcomes.get(&99) == Some(&vec![Outcome::Response(1099)]);

    for &n in &burst {
        let o = net.outcomes.get(&n).cloned().unwrap_or_default();
        let text = match o.as_slice() {
            [] => "no event".to_string(),
            [Outcome::Response(v)] => format!("response {v}"),
            [Outcome::Failure(f)] => format!("outbound failure {f}"),
            more => format!("{} events", more.len()),
        };
        rep.log.push(format!("request {n}: {text}"));
        match o.len() {
            0 => rep.violations.push(format!("request {n} never got a response or a failure")),
            1 => {
                if let Outcome::Response(v) = o[0] {
                    if v != n + 1000 {
                        rep.violations.push(format!("request {n} got the response {v}"));
                    }
                }
            }
            k => rep.violations.push(format!("request {n} got {k} events")),
        }
    }
    rep.log.push(format!(
        "follow-up request 99: {}",
        match net.outcomes.get(&99).map(|v| v.as_slice()) {
            Some([Outcome::Response(v)]) => format!("response {v}"),
            Some([Outcome::Failure(f)]) => format!("outbound failure {f}"),
            _ => "no event".into(),
        }
    ));
    if !rep.follow_up_answered {
        rep.violations.push("the follow-up request was not answered".into());
    }
    if net.server_peak > plan.limit {
        rep.violations.push(format!(
            "the server held {} client requests at once, more than the client's limit {}",
            net.server_peak, plan.limit
        ));
    }
    rep.server_peak = net.server_peak;
    rep.outcomes = net.outcomes;
    rep
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// The reported run: a limit of 3 streams and a burst of 6 requests.
pub fn symptom_scenario() -> Report {
    let plan = Plan { limit: 3, burst: 6, reverse: 0, answer_reversed: false };
    runtime().block_on(run(&plan, 4100))
}

/// splitmix64, so plans depend on the seed alone.
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// The plans a seed stands for: a plain burst over the limit, and a burst while the server's
/// own requests take part of the client's limit.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut m = Mix(seed);
    let limit = m.range(1, 4);
    let burst = limit + m.range(1, 4);
    let first = Plan { limit, burst, reverse: 0, answer_reversed: m.next() % 2 == 0 };
    let limit = m.range(2, 4);
    let reverse = m.range(1, limit - 1);
    // The burst fits the limit, but not the limit left over by the server's requests.
    let burst = m.range(limit - reverse + 1, limit);
    let second = Plan { limit, burst, reverse, answer_reversed: m.next() % 2 == 0 };
    vec![first, second]
}

/// The reported complaint only: every request of the burst ends, and the connection still works.
#[test]
fn symptom() {
    let rep = symptom_scenario();
    let ended: Vec<&String> = rep.violations.iter().filter(|v| v.starts_with("request ") || v.starts_with("the follow-up")).collect();
    assert!(ended.is_empty(), "{:#?}\n{:#?}", ended, rep.log);
}

#[test]
fn every_request_ends_once() {
    let seed: u64 = std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let rt = runtime();
    for (k, plan) in plans(seed).iter().enumerate() {
        let rep = rt.block_on(run(plan, 5000 + k as u64));
        assert!(
            rep.violations.is_empty(),
            "seed {seed}, plan {plan:?}:\n{:#?}\n{:#?}",
            rep.violations,
            rep.log
        );
    }
}
