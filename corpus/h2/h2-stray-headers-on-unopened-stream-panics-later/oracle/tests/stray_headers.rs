//! An h2 client talks to a misbehaving HTTP/2 server over an in-memory pipe. The server is our
//! own frame-level peer: it answers each request with a 200, except that once, just before one
//! of its answers, it sends a malformed response HEADERS frame on a client stream id the client
//! has not opened yet (a stray frame, as a gateway that mixes up its stream numbers would).
//!
//! Property: whatever stream id such a stray frame names, the client never panics; it refuses
//! the frame (it resets that stream, or closes the connection); it never opens a request on a
//! stream id it has already reset, so the ids of its requests strictly increase; and every later
//! request on the connection still gets its answer.

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

/// What makes the stray response HEADERS malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stray {
    ConnectionHeader,
    TransferEncoding,
    KeepAlive,
    TeGzip,
    RepeatedStatus,
}

impl Stray {
    pub fn all() -> [Stray; 5] {
        [
            Stray::ConnectionHeader,
            Stray::TransferEncoding,
            Stray::KeepAlive,
            Stray::TeGzip,
            Stray::RepeatedStatus,
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
            Stray::ConnectionHeader => lit(b"connection", b"close"),
            Stray::TransferEncoding => lit(b"transfer-encoding", b"chunked"),
            Stray::KeepAlive => lit(b"keep-alive", b"timeout=5"),
            Stray::TeGzip => lit(b"te", b"gzip"),
            Stray::RepeatedStatus => b.push(0x8d),
        }
        b
    }

    pub fn describe(self) -> &'static str {
        match self {
            Stray::ConnectionHeader => "connection: close",
            Stray::TransferEncoding => "transfer-encoding: chunked",
            Stray::KeepAlive => "keep-alive: timeout=5",
            Stray::TeGzip => "te: gzip",
            Stray::RepeatedStatus => "a second :status (404)",
        }
    }
}

/// One connection's script.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Requests the client makes, one after the other.
    pub requests: usize,
    /// The stray frame goes out just before the answer to this request (0-based).
    pub stray_before_answer: usize,
    /// How many client stream ids past the answered one the stray frame names (1 = the next).
    pub ahead: u32,
    pub stray: Stray,
}

impl Plan {
    /// Three plans per seed, one for each distance 1, 2 and 3.
    pub fn from_seed(seed: u64) -> Vec<Plan> {
        let mut r = Rng::new(seed);
        (1..=3)
            .map(|ahead| {
                let stray_before_answer = r.below(3) as usize;
                Plan {
                    requests: stray_before_answer + ahead as usize + 2 + r.below(3) as usize,
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
    /// Stream ids on which the client sent request HEADERS, in order.
    pub request_ids: Vec<u32>,
    /// Stream ids the client reset (RST_STREAM), in order, with the request count at that time.
    pub client_resets: Vec<(u32, usize)>,
    /// The error code of a GOAWAY the client sent, if it sent one (0 is a clean shutdown).
    pub client_goaway: Option<u32>,
    /// The stray frame's stream id.
    pub stray_id: Option<u32>,
    /// What each request of the client application got: a status or an error.
    pub answers: Vec<Result<u16, String>>,
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
        6 => "PING",
        7 => "GOAWAY",
        8 => "WINDOW_UPDATE",
        _ => "OTHER",
    }
}

async fn send(io: &mut DuplexStream, bytes: Vec<u8>) -> bool {
    io.write_all(&bytes).await.is_ok()
}

/// The misbehaving server: answers every request, with the stray frame before one answer.
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
                let n = l.request_ids.len();
                l.client_resets.push((sid, n));
            }
            if ty == 7 && payload.len() >= 8 {
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                line.push_str(&format!(" error_code={code}"));
                l.client_goaway = Some(code);
            }
            if ty == 1 {
                l.request_ids.push(sid);
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
            1 => {
                if answered == plan.stray_before_answer {
                    let stray_id = sid + 2 * plan.ahead;
                    {
                        let mut l = log.lock().unwrap();
                        l.stray_id = Some(stray_id);
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
                answered += 1;
                log.lock()
                    .unwrap()
                    .frames
                    .push(format!("-> HEADERS stream={sid} END_STREAM (:status 200)"));
                if !send(&mut io, frame(1, 5, sid, &[0x88])).await {
                    return;
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
    let conn_task = tokio::spawn(async move {
        let _ = connection.await;
    });
    for _ in 0..plan.requests {
        let answer = async {
            client = client.clone().ready().await.map_err(|e| e.to_string())?;
            let req = http::Request::get("http://gateway.test/reading").body(()).unwrap();
            let (resp, _body) = client.send_request(req, true).map_err(|e| e.to_string())?;
            let resp = resp.await.map_err(|e| e.to_string())?;
            Ok::<u16, String>(resp.status().as_u16())
        };
        let got = match tokio::time::timeout(Duration::from_secs(5), answer).await {
            Ok(r) => r,
            Err(_) => Err("no answer within 5 s".into()),
        };
        log.lock().unwrap().answers.push(got);
    }
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn_task).await;
    server_task.abort();
}

/// Checks the property on one connection's log; returns the first violation.
pub fn check(plan: &Plan, log: &Log) -> Result<(), String> {
    let stray = log.stray_id.ok_or("the server never sent the stray frame")?;
    let closed_on_error = matches!(log.client_goaway, Some(code) if code != 0);
    if !closed_on_error && !log.client_resets.iter().any(|&(id, _)| id == stray) {
        return Err(format!(
            "the client neither reset stream {stray} nor closed the connection after the malformed frame"
        ));
    }
    for w in log.request_ids.windows(2) {
        if w[1] <= w[0] {
            return Err(format!("request stream ids do not increase: {:?}", log.request_ids));
        }
    }
    for (i, &id) in log.request_ids.iter().enumerate() {
        if log.client_resets.iter().any(|&(r, n)| r == id && n <= i) {
            return Err(format!(
                "the client opened a request on stream {id}, which it had already reset: ids {:?}",
                log.request_ids
            ));
        }
    }
    if log.answers.len() != plan.requests {
        return Err(format!("{} of {} requests ran", log.answers.len(), plan.requests));
    }
    if !closed_on_error {
        for (i, a) in log.answers.iter().enumerate() {
            if a != &Ok(200) {
                return Err(format!("request {i} got {a:?} instead of a 200"));
            }
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
async fn stray_headers_on_unopened_stream() {
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
