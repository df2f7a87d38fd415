//! A yamux node V (client side) and a peer P that speaks the yamux wire format directly
//! (hand-encoded 12-byte frame headers over an in-memory byte pipe). P can hang up: from then
//! on V's writes to the pipe fail and its reads see the end of the stream.
//!
//! V's application writes on its streams and then closes the connection gracefully. In the
//! runs that matter, P hangs up while V is in the middle of that close, after having received
//! a chosen number of the bytes the close writes. After the close returns, V's application
//! keeps using the connection handle the way applications do: it retries the close, polls
//! for inbound streams to see the end, or tries to open a stream.
//!
//! The property: a close during which the transport fails reports that failure, and from then
//! on the connection is closed: every further call (close, inbound, outbound) returns at once
//! with success, end-of-connection or an error, never a stream, and never panics. When the
//! transport does not fail, the close succeeds and P gets everything V's application wrote,
//! each FIN it asked for, and one GoAway as the last frame.
//!
//! `seeded_hangup_during_close` draws the streams, the writes, when P hangs up and the calls
//! V makes afterwards from `FAULTLINE_SEED`. `symptom_scenario` is the reported run, which the
//! bundle generator replays.

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
    /// P hung up: V's writes fail, its reads see end-of-stream.
    hung_up: bool,
    /// V's application has started closing the connection.
    closing: bool,
    /// P hangs up once it has received this many bytes of V's close.
    hangup_after: Option<usize>,
    close_bytes: usize,
    /// Writes (or the transport close) that failed after V started closing.
    failed_in_close: usize,
}

impl Wire {
    fn fail(&mut self) -> io::Error {
        if self.closing {
            self.failed_in_close += 1;
        }
        io::ErrorKind::BrokenPipe.into()
    }
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
        if w.hung_up {
            return Poll::Ready(Ok(0));
        }
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
        if w.hung_up {
            return Poll::Ready(Err(w.fail()));
        }
        let mut n = buf.len();
        if w.closing {
            if let Some(k) = w.hangup_after {
                let allowed = k.saturating_sub(w.close_bytes);
                if allowed == 0 {
                    w.hung_up = true;
                    return Poll::Ready(Err(w.fail()));
                }
                n = n.min(allowed);
            }
            w.close_bytes += n;
        }
        w.from_v.extend(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.0.lock().unwrap();
        if w.hung_up {
            return Poll::Ready(Err(w.fail()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.0.lock().unwrap();
        if w.hung_up {
            return Poll::Ready(Err(w.fail()));
        }
        w.closed = true;
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
#[allow(dead_code)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hangup {
    Never,
    /// P hangs up before V starts closing; V's connection task runs once more (or not)
    /// before the close.
    BeforeClose { v_runs: bool },
    /// P hangs up after receiving this many bytes of V's close.
    DuringClose(usize),
}

/// What V's application does with the connection after its close returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Close,
    NextInbound,
    NewOutbound,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// For each stream: V opened it (true) or P did.
    pub v_opens: Vec<bool>,
    /// Bytes V's application writes on each stream right before closing.
    pub last_writes: Vec<usize>,
    /// Streams V's application closes before closing the connection.
    pub close_streams: Vec<bool>,
    /// V's connection task runs between the last writes and the close.
    pub run_before_close: bool,
    pub hangup: Hangup,
    pub after: Vec<After>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

/// The reported run: a final message on one stream, the close, and P hanging up five bytes
/// into the close; the application retries the close, then waits for the connection's end.
pub fn symptom_plan() -> Plan {
    Plan {
        v_opens: vec![true],
        last_writes: vec![300],
        close_streams: vec![true],
        run_before_close: false,
        hangup: Hangup::DuringClose(5),
        after: vec![After::Close, After::NextInbound],
    }
}

/// No hang-up: the close must still deliver everything.
pub fn clean_plan() -> Plan {
    Plan {
        v_opens: vec![true, false],
        last_writes: vec![5_000, 40_000],
        close_streams: vec![true, false],
        run_before_close: false,
        hangup: Hangup::Never,
        after: vec![After::NextInbound, After::NewOutbound, After::Close],
    }
}

/// P hangs up while the close is writing the queued data; the application then checks for
/// inbound streams first and tries to open one.
pub fn mid_data_plan() -> Plan {
    Plan {
        v_opens: vec![false, true],
        last_writes: vec![20_000, 700],
        close_streams: vec![false, true],
        run_before_close: false,
        hangup: Hangup::DuringClose(9_000),
        after: vec![After::NextInbound, After::NewOutbound, After::Close],
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
    let n = r.range(1, 3) as usize;
    let v_opens = (0..n).map(|_| r.range(0, 1) == 0).collect();
    let last_writes = (0..n)
        .map(|_| match r.range(0, 3) {
            0 => 0,
            1 => r.range(17_000, 60_000) as usize,
            _ => r.range(1, 4_000) as usize,
        })
        .collect();
    let close_streams = (0..n).map(|_| r.range(0, 1) == 0).collect();
    let hangup = match r.range(0, 9) {
        0 => Hangup::Never,
        1 => Hangup::BeforeClose { v_runs: r.range(0, 1) == 0 },
        2 | 3 => Hangup::DuringClose(r.range(12, 30_000) as usize),
        _ => Hangup::DuringClose(r.range(0, 11) as usize),
    };
    let after = (0..r.range(1, 4))
        .map(|_| match r.range(0, 2) {
            0 => After::Close,
            1 => After::NextInbound,
            _ => After::NewOutbound,
        })
        .collect();
    Plan {
        v_opens,
        last_writes,
        close_streams,
        run_before_close: r.range(0, 2) == 0,
        hangup,
        after,
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k * 13 + i * 17) % 251) as u8).collect()
}

fn run_inner(plan: &Plan, out: &mut Outcome, stage: &mut String) {
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

    *stage = "setting up streams".into();
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
        p.send(&header(TY_WINDOW, 0, sid, 16 * 1024 * 1024));
        v.drive();
        v.write_all(sid, format!("greeting {i}").as_bytes());
    }
    v.drive();
    p.read();
    let mut expected: Vec<Vec<u8>> = (0..sids.len())
        .map(|i| format!("greeting {i}").into_bytes())
        .collect();
    out.log.push(format!(
        "streams up: {}",
        sids.iter()
            .zip(&plan.v_opens)
            .map(|(s, m)| format!("{s} ({})", if *m { "V opened" } else { "P opened" }))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    *stage = "writing the last messages".into();
    for (i, &sid) in sids.iter().enumerate() {
        if plan.last_writes[i] > 0 {
            let bytes = payload(i, plan.last_writes[i]);
            v.write_all(sid, &bytes);
            expected[i].extend(bytes);
            out.log.push(format!("V app: write {} bytes on stream {sid}", plan.last_writes[i]));
        }
        if plan.close_streams[i] {
            v.close_stream(sid);
            out.log.push(format!("V app: close stream {sid}"));
        }
    }
    if plan.run_before_close {
        v.drive();
        out.log.push("V connection task runs".into());
    }
    if let Hangup::BeforeClose { v_runs } = plan.hangup {
        wire.lock().unwrap().hung_up = true;
        out.log.push("P hangs up".into());
        if v_runs {
            v.drive();
            out.log.push("V connection task runs".into());
        }
    }
    p.read();
    {
        let mut w = wire.lock().unwrap();
        w.closing = true;
        if let Hangup::DuringClose(k) = plan.hangup {
            w.hangup_after = Some(k);
        }
    }
    *stage = "closing the connection".into();
    let result = v.close();
    p.read();
    let (failed, hung) = {
        let w = wire.lock().unwrap();
        (w.failed_in_close, w.hung_up)
    };
    out.log.push(format!(
        "V app: close the connection -> {}{}",
        match &result {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        },
        if let Hangup::DuringClose(k) = plan.hangup {
            if hung {
                format!(" (P hung up after {k} bytes of the close; {failed} write(s) failed)")
            } else {
                " (P never hung up)".to_string()
            }
        } else {
            String::new()
        }
    ));
    if failed > 0 && result.is_ok() {
        out.violations.push(format!(
            "the close reported success although {failed} write(s) to the transport failed during it"
        ));
    }
    if matches!(plan.hangup, Hangup::Never) {
        if let Err(e) = &result {
            out.violations.push(format!("the close failed without any transport failure: {e}"));
        }
        for (i, &sid) in sids.iter().enumerate() {
            let seen = p.streams.get(&sid).cloned().unwrap_or_default();
            if seen.data != expected[i] {
                out.violations.push(format!(
                    "stream {sid}: P got {} of the {} bytes V's application wrote",
                    seen.data.len(),
                    expected[i].len()
                ));
            }
            if seen.fin != plan.close_streams[i] || seen.rst {
                out.violations.push(format!(
                    "stream {sid}: FIN {} / RST {} at P, V's application {} it",
                    seen.fin,
                    seen.rst,
                    if plan.close_streams[i] { "closed" } else { "did not close" }
                ));
            }
        }
        if !matches!(p.frames.last(), Some(Seen::GoAway(0))) {
            out.violations.push("the clean close did not end with a GoAway".into());
        }
        if !wire.lock().unwrap().closed {
            out.violations.push("the clean close did not close the transport".into());
        }
    }

    for (k, call) in plan.after.iter().enumerate() {
        *stage = format!("call {} after the close ({call:?})", k + 1);
        let shown = match call {
            After::Close => match with_cx(|cx| v.conn.poll_close(cx)) {
                Poll::Ready(Ok(())) => "ok".to_string(),
                Poll::Ready(Err(e)) => format!("error: {e}"),
                Poll::Pending => {
                    out.violations.push("closing again after the close never completes".into());
                    "pending".into()
                }
            },
            After::NextInbound => match with_cx(|cx| v.conn.poll_next_inbound(cx)) {
                Poll::Ready(None) => "end of connection".to_string(),
                Poll::Ready(Some(Err(e))) => format!("error: {e}"),
                Poll::Ready(Some(Ok(s))) => {
                    out.violations.push(format!("a closed connection yielded inbound stream {}", s.id()));
                    "a stream".into()
                }
                Poll::Pending => {
                    out.violations.push("waiting for inbound streams after the close never ends".into());
                    "pending".into()
                }
            },
            After::NewOutbound => match with_cx(|cx| v.conn.poll_new_outbound(cx)) {
                Poll::Ready(Err(e)) => format!("error: {e}"),
                Poll::Ready(Ok(s)) => {
                    out.violations.push(format!("a closed connection opened stream {}", s.id()));
                    "a stream".into()
                }
                Poll::Pending => {
                    out.violations.push("opening a stream after the close never completes".into());
                    "pending".into()
                }
            },
        };
        out.log.push(format!(
            "V app: {} -> {shown}",
            match call {
                After::Close => "close again",
                After::NextInbound => "poll for inbound streams",
                After::NewOutbound => "open a stream",
            }
        ));
    }
    *stage = "dropping the connection".into();
    drop(v);
}

pub fn run(plan: &Plan) -> Outcome {
    let mut out = Outcome::default();
    let mut stage = String::new();
    let result = catch_unwind(AssertUnwindSafe(|| run_inner(plan, &mut out, &mut stage)));
    if let Err(e) = result {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        out.crash = Some(msg.clone());
        out.log.push(format!("V panicked while {stage}: {msg}"));
        out.violations.push(format!("V panicked while {stage}: {msg}"));
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
fn close_retried_after_peer_hangs_up() {
    let plan = symptom_plan();
    check("symptom", &plan, &run(&plan));
}

#[test]
fn hangup_while_close_sends_data() {
    let plan = mid_data_plan();
    check("mid data", &plan, &run(&plan));
}

#[test]
fn clean_close_delivers_everything() {
    let plan = clean_plan();
    check("clean", &plan, &run(&plan));
}

#[test]
fn seeded_hangup_during_close() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..4 {
        let plan = plan_for_seed(seed * 4 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
