//! An h2 client talks to a misbehaving HTTP/2 server over an in-memory pipe. The server is our
//! own frame-level peer. It answers each request with a 200 and, from some request on, pushes a
//! resource with each answer (PUSH_PROMISE on the request's stream, promised stream ids 2, 4, 6...
//! in order, then the pushed response). Once, before one of its answers, it also sends a
//! malformed response HEADERS frame on an even (server-initiated) stream id it has not used yet.
//!
//! Property: whatever server stream id such a stray frame names, the client never panics; it
//! refuses the stray frame (it resets that stream, or closes the connection with an error); it
//! never hands the application a pushed response on a stream id it has already reset; and every
//! request either gets its answer or fails with an error (no hang), with every request before
//! the stray frame answered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

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

/// What makes the stray HEADERS malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stray {
    ConnectionHeader,
    Upgrade,
    ProxyConnection,
    TeDeflate,
    PseudoAfterField,
}

impl Stray {
    pub fn all() -> [Stray; 5] {
        [
            Stray::ConnectionHeader,
            Stray::Upgrade,
            Stray::ProxyConnection,
            Stray::TeDeflate,
            Stray::PseudoAfterField,
        ]
    }

    /// The HPACK block: `:status 200` then the offending field (literal, not indexed).
    pub fn block(self) -> Vec<u8> {
        let mut b = vec![0x88];
        let mut lit = |name: &[u8], value: &[u8]| {
            b.push(0x00);
            b.push(name.len() as u8);
            b.extend_from_slice(name);
            b.push(value.len() as u8);
            b.extend_from_slice(value);
        };
        match self {
            Stray::ConnectionHeader => lit(b"connection", b"keep-alive"),
            Stray::Upgrade => lit(b"upgrade", b"websocket"),
            Stray::ProxyConnection => lit(b"proxy-connection", b"close"),
            Stray::TeDeflate => lit(b"te", b"deflate"),
            Stray::PseudoAfterField => {
                lit(b"server", b"gw");
                b.push(0x8d);
            }
        }
        b
    }

    pub fn describe(self) -> &'static str {
        match self {
            Stray::ConnectionHeader => "connection: keep-alive",
            Stray::Upgrade => "upgrade: websocket",
            Stray::ProxyConnection => "proxy-connection: close",
            Stray::TeDeflate => "te: deflate",
            Stray::PseudoAfterField => "server: gw, then :status 404",
        }
    }
}

/// One connection's script.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Requests the client makes, one after the other.
    pub requests: usize,
    /// The server pushes a resource with every answer from this request on (0-based).
    pub first_push: usize,
    /// The stray frame goes out just before the answer to this request (0-based).
    pub stray_before_answer: usize,
    /// How many push ids past the server's next unused one the stray frame names (1 = the next).
    pub ahead: u32,
    pub stray: Stray,
}

impl Plan {
    /// Three plans per seed, one for each distance 1, 2 and 3.
    pub fn from_seed(seed: u64) -> Vec<Plan> {
        let mut r = Rng::new(seed);
        (1..=3)
            .map(|ahead| {
                let first_push = r.below(3) as usize;
                let stray_before_answer = r.below(3) as usize;
                let pushes_needed = ahead as usize + 1;
                Plan {
                    requests: stray_before_answer.max(first_push)
                        + pushes_needed
                        + 1
                        + r.below(2) as usize,
                    first_push,
                    stray_before_answer,
                    ahead,
                    stray: Stray::all()[r.below(5) as usize],
                }
            })
            .collect()
    }
}

/// The frames the server saw and sent, and what the client application got.
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// One line per frame, from the server's side: "<- " received, "-> " sent.
    pub frames: Vec<String>,
    /// Stream ids the client reset (RST_STREAM), in order.
    pub client_resets: Vec<u32>,
    /// The error code of a GOAWAY the client sent, if it sent one (0 is a clean shutdown).
    pub client_goaway: Option<u32>,
    /// The stray frame's stream id, and how many requests had been answered before it.
    pub stray_id: Option<u32>,
    pub stray_after_answers: usize,
    /// What each request of the client application got: a status or an error.
    pub answers: Vec<Result<u16, String>>,
    /// Pushed streams the client application was handed, by promised stream id.
    pub pushes_delivered: Vec<u32>,
}

fn frame(ty: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut v = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
    v.extend_from_slice(&sid.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

async fn read_frame(io: &mut DuplexStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    io.read_exact(&mut h).await.ok()?;
    let len = ((h[0] as usize) << 16) | ((h[1] as usize) << 8) | h[2] as usize;
    let sid = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    let mut p = vec![0u8; len];
    io.read_exact(&mut p).await.ok()?;
    Some((h[3], h[4], sid, p))
}

fn kind(ty: u8) -> &'static str {
    match ty {
        0 => "DATA",
        1 => "HEADERS",
        3 => "RST_STREAM",
        4 => "SETTINGS",
        5 => "PUSH_PROMISE",
        6 => "PING",
        7 => "GOAWAY",
        8 => "WINDOW_UPDATE",
        _ => "OTHER",
    }
}

async fn send(io: &mut DuplexStream, bytes: Vec<u8>) -> bool {
    io.write_all(&bytes).await.is_ok()
}

/// The request block of a push: GET http://gateway.test/pushed/<id>.
fn push_request_block(promised: u32) -> Vec<u8> {
    let path = format!("/pushed/{promised}");
    let mut b = vec![0x82, 0x86]; // :method GET, :scheme http
    b.push(0x04); // :path, literal without indexing, indexed name 4
    b.push(path.len() as u8);
    b.extend_from_slice(path.as_bytes());
    b.push(0x01); // :authority, literal without indexing, indexed name 1
    b.push(12);
    b.extend_from_slice(b"gateway.test");
    b
}

/// The misbehaving server.
async fn server(mut io: DuplexStream, plan: Plan, log: Arc<Mutex<Log>>) {
    let mut preface = [0u8; 24];
    if io.read_exact(&mut preface).await.is_err() {
        return;
    }
    log.lock().unwrap().frames.push("-> SETTINGS".into());
    if !send(&mut io, frame(4, 0, 0, &[])).await {
        return;
    }
    let mut answered = 0usize;
    let mut next_push_id = 2u32;
    while let Some((ty, flags, sid, payload)) = read_frame(&mut io).await {
        {
            let mut l = log.lock().unwrap();
            let mut line = format!("<- {} stream={}", kind(ty), sid);
            if ty == 4 && flags & 1 == 1 {
                line.push_str(" ACK");
            }
            if ty == 3 && payload.len() == 4 {
                let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                line.push_str(&format!(" error_code={code}"));
                l.client_resets.push(sid);
            }
            if ty == 7 && payload.len() >= 8 {
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                line.push_str(&format!(" error_code={code}"));
                l.client_goaway = Some(code);
            }
            l.frames.push(line);
        }
        match ty {
            4 if flags & 1 == 0 => {
                log.lock().unwrap().frames.push("-> SETTINGS ACK".into());
                if !send(&mut io, frame(4, 1, 0, &[])).await {
                    return;
                }
            }
            1 if sid % 2 == 1 => {
                if answered == plan.stray_before_answer {
                    let stray_id = next_push_id + 2 * (plan.ahead - 1);
                    {
                        let mut l = log.lock().unwrap();
                        l.stray_id = Some(stray_id);
                        l.stray_after_answers = answered;
                        l.frames.push(format!(
                            "-> HEADERS stream={} END_STREAM (:status 200, {})",
                            stray_id,
                            plan.stray.describe()
                        ));
                    }
                    if !send(&mut io, frame(1, 5, stray_id, &plan.stray.block())).await {
                        return;
                    }
                }
                let mut pushed = None;
                if answered >= plan.first_push {
                    let promised = next_push_id;
                    next_push_id += 2;
                    let mut p = promised.to_be_bytes().to_vec();
                    p.extend_from_slice(&push_request_block(promised));
                    log.lock().unwrap().frames.push(format!(
                        "-> PUSH_PROMISE stream={sid} promised={promised} (GET /pushed/{promised})"
                    ));
                    if !send(&mut io, frame(5, 4, sid, &p)).await {
                        return;
                    }
                    pushed = Some(promised);
                }
                answered += 1;
                log.lock()
                    .unwrap()
                    .frames
                    .push(format!("-> HEADERS stream={sid} END_STREAM (:status 200)"));
                if !send(&mut io, frame(1, 5, sid, &[0x88])).await {
                    return;
                }
                if let Some(promised) = pushed {
                    log.lock()
                        .unwrap()
                        .frames
                        .push(format!("-> HEADERS stream={promised} END_STREAM (:status 200)"));
                    if !send(&mut io, frame(1, 5, promised, &[0x88])).await {
                        return;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Runs one connection along `plan`. A panic of the client propagates to the caller.
pub async fn run(plan: Plan, log: Arc<Mutex<Log>>) {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server_task = tokio::spawn(server(server_io, plan, log.clone()));
    let (mut client, connection) = h2::client::handshake(client_io).await.unwrap();
    let conn_task = tokio::spawn(connection);
    for _ in 0..plan.requests {
        let log2 = log.clone();
        let answer = async {
            client = client.clone().ready().await.map_err(|e| e.to_string())?;
            let req = http::Request::get("http://gateway.test/reading").body(()).unwrap();
            let (mut resp, _body) = client.send_request(req, true).map_err(|e| e.to_string())?;
            let mut pushes = resp.push_promises();
            let resp = resp.await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            // Take whatever the server pushed with this answer.
            while let Ok(Some(Ok(p))) =
                tokio::time::timeout(Duration::from_millis(20), pushes.push_promise()).await
            {
                let id = p
                    .request()
                    .uri()
                    .path()
                    .rsplit('/')
                    .next()
                    .and_then(|s| s.parse::<u32>().ok())
                    .unwrap_or(0);
                log2.lock().unwrap().pushes_delivered.push(id);
            }
            Ok::<u16, String>(status)
        };
        let got = match tokio::time::timeout(Duration::from_secs(1), answer).await {
            Ok(r) => r,
            Err(_) => Err("no answer within 1 s".into()),
        };
        log.lock().unwrap().answers.push(got);
    }
    drop(client);
    let res = tokio::time::timeout(Duration::from_secs(1), conn_task).await;
    server_task.abort();
    if let Ok(Err(join)) = res {
        if join.is_panic() {
            std::panic::resume_unwind(join.into_panic());
        }
    }
}

/// Checks the property on one connection's log; returns the first violation.
pub fn check(plan: &Plan, log: &Log) -> Result<(), String> {
    let stray = log.stray_id.ok_or("the server never sent the stray frame")?;
    let closed_on_error = matches!(log.client_goaway, Some(code) if code != 0);
    if !closed_on_error && !log.client_resets.contains(&stray) {
        return Err(format!(
            "the client neither reset stream {stray} nor closed the connection after the malformed frame"
        ));
    }
    if log.pushes_delivered.contains(&stray) {
        return Err(format!(
            "the application was handed a pushed response on stream {stray}, which the client had reset"
        ));
    }
    if log.answers.len() != plan.requests {
        return Err(format!("{} of {} requests ran", log.answers.len(), plan.requests));
    }
    for (i, a) in log.answers.iter().enumerate() {
        match a {
            Ok(200) => {}
            Err(e) if e.contains("within 1 s") => {
                return Err(format!("request {i} hung: {e}"));
            }
            Err(e) if !closed_on_error || i < log.stray_after_answers => {
                return Err(format!("request {i} failed: {e}"));
            }
            Err(_) => {}
            Ok(s) => return Err(format!("request {i} got status {s}")),
        }
    }
    Ok(())
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[tokio::test]
async fn stray_headers_on_unpushed_stream() {
    let seed = seed();
    for plan in Plan::from_seed(seed) {
        let log = Arc::new(Mutex::new(Log::default()));
        run(plan, log.clone()).await;
        let log = log.lock().unwrap().clone();
        if let Err(e) = check(&plan, &log) {
            panic!("seed {seed} {plan:?}: {e}\nframes: {:#?}", log.frames);
        }
    }
}
