//! A yamux node V (server side) and a peer P that speaks the yamux wire format directly
//! (hand-encoded 12-byte frame headers over an in-memory byte pipe), so P can stop reading
//! while it keeps writing, like a stalled or hostile remote.
//!
//! The property: while P does not read, V holds back only a bounded number of frames it has
//! produced for P (answers to P's pings, data its application writes on P's streams) instead
//! of queuing them without bound; once P reads again, every ping P sent is answered exactly
//! once and in order, every byte V's application wrote arrives in order, and the connection
//! keeps working (a new stream carries data both ways, a later ping is answered).
//!
//! The pipe from V to P holds `cap` bytes; whatever V writes beyond that waits until P
//! reads. What V "holds back" is measured from the outside: the answers (or bytes) P gets
//! after it starts reading again, minus those owed for frames V only read after that point.
//!
//! `seeded_stalled_peer` draws the pipe size, the kind of flood (pings, application writes
//! or both), its size and how P batches it from `FAULTLINE_SEED`. `symptom_scenario` is the
//! reported run, which the bundle generator replays.

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

/// Answers V may still hold back for P when P stops reading: any small bound will do, the
/// point is that it does not grow with the number of pings P sends.
pub const MAX_HELD_PONGS: usize = 64;
/// Bytes of application data V may still hold back for P (a few frames of the default
/// 16 KiB split size plus the per-stream command queue).
pub const MAX_HELD_BYTES: usize = 512 * 1024;

// ---- the byte pipe ----

#[derive(Default)]
struct Wire {
    /// P -> V: unbounded, P writes whatever it likes.
    to_v: VecDeque<u8>,
    /// V -> P: at most `cap` bytes until P reads.
    from_v: VecDeque<u8>,
    cap: usize,
    /// Bytes V has read so far.
    read_by_v: usize,
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
        w.read_by_v += n;
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
        let space = w.cap.saturating_sub(w.from_v.len());
        if space == 0 {
            return Poll::Pending;
        }
        let n = space.min(buf.len());
        w.from_v.extend(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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

fn ping(flags: u16, nonce: u32) -> Vec<u8> {
    header(TY_PING, flags, 0, nonce)
}

fn data(sid: u32, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut f = header(TY_DATA, flags, sid, body.len() as u32);
    f.extend_from_slice(body);
    f
}

fn window(sid: u32, flags: u16, credit: u32) -> Vec<u8> {
    header(TY_WINDOW, flags, sid, credit)
}

/// The bytes V's application writes, position by position.
fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| (i * 31 % 251) as u8).collect()
}

/// The remote peer: writes raw frames, reads V's frames only when told to.
struct Peer {
    wire: Arc<Mutex<Wire>>,
    rx: Vec<u8>,
    /// Nonces of the ping answers (ACK) V sent, in arrival order.
    pongs: Vec<u32>,
    /// Data V sent, per stream.
    data: BTreeMap<u32, Vec<u8>>,
    go_away: Option<u32>,
    /// Frames that are neither (window updates, V's own pings), counted.
    other: usize,
}

impl Peer {
    fn send(&self, bytes: &[u8]) {
        self.wire.lock().unwrap().to_v.extend(bytes);
    }

    /// Takes whatever V has written and decodes every complete frame; V's own pings are
    /// answered, as an honest peer would.
    fn read(&mut self) -> usize {
        let taken: Vec<u8> = self.wire.lock().unwrap().from_v.drain(..).collect();
        let n = taken.len();
        self.rx.extend(taken);
        loop {
            if self.rx.len() < HEADER {
                break;
            }
            let ty = self.rx[1];
            let flags = u16::from_be_bytes([self.rx[2], self.rx[3]]);
            let sid = u32::from_be_bytes([self.rx[4], self.rx[5], self.rx[6], self.rx[7]]);
            let len = u32::from_be_bytes([self.rx[8], self.rx[9], self.rx[10], self.rx[11]]);
            let body = if ty == TY_DATA { len as usize } else { 0 };
            if self.rx.len() < HEADER + body {
                break;
            }
            let frame: Vec<u8> = self.rx.drain(..HEADER + body).collect();
            match ty {
                TY_DATA => self
                    .data
                    .entry(sid)
                    .or_default()
                    .extend_from_slice(&frame[HEADER..]),
                TY_PING if flags & ACK != 0 => self.pongs.push(len),
                TY_PING => {
                    self.other += 1;
                    self.send(&ping(ACK, len));
                }
                TY_GO_AWAY => self.go_away = Some(len),
                _ => self.other += 1,
            }
        }
        n
    }
}

/// The node under test and its application, which accepts every inbound stream, reads all
/// it can and writes what it is told to.
struct Node {
    conn: Connection<Sock>,
    streams: BTreeMap<u32, Stream>,
    received: BTreeMap<u32, Vec<u8>>,
    closed: Option<String>,
}

impl Node {
    fn cx_poll<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        f(&mut cx)
    }

    /// Polls the connection and the application's reads until neither makes progress.
    fn drive(&mut self) {
        for _ in 0..1_000_000 {
            let mut progress = false;
            if self.closed.is_none() {
                match Self::cx_poll(|cx| self.conn.poll_next_inbound(cx)) {
                    Poll::Ready(Some(Ok(s))) => {
                        self.streams.insert(s.id().val(), s);
                        progress = true;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        self.closed = Some(format!("connection error: {e}"));
                        progress = true;
                    }
                    Poll::Ready(None) => {
                        self.closed = Some("connection closed".into());
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }
            for (id, s) in self.streams.iter_mut() {
                let mut buf = [0u8; 4096];
                loop {
                    match Self::cx_poll(|cx| Pin::new(&mut *s).poll_read(cx, &mut buf)) {
                        Poll::Ready(Ok(n)) if n > 0 => {
                            self.received.entry(*id).or_default().extend(&buf[..n]);
                            progress = true;
                        }
                        _ => break,
                    }
                }
            }
            if !progress {
                return;
            }
        }
        panic!("the node never settles");
    }

    /// The application writes as much of `buf` on stream `id` as the stream accepts now.
    fn write(&mut self, id: u32, buf: &[u8]) -> usize {
        let Some(s) = self.streams.get_mut(&id) else {
            return 0;
        };
        let mut done = 0;
        while done < buf.len() {
            match Self::cx_poll(|cx| Pin::new(&mut *s).poll_write(cx, &buf[done..])) {
                Poll::Ready(Ok(n)) if n > 0 => done += n,
                _ => break,
            }
        }
        done
    }
}

// ---- scenarios ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flood {
    /// P sends pings and does not read the answers.
    Pings,
    /// V's application writes a large reply on P's stream (P granted the credit for it).
    Writes,
    /// Both, interleaved.
    Both,
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Bytes the pipe from V to P holds while P does not read.
    pub cap: usize,
    pub flood: Flood,
    pub pings: u32,
    pub first_nonce: u32,
    /// Pings P writes between two polls of V.
    pub batch: u32,
    /// Bytes V's application writes on stream 1 while P does not read.
    pub write_bytes: usize,
    /// Bytes per application write call.
    pub chunk: usize,
    /// Streams P opens before it stalls (besides stream 1).
    pub extra_streams: u32,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
    /// Pings V read while P was not reading.
    pub pings_read_stalled: usize,
    /// Answers V held back when P started reading again.
    pub held_pongs: Option<usize>,
    /// Application bytes V held back when P started reading again.
    pub held_bytes: Option<usize>,
    /// While P was stalled, after each round: (pings P had sent, pings V had read, bytes
    /// waiting in the pipe to P, application bytes V had accepted).
    pub timeline: Vec<(u32, usize, usize, usize)>,
}

pub fn symptom_plan() -> Plan {
    Plan {
        cap: 512,
        flood: Flood::Pings,
        pings: 5000,
        first_nonce: 1,
        batch: 250,
        write_bytes: 0,
        chunk: 0,
        extra_streams: 0,
    }
}

pub fn writes_plan() -> Plan {
    Plan {
        cap: 2048,
        flood: Flood::Writes,
        pings: 0,
        first_nonce: 0,
        batch: 1,
        write_bytes: 3 * 1024 * 1024,
        chunk: 64 * 1024,
        extra_streams: 1,
    }
}

/// A small deterministic generator (xorshift64*).
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
    let flood = match r.range(0, 2) {
        0 => Flood::Pings,
        1 => Flood::Writes,
        _ => Flood::Both,
    };
    let pings = if flood == Flood::Writes {
        0
    } else {
        r.range(2_000, 8_000) as u32
    };
    let write_bytes = if flood == Flood::Pings {
        0
    } else {
        r.range(2 * 1024 * 1024, 5 * 1024 * 1024) as usize
    };
    Plan {
        cap: r.range(24, 4096) as usize,
        flood,
        pings,
        first_nonce: r.range(0, u32::MAX as u64 - 10_000) as u32,
        batch: r.range(1, 400) as u32,
        write_bytes,
        chunk: r.range(512, 96 * 1024) as usize,
        extra_streams: r.range(0, 3) as u32,
    }
}

fn run_inner(plan: &Plan, out: &mut Outcome) {
    let wire = Arc::new(Mutex::new(Wire {
        cap: plan.cap,
        ..Wire::default()
    }));
    let mut v = Node {
        conn: Connection::new(Sock(wire.clone()), Config::default(), Mode::Server),
        streams: BTreeMap::new(),
        received: BTreeMap::new(),
        closed: None,
    };
    let mut p = Peer {
        wire: wire.clone(),
        rx: Vec::new(),
        pongs: Vec::new(),
        data: BTreeMap::new(),
        go_away: None,
        other: 0,
    };

    // P opens stream 1 (and maybe more), V's application answers on each; P reads all of it.
    let opened: Vec<u32> = (0..=plan.extra_streams).map(|i| 1 + 2 * i).collect();
    for &sid in &opened {
        p.send(&data(sid, SYN, format!("hello {sid}").as_bytes()));
    }
    // Credit for the large reply V's application will write on stream 1.
    p.send(&window(1, 0, 64 * 1024 * 1024));
    v.drive();
    for &sid in &opened {
        v.write(sid, format!("hi {sid}").as_bytes());
    }
    for _ in 0..4 {
        p.read();
        v.drive();
    }
    out.log.push(format!(
        "P opened {} stream(s); V accepted {} and answered; P read {} frame(s) of V's own (pings, window updates)",
        opened.len(),
        v.streams.len(),
        p.other
    ));
    for &sid in &opened {
        let got = p.data.get(&sid).cloned().unwrap_or_default();
        if got != format!("hi {sid}").as_bytes() {
            out.violations.push(format!("stream {sid}: P got {:?} before stalling", String::from_utf8_lossy(&got)));
        }
        let seen = v.received.get(&sid).cloned().unwrap_or_default();
        if seen != format!("hello {sid}").as_bytes() {
            out.violations.push(format!("stream {sid}: V's application got {:?}", String::from_utf8_lossy(&seen)));
        }
    }
    let reply_base = p.data.get(&1).map(|d| d.len()).unwrap_or(0);

    // P stalls: it keeps writing but reads nothing from here on.
    let read_before = wire.lock().unwrap().read_by_v;
    let mut next_ping = 0u32;
    let mut written = 0usize;
    let mut rounds = 0u32;
    loop {
        let mut more = false;
        if next_ping < plan.pings {
            let end = (next_ping + plan.batch).min(plan.pings);
            let mut batch = Vec::new();
            for i in next_ping..end {
                batch.extend(ping(SYN, plan.first_nonce + i));
            }
            p.send(&batch);
            next_ping = end;
            more = true;
        }
        if written < plan.write_bytes {
            let len = plan.chunk.min(plan.write_bytes - written);
            let n = v.write(1, &pattern(written, len));
            written += n;
            if n > 0 {
                more = true;
            }
        }
        v.drive();
        {
            let w = wire.lock().unwrap();
            out.timeline.push((next_ping, (w.read_by_v - read_before) / HEADER, w.from_v.len(), written));
        }
        rounds += 1;
        if !more || rounds > 100_000 {
            break;
        }
    }
    let pings_read = (wire.lock().unwrap().read_by_v - read_before) / HEADER;
    out.pings_read_stalled = pings_read;
    out.log.push(format!(
        "P stalled (pipe V->P holds {} bytes) and sent {} ping(s); V read {} of them; V's application had {} of {} bytes accepted",
        plan.cap, plan.pings, pings_read, written, plan.write_bytes
    ));
    if v.closed.is_some() {
        out.violations.push(format!(
            "V dropped the connection while P was stalled: {}",
            v.closed.clone().unwrap()
        ));
    }

    let written_stalled = written;

    // P reads again: first what the pipe held, then everything V sends from now on.
    p.read();
    let pongs_in_pipe = p.pongs.len();
    let bytes_in_pipe = p.data.get(&1).map(|d| d.len()).unwrap_or(0) - reply_base;
    let mut idle = 0;
    for _ in 0..1_000_000 {
        let mut progress = p.read() > 0;
        if written < plan.write_bytes {
            let len = plan.chunk.min(plan.write_bytes - written);
            let n = v.write(1, &pattern(written, len));
            written += n;
            progress |= n > 0;
        }
        let before = wire.lock().unwrap().read_by_v;
        v.drive();
        progress |= wire.lock().unwrap().read_by_v != before;
        progress |= !wire.lock().unwrap().from_v.is_empty();
        if progress {
            idle = 0;
        } else {
            idle += 1;
            if idle > 3 {
                break;
            }
        }
    }
    let read_later = plan.pings as usize - pings_read;
    if plan.pings > 0 {
        let held = (p.pongs.len() - pongs_in_pipe).saturating_sub(read_later);
        out.held_pongs = Some(held);
        out.log.push(format!(
            "P read again: {} answer(s) were in the pipe, {} more came, {} of them for pings V had already read",
            pongs_in_pipe,
            p.pongs.len() - pongs_in_pipe,
            held
        ));
        if held > MAX_HELD_PONGS {
            out.violations.push(format!(
                "V held back {held} answers for a peer that was not reading (at most {MAX_HELD_PONGS} expected)"
            ));
        }
    }
    if plan.write_bytes > 0 {
        let held = written_stalled.saturating_sub(bytes_in_pipe);
        out.held_bytes = Some(held);
        out.log.push(format!(
            "P read again: {} reply byte(s) were in the pipe, {} accepted bytes had not reached it",
            bytes_in_pipe, held
        ));
        if held > MAX_HELD_BYTES {
            out.violations.push(format!(
                "V held back {held} bytes of replies for a peer that was not reading (at most {MAX_HELD_BYTES} expected)"
            ));
        }
    }

    // Completeness: every ping answered exactly once, in order; every byte in order.
    let expected: Vec<u32> = (0..plan.pings).map(|i| plan.first_nonce + i).collect();
    if p.pongs != expected {
        let first_bad = p
            .pongs
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(p.pongs.len().min(expected.len()));
        out.violations.push(format!(
            "P sent {} pings and got {} answers (first difference at answer {})",
            expected.len(),
            p.pongs.len(),
            first_bad
        ));
    }
    if written != plan.write_bytes {
        out.violations.push(format!(
            "V's application could write only {written} of {} bytes after P read again",
            plan.write_bytes
        ));
    }
    let reply = p.data.get(&1).cloned().unwrap_or_default();
    if reply.len() < reply_base || reply[reply_base..] != pattern(0, written)[..] {
        out.violations.push(format!(
            "stream 1: P got {} reply bytes, not the {} V's application wrote, in order",
            reply.len().saturating_sub(reply_base),
            written
        ));
    }
    if let Some(code) = p.go_away {
        out.violations.push(format!("V sent GoAway (code {code})"));
    }

    // The connection keeps working: a new stream both ways and one more ping.
    let sid = 1 + 2 * (plan.extra_streams + 1);
    p.send(&data(sid, SYN, b"after"));
    p.send(&ping(SYN, 7));
    v.drive();
    v.write(sid, b"still here");
    for _ in 0..4 {
        p.read();
        v.drive();
    }
    let ok_stream = p.data.get(&sid).map(|d| d.as_slice()) == Some(&b"still here"[..])
        && v.received.get(&sid).map(|d| d.as_slice()) == Some(&b"after"[..]);
    let ok_ping = p.pongs.last() == Some(&7);
    out.log.push(format!(
        "afterwards: new stream {} {}, ping {}",
        sid,
        if ok_stream { "works" } else { "does not work" },
        if ok_ping { "answered" } else { "not answered" }
    ));
    if !ok_stream || !ok_ping {
        out.violations.push(format!(
            "the connection no longer works after P read again (stream {sid}: {ok_stream}, ping: {ok_ping})"
        ));
    }
    if let Some(c) = &v.closed {
        out.violations.push(format!("V's connection ended: {c}"));
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
fn ping_flood_from_stalled_peer() {
    let plan = symptom_plan();
    check("ping flood", &plan, &run(&plan));
}

#[test]
fn replies_to_stalled_peer() {
    let plan = writes_plan();
    check("replies", &plan, &run(&plan));
}

#[test]
fn seeded_stalled_peer() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..3 {
        let plan = plan_for_seed(seed * 3 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
