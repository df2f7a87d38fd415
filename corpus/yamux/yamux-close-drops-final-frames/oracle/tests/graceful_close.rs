//! A yamux node V (client side) and a peer P that speaks the yamux wire format directly
//! (hand-encoded 12-byte frame headers over an in-memory byte pipe) and records every frame
//! V sends until V closes the pipe.
//!
//! V's application writes on its streams (some opened by V, some by P), closes some of them,
//! and then closes the whole connection. Whether V's connection task got to run between the
//! application's last writes and the close is part of the plan.
//!
//! The property: when V closes the connection, everything its application wrote before the
//! close reaches P in order, every stream the application closed before it is half-closed
//! towards P (FIN), and P then gets one GoAway with the normal-termination code as the last
//! frame before the pipe is closed; the close itself reports success. This holds whether or
//! not V's connection task ran between the writes and the close.
//!
//! `seeded_graceful_close` draws the streams, the writes, which streams are closed and where
//! the connection task runs from `FAULTLINE_SEED`. `symptom_scenario` is the reported run,
//! which the bundle generator replays.

use std::{
    collections::{BTreeMap, VecDeque},
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use futures::{task::noop_waker, AsyncRead, AsyncWrite};
use yamux::{Config, Connection, Mode, Stream};

const HEADER: usize = 12;
const TY_DATA: u8 = 0;
const TY_WINDOW: u8 = 1;
const TY_PING: u8 = 2;
const TY_GO_AWAY: u8 = 3;
const SYN: u16 = 1;
const ACK: u16 = 2;
const FIN: u16 = 4;
const RST: u16 = 8;

// ---- the byte pipe ----

#[derive(Default)]
struct Wire {
    to_v: VecDeque<u8>,
    from_v: VecDeque<u8>,
    /// V closed its side of the pipe.
    closed: bool,
    /// Bytes V wrote after closing the pipe.
    after_close: usize,
}

#[derive(Clone)]
struct Sock(Arc<Mutex<Wire>>);

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        if w.to_v.is_empty() {
            return Poll::Pending;
        }
        let n = buf.len().min(w.to_v.len());
        for b in buf[..n].iter_mut() {
            *b = w.to_v.pop_front().unwrap();
        }
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        if w.closed {
            w.after_close += buf.len();
        }
        w.from_v.extend(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.lock().unwrap().closed = true;
        Poll::Ready(Ok(()))
    }
}

// ---- yamux frames, as P writes and reads them ----

fn header(ty: u8, flags: u16, sid: u32, len: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER);
    h.push(0);
    h.push(ty);
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&sid.to_be_bytes());
    h.extend_from_slice(&len.to_be_bytes());
    h
}

fn data(sid: u32, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut f = header(TY_DATA, flags, sid, body.len() as u32);
    f.extend_from_slice(body);
    f
}

#[derive(Debug, Default, Clone)]
struct SeenStream {
    data: Vec<u8>,
    fin: bool,
    rst: bool,
}

/// One frame P saw, for the order checks and the trace.
#[derive(Debug, Clone)]
enum Seen {
    Data { sid: u32, len: usize, fin: bool },
    Window { sid: u32, fin: bool },
    GoAway(u32),
    Other,
}

struct Peer {
    wire: Arc<Mutex<Wire>>,
    rx: Vec<u8>,
    streams: BTreeMap<u32, SeenStream>,
    frames: Vec<Seen>,
}

impl Peer {
    fn send(&self, bytes: &[u8]) {
        self.wire.lock().unwrap().to_v.extend(bytes);
    }

    fn read(&mut self) {
        let taken: Vec<u8> = self.wire.lock().unwrap().from_v.drain(..).collect();
        self.rx.extend(taken);
        while self.rx.len() >= HEADER {
            let ty = self.rx[1];
            let flags = u16::from_be_bytes([self.rx[2], self.rx[3]]);
            let sid = u32::from_be_bytes([self.rx[4], self.rx[5], self.rx[6], self.rx[7]]);
            let len = u32::from_be_bytes([self.rx[8], self.rx[9], self.rx[10], self.rx[11]]);
            let body = if ty == TY_DATA { len as usize } else { 0 };
            if self.rx.len() < HEADER + body {
                break;
            }
            let frame: Vec<u8> = self.rx.drain(..HEADER + body).collect();
            let fin = flags & FIN != 0;
            match ty {
                TY_DATA | TY_WINDOW => {
                    let s = self.streams.entry(sid).or_default();
                    s.data.extend_from_slice(&frame[HEADER..]);
                    s.fin |= fin;
                    s.rst |= flags & RST != 0;
                    self.frames.push(if ty == TY_DATA {
                        Seen::Data { sid, len: body, fin }
                    } else {
                        Seen::Window { sid, fin }
                    });
                }
                TY_PING => {
                    if flags & ACK == 0 {
                        self.send(&header(TY_PING, ACK, 0, len));
                    }
                    self.frames.push(Seen::Other);
                }
                TY_GO_AWAY => self.frames.push(Seen::GoAway(len)),
                _ => self.frames.push(Seen::Other),
            }
        }
    }
}

struct Node {
    conn: Connection<Sock>,
    streams: BTreeMap<u32, Stream>,
    failed: Option<String>,
}

fn with_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    f(&mut cx)
}

impl Node {
    /// One run of V's connection task: it takes what the streams queued and reads P's frames
    /// until it has nothing to do.
    fn drive(&mut self) {
        if self.failed.is_some() {
            return;
        }
        for _ in 0..10_000 {
            match with_cx(|cx| self.conn.poll_next_inbound(cx)) {
                Poll::Ready(Some(Ok(s))) => {
                    self.streams.insert(s.id().val(), s);
                }
                Poll::Ready(Some(Err(e))) => {
                    self.failed = Some(format!("connection error: {e}"));
                    return;
                }
                Poll::Ready(None) => {
                    self.failed = Some("connection closed".into());
                    return;
                }
                Poll::Pending => return,
            }
        }
    }

    fn open(&mut self) -> u32 {
        match with_cx(|cx| self.conn.poll_new_outbound(cx)) {
            Poll::Ready(Ok(s)) => {
                let id = s.id().val();
                self.streams.insert(id, s);
                id
            }
            other => panic!("opening a stream failed: {other:?}"),
        }
    }

    /// The application writes all of `buf`; when the stream's queue is full it has to wait
    /// for the connection task, which then runs. Returns whether it had to.
    fn write_all(&mut self, sid: u32, buf: &[u8]) -> bool {
        let mut done = 0;
        let mut waited = false;
        for _ in 0..10_000 {
            if done == buf.len() {
                break;
            }
            let s = self.streams.get_mut(&sid).expect("stream");
            match with_cx(|cx| Pin::new(&mut *s).poll_write(cx, &buf[done..])) {
                Poll::Ready(Ok(n)) if n > 0 => done += n,
                Poll::Ready(r) => {
                    self.failed = Some(format!("write on {sid}: {r:?}"));
                    return waited;
                }
                Poll::Pending => {
                    waited = true;
                    self.drive();
                }
            }
        }
        waited
    }

    fn close_stream(&mut self, sid: u32) {
        for _ in 0..10_000 {
            let s = self.streams.get_mut(&sid).expect("stream");
            match with_cx(|cx| Pin::new(&mut *s).poll_close(cx)) {
                Poll::Ready(Ok(())) => return,
                Poll::Ready(Err(e)) => {
                    self.failed = Some(format!("close of {sid}: {e}"));
                    return;
                }
                Poll::Pending => self.drive(),
            }
        }
    }

    fn close(&mut self) -> Result<(), String> {
        for _ in 0..10_000 {
            match with_cx(|cx| self.conn.poll_close(cx)) {
                Poll::Ready(Ok(())) => return Ok(()),
                Poll::Ready(Err(e)) => return Err(e.to_string()),
                Poll::Pending => {}
            }
        }
        Err("close never completed".into())
    }
}

// ---- scenarios ----

#[derive(Clone, Debug)]
pub enum Step {
    /// V's application writes this many bytes on the stream.
    Write(usize, usize),
    /// V's application closes the stream (its write side).
    CloseStream(usize),
    /// V's connection task runs.
    Run,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// For each stream: V opened it (true) or P did.
    pub v_opens: Vec<bool>,
    /// What V's application does after the streams are up, before it closes the connection.
    pub steps: Vec<Step>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

/// The reported run: a request stream P opened and a notification stream V opened; V writes
/// a last message on each, closes the first, and closes the connection right away.
pub fn symptom_plan() -> Plan {
    Plan {
        v_opens: vec![false, true],
        steps: vec![
            Step::Write(0, 900),
            Step::CloseStream(0),
            Step::Write(1, 120),
        ],
    }
}

/// Enough data that the application has to wait for the connection task on the way.
pub fn bulk_plan() -> Plan {
    Plan {
        v_opens: vec![true, false, true],
        steps: vec![
            Step::Write(0, 200_000),
            Step::Write(1, 3_000),
            Step::Run,
            Step::Write(2, 40_000),
            Step::CloseStream(2),
            Step::Write(1, 10),
            Step::CloseStream(0),
            Step::Run,
            Step::Write(1, 150_000),
            Step::CloseStream(1),
        ],
    }
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

pub fn plan_for_seed(seed: u64) -> Plan {
    let mut r = Rng::new(seed);
    let n = r.range(1, 4) as usize;
    let v_opens = (0..n).map(|_| r.range(0, 1) == 0).collect();
    let mut steps = Vec::new();
    let mut closed = vec![false; n];
    for _ in 0..r.range(1, 9) {
        let i = r.range(0, n as u64 - 1) as usize;
        match r.range(0, 9) {
            0..=5 if !closed[i] => {
                let len = if r.range(0, 4) == 0 {
                    r.range(17_000, 120_000)
                } else {
                    r.range(1, 4_000)
                };
                steps.push(Step::Write(i, len as usize));
            }
            6 | 7 if !closed[i] => {
                closed[i] = true;
                steps.push(Step::CloseStream(i));
            }
            _ => steps.push(Step::Run),
        }
    }
    Plan { v_opens, steps }
}

fn payload(i: usize, from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|k| ((k * 7 + i * 31) % 253) as u8).collect()
}

fn run_inner(plan: &Plan, out: &mut Outcome) {
    let wire = Arc::new(Mutex::new(Wire::default()));
    let mut v = Node {
        conn: Connection::new(Sock(wire.clone()), Config::default(), Mode::Client),
        streams: BTreeMap::new(),
        failed: None,
    };
    let mut p = Peer {
        wire: wire.clone(),
        rx: Vec::new(),
        streams: BTreeMap::new(),
        frames: Vec::new(),
    };

    // The streams come up, each with a greeting from V that P reads.
    let mut sids = Vec::new();
    let mut p_next = 2;
    for (i, &mine) in plan.v_opens.iter().enumerate() {
        let sid = if mine {
            v.open()
        } else {
            p.send(&data(p_next, SYN, format!("hello from P on {p_next}").as_bytes()));
            p_next += 2;
            v.drive();
            p_next - 2
        };
        sids.push(sid);
        // Plenty of credit, so V's application never waits for P.
        p.send(&header(TY_WINDOW, 0, sid, 16 * 1024 * 1024));
        v.drive();
        v.write_all(sid, format!("greeting {i}").as_bytes());
    }
    v.drive();
    p.read();
    let mut expected: Vec<Vec<u8>> = (0..sids.len())
        .map(|i| format!("greeting {i}").into_bytes())
        .collect();
    let mut closed = vec![false; sids.len()];
    out.log.push(format!(
        "streams up: {}",
        sids.iter()
            .zip(&plan.v_opens)
            .map(|(s, m)| format!("{s} ({})", if *m { "V opened" } else { "P opened" }))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    let mut sent_len = vec![0usize; sids.len()];
    for step in &plan.steps {
        match *step {
            Step::Write(i, len) => {
                let bytes = payload(i, sent_len[i], len);
                sent_len[i] += len;
                let waited = v.write_all(sids[i], &bytes);
                expected[i].extend(bytes);
                out.log.push(format!(
                    "V app: write {len} bytes on stream {}{}",
                    sids[i],
                    if waited { " (had to wait for the connection task)" } else { "" }
                ));
            }
            Step::CloseStream(i) => {
                v.close_stream(sids[i]);
                closed[i] = true;
                out.log.push(format!("V app: close stream {}", sids[i]));
            }
            Step::Run => {
                v.drive();
                out.log.push("V connection task runs".into());
            }
        }
    }
    let before = p.frames.len();
    let result = v.close();
    p.read();
    out.log.push(format!(
        "V app: close the connection -> {}",
        match &result {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        }
    ));
    let seen_after: Vec<String> = p.frames[before..]
        .iter()
        .map(|f| match f {
            Seen::Data { sid, len, fin } => {
                format!("data {sid} ({len} bytes{})", if *fin { ", FIN" } else { "" })
            }
            Seen::Window { sid, fin } => {
                format!("window update {sid}{}", if *fin { " (FIN)" } else { "" })
            }
            Seen::GoAway(c) => format!("GoAway (code {c})"),
            Seen::Other => "ping".into(),
        })
        .collect();
    let closed_pipe = wire.lock().unwrap().closed;
    out.log.push(format!(
        "P saw after the greetings: {}{}",
        if seen_after.is_empty() { "nothing".to_string() } else { seen_after.join(", ") },
        if closed_pipe { "; then V closed the pipe" } else { "; the pipe is still open" }
    ));

    if let Some(f) = &v.failed {
        out.violations.push(format!("V's application or connection failed: {f}"));
    }
    if let Err(e) = result {
        out.violations.push(format!("closing the connection failed: {e}"));
    }
    if !closed_pipe {
        out.violations.push("V never closed the pipe".into());
    }
    if wire.lock().unwrap().after_close > 0 {
        out.violations.push("V wrote after closing the pipe".into());
    }
    for (i, &sid) in sids.iter().enumerate() {
        let seen = p.streams.get(&sid).cloned().unwrap_or_default();
        if seen.data != expected[i] {
            let common = seen
                .data
                .iter()
                .zip(&expected[i])
                .take_while(|(a, b)| a == b)
                .count();
            out.violations.push(format!(
                "stream {sid}: P got {} of the {} bytes V's application wrote (the first {} match)",
                seen.data.len(),
                expected[i].len(),
                common
            ));
        }
        if seen.fin != closed[i] {
            out.violations.push(format!(
                "stream {sid}: V's application {} it, but P {} FIN",
                if closed[i] { "closed" } else { "did not close" },
                if seen.fin { "got a" } else { "never got its" }
            ));
        }
        if seen.rst {
            out.violations.push(format!("stream {sid}: P got a reset"));
        }
    }
    let go_aways: Vec<usize> = p
        .frames
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f, Seen::GoAway(_)))
        .map(|(k, _)| k)
        .collect();
    match go_aways.as_slice() {
        [k] => {
            if let Seen::GoAway(code) = p.frames[*k] {
                if code != 0 {
                    out.violations.push(format!("GoAway carried code {code}, not normal termination"));
                }
            }
            if *k + 1 != p.frames.len() {
                out.violations.push(format!(
                    "{} frame(s) came after the GoAway",
                    p.frames.len() - k - 1
                ));
            }
        }
        [] => out
            .violations
            .push("P never got a GoAway before V closed the pipe".into()),
        more => out
            .violations
            .push(format!("P got {} GoAway frames", more.len())),
    }
}

pub fn run(plan: &Plan) -> Outcome {
    let mut out = Outcome::default();
    let result = catch_unwind(AssertUnwindSafe(|| run_inner(plan, &mut out)));
    if let Err(e) = result {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        out.crash = Some(msg.clone());
        out.violations.push(format!("V panicked: {msg}"));
    }
    out
}

pub fn symptom_scenario() -> Outcome {
    run(&symptom_plan())
}

fn check(name: &str, plan: &Plan, out: &Outcome) {
    assert!(
        out.violations.is_empty(),
        "{name}: {plan:?}\n{}\nviolations:\n{}",
        out.log.join("\n"),
        out.violations.join("\n")
    );
}

#[test]
fn last_messages_then_close() {
    let plan = symptom_plan();
    check("symptom", &plan, &run(&plan));
}

#[test]
fn bulk_writes_then_close() {
    let plan = bulk_plan();
    check("bulk", &plan, &run(&plan));
}

#[test]
fn seeded_graceful_close() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..4 {
        let plan = plan_for_seed(seed * 4 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
