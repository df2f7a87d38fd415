//! A yamux node V (server side) and a peer P that speaks the yamux wire format directly
//! (hand-encoded 12-byte frame headers over an in-memory byte pipe). Other yamux
//! implementations half-close a stream (FIN) with either a data frame or a window-update
//! frame; P does both.
//!
//! V's application runs as tasks on a small deterministic scheduler that polls a task only
//! after its waker was called, as a real executor does: a task that is never woken again
//! stays parked for good. The connection is one task; each stream's handler is another.
//!
//! The property: however P half-closes a stream (data frame or window update, with or
//! without credit) and whenever that arrives (before or after V's handler has parked waiting
//! for more data), the handler reading that stream sees every byte P sent and then the end
//! of the stream, can still write its reply on the same stream (a half-close leaves V's
//! direction open), and closes it; P receives each reply followed by V's FIN. Streams V opens
//! behave the same way. Handlers are woken when something happened, not polled in a loop.
//!
//! `seeded_half_close` draws the streams, how each is closed and how P's frames interleave
//! with the scheduler's steps from `FAULTLINE_SEED`. `symptom_scenario` is the reported run,
//! which the bundle generator replays.

use std::{
    collections::{BTreeMap, VecDeque},
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll, Waker},
};

use futures::{
    task::{waker, ArcWake},
    AsyncRead, AsyncWrite,
};
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

/// Scheduler steps after which "run until nothing is woken" counts as never settling (tasks
/// polling themselves).
const MAX_STEPS: usize = 5_000;

// ---- wakers and the byte pipe ----

#[derive(Default)]
struct Flag(AtomicBool);

impl ArcWake for Flag {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Wire {
    to_v: VecDeque<u8>,
    from_v: VecDeque<u8>,
    /// The waker of whoever last found nothing to read.
    reader: Option<Waker>,
}

#[derive(Clone)]
struct Sock(Arc<Mutex<Wire>>);

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        if w.to_v.is_empty() {
            w.reader = Some(cx.waker().clone());
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
        self.0.lock().unwrap().from_v.extend(buf);
        Poll::Ready(Ok(buf.len()))
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

fn data(sid: u32, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut f = header(TY_DATA, flags, sid, body.len() as u32);
    f.extend_from_slice(body);
    f
}

fn window(sid: u32, flags: u16, credit: u32) -> Vec<u8> {
    header(TY_WINDOW, flags, sid, credit)
}

/// What P saw from V on one stream.
#[derive(Debug, Default, Clone)]
struct SeenStream {
    data: Vec<u8>,
    fin: bool,
    rst: bool,
}

struct Peer {
    wire: Arc<Mutex<Wire>>,
    rx: Vec<u8>,
    streams: BTreeMap<u32, SeenStream>,
    go_away: Option<u32>,
}

impl Peer {
    fn send(&self, bytes: &[u8]) {
        let mut w = self.wire.lock().unwrap();
        w.to_v.extend(bytes);
        if let Some(r) = w.reader.take() {
            r.wake();
        }
    }

    /// Decodes every complete frame V has written; answers V's pings.
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
            match ty {
                TY_DATA | TY_WINDOW => {
                    let s = self.streams.entry(sid).or_default();
                    s.data.extend_from_slice(&frame[HEADER..]);
                    s.fin |= flags & FIN != 0;
                    s.rst |= flags & RST != 0;
                }
                TY_PING if flags & ACK == 0 => self.send(&header(TY_PING, ACK, 0, len)),
                TY_GO_AWAY => self.go_away = Some(len),
                _ => {}
            }
        }
    }
}

// ---- V's application: one task per stream ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A handler of a stream P opened reads the request to its end; a client of a stream V
    /// opened first writes its request.
    Start,
    Reading,
    Replying(usize),
    Closing,
    Done,
    Failed,
}

struct Handler {
    stream: Stream,
    /// V opened this stream (it writes a request first, then reads the answer).
    outbound: bool,
    phase: Phase,
    got: Vec<u8>,
    polls: usize,
    error: Option<String>,
}

fn reply_for(sid: u32, got: &[u8]) -> Vec<u8> {
    format!("reply {sid}: {} bytes", got.len()).into_bytes()
}

fn request_for(sid: u32) -> Vec<u8> {
    format!("request from V on {sid}").into_bytes()
}

impl Handler {
    fn sid(&self) -> u32 {
        self.stream.id().val()
    }

    fn poll(&mut self, cx: &mut Context<'_>) {
        self.polls += 1;
        loop {
            match self.phase {
                Phase::Start => {
                    if self.outbound {
                        let req = request_for(self.sid());
                        match Pin::new(&mut self.stream).poll_write(cx, &req) {
                            Poll::Ready(Ok(n)) if n == req.len() => self.phase = Phase::Reading,
                            Poll::Ready(r) => return self.fail(format!("request write: {r:?}")),
                            Poll::Pending => return,
                        }
                    } else {
                        self.phase = Phase::Reading;
                    }
                }
                Phase::Reading => {
                    let mut buf = [0u8; 1024];
                    match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(0)) => {
                            self.phase = if self.outbound {
                                Phase::Closing
                            } else {
                                Phase::Replying(0)
                            }
                        }
                        Poll::Ready(Ok(n)) => self.got.extend_from_slice(&buf[..n]),
                        Poll::Ready(Err(e)) => return self.fail(format!("read: {e}")),
                        Poll::Pending => return,
                    }
                }
                Phase::Replying(off) => {
                    let reply = reply_for(self.sid(), &self.got);
                    if off == reply.len() {
                        self.phase = Phase::Closing;
                        continue;
                    }
                    match Pin::new(&mut self.stream).poll_write(cx, &reply[off..]) {
                        Poll::Ready(Ok(n)) if n > 0 => self.phase = Phase::Replying(off + n),
                        Poll::Ready(r) => return self.fail(format!("reply write: {r:?}")),
                        Poll::Pending => return,
                    }
                }
                Phase::Closing => match Pin::new(&mut self.stream).poll_close(cx) {
                    Poll::Ready(Ok(())) => self.phase = Phase::Done,
                    Poll::Ready(Err(e)) => return self.fail(format!("close: {e}")),
                    Poll::Pending => return,
                },
                Phase::Done | Phase::Failed => return,
            }
        }
    }

    fn fail(&mut self, e: String) {
        self.error = Some(e);
        self.phase = Phase::Failed;
    }
}

struct Task {
    flag: Arc<Flag>,
    waker: Waker,
}

impl Task {
    fn new() -> Self {
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        let waker = waker(flag.clone());
        Task { flag, waker }
    }
    fn take_woken(&self) -> bool {
        self.flag.0.swap(false, Ordering::SeqCst)
    }
}

/// V: its connection task and one task per stream handler.
struct Node {
    conn: Connection<Sock>,
    conn_task: Task,
    /// Outbound streams still to open.
    to_open: u32,
    handlers: Vec<(Task, Handler)>,
    closed: Option<String>,
    /// Times a run hit `MAX_STEPS` with tasks still being woken.
    unsettled: usize,
    cursor: usize,
}

impl Node {
    fn poll_conn(&mut self) -> bool {
        if !self.conn_task.take_woken() || self.closed.is_some() {
            return false;
        }
        let w = self.conn_task.waker.clone();
        let mut cx = Context::from_waker(&w);
        while self.to_open > 0 {
            match self.conn.poll_new_outbound(&mut cx) {
                Poll::Ready(Ok(s)) => {
                    self.to_open -= 1;
                    self.spawn(s, true);
                }
                Poll::Ready(Err(e)) => {
                    self.closed = Some(format!("open: {e}"));
                    return true;
                }
                Poll::Pending => break,
            }
        }
        loop {
            match self.conn.poll_next_inbound(&mut cx) {
                Poll::Ready(Some(Ok(s))) => self.spawn(s, false),
                Poll::Ready(Some(Err(e))) => {
                    self.closed = Some(format!("connection error: {e}"));
                    break;
                }
                Poll::Ready(None) => {
                    self.closed = Some("connection closed".into());
                    break;
                }
                Poll::Pending => break,
            }
        }
        true
    }

    fn spawn(&mut self, stream: Stream, outbound: bool) {
        self.handlers.push((
            Task::new(),
            Handler {
                stream,
                outbound,
                phase: Phase::Start,
                got: Vec::new(),
                polls: 0,
                error: None,
            },
        ));
    }

    /// Polls one woken task (round robin: the connection, then the handlers in turn).
    /// Returns false when nothing was woken.
    fn step(&mut self) -> bool {
        let n = self.handlers.len() + 1;
        for i in 0..n {
            let k = (self.cursor + i) % n;
            let ran = if k == 0 {
                self.poll_conn()
            } else {
                let (task, h) = &mut self.handlers[k - 1];
                if task.take_woken() {
                    let mut cx = Context::from_waker(&task.waker);
                    h.poll(&mut cx);
                    true
                } else {
                    false
                }
            };
            if ran {
                self.cursor = (k + 1) % (self.handlers.len() + 1);
                return true;
            }
        }
        false
    }

    /// Runs up to `budget` steps (at most `MAX_STEPS`); stops early when nothing is woken.
    fn run(&mut self, budget: usize) {
        for _ in 0..budget.min(MAX_STEPS) {
            if !self.step() {
                return;
            }
        }
        if budget >= MAX_STEPS {
            self.unsettled += 1;
        }
    }
}

// ---- scenarios ----

/// How P ends its side of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// A data frame with FIN and no body.
    DataFin,
    /// A window-update frame with FIN carrying this credit.
    WindowFin(u32),
}

#[derive(Clone, Debug)]
pub struct StreamPlan {
    /// V opened it (P answers V's request) or P opened it (P sends a request).
    pub v_opens: bool,
    /// The chunks of data P sends on it.
    pub chunks: Vec<Vec<u8>>,
    pub close: Close,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub streams: Vec<StreamPlan>,
    /// P's frames in the order P sends them: (stream index, step), where step k < chunks is
    /// chunk k and step == chunks is the close.
    pub order: Vec<(usize, usize)>,
    /// Scheduler steps V runs before each of P's frames (usize::MAX: until nothing is woken).
    pub pauses: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

fn sid_of(plan: &Plan, i: usize) -> u32 {
    // P (client side) opens odd ids in order; V (server side) opens even ids in order.
    let mine = plan.streams[..i]
        .iter()
        .filter(|s| s.v_opens == plan.streams[i].v_opens)
        .count() as u32;
    if plan.streams[i].v_opens {
        2 + 2 * mine
    } else {
        1 + 2 * mine
    }
}

fn close_name(c: Close) -> String {
    match c {
        Close::DataFin => "data frame with FIN".into(),
        Close::WindowFin(0) => "window update with FIN (no credit)".into(),
        Close::WindowFin(c) => format!("window update with FIN (credit {c})"),
    }
}

/// The reported run: P sends a request in two frames, V's handler reads both and waits for
/// more, then P half-closes with a bare window update carrying FIN.
pub fn symptom_plan() -> Plan {
    Plan {
        streams: vec![StreamPlan {
            v_opens: false,
            chunks: vec![b"GET /blocks/1".to_vec(), b" HTTP-ish".to_vec()],
            close: Close::WindowFin(0),
        }],
        order: vec![(0, 0), (0, 1), (0, 2)],
        pauses: vec![usize::MAX, usize::MAX, usize::MAX],
    }
}

/// P piggybacks the credit for what it read on its FIN, on streams both sides opened.
pub fn credit_plan() -> Plan {
    Plan {
        streams: vec![
            StreamPlan {
                v_opens: true,
                chunks: vec![b"answer part 1".to_vec(), b"answer part 2".to_vec()],
                close: Close::WindowFin(4096),
            },
            StreamPlan {
                v_opens: false,
                chunks: vec![b"second request".to_vec()],
                close: Close::WindowFin(65536),
            },
            StreamPlan {
                v_opens: false,
                chunks: vec![b"third request".to_vec()],
                close: Close::DataFin,
            },
        ],
        order: vec![(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (1, 1), (0, 2)],
        pauses: vec![usize::MAX; 7],
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
    let mut streams = Vec::new();
    for i in 0..n {
        let chunks = (0..r.range(1, 3))
            .map(|k| {
                let len = r.range(1, 3000) as usize;
                (0..len).map(|j| (i * 7 + k as usize * 13 + j) as u8).collect()
            })
            .collect();
        let close = match r.range(0, 3) {
            0 => Close::DataFin,
            1 => Close::WindowFin(0),
            _ => Close::WindowFin(r.range(1, 1 << 20) as u32),
        };
        streams.push(StreamPlan {
            v_opens: r.range(0, 2) == 0,
            chunks,
            close,
        });
    }
    // Interleave the streams' frames, each stream's in its own order.
    let mut next: Vec<usize> = vec![0; n];
    let mut order = Vec::new();
    loop {
        let open: Vec<usize> = (0..n).filter(|&i| next[i] <= streams[i].chunks.len()).collect();
        if open.is_empty() {
            break;
        }
        let i = open[r.range(0, open.len() as u64 - 1) as usize];
        order.push((i, next[i]));
        next[i] += 1;
    }
    let pauses = order
        .iter()
        .map(|_| match r.range(0, 4) {
            0 => 0,
            1 => 1,
            2 => r.range(2, 8) as usize,
            _ => usize::MAX,
        })
        .collect();
    Plan {
        streams,
        order,
        pauses,
    }
}

fn run_inner(plan: &Plan, out: &mut Outcome) {
    let wire = Arc::new(Mutex::new(Wire::default()));
    let to_open = plan.streams.iter().filter(|s| s.v_opens).count() as u32;
    let mut v = Node {
        conn: Connection::new(Sock(wire.clone()), Config::default(), Mode::Server),
        conn_task: Task::new(),
        to_open,
        handlers: Vec::new(),
        closed: None,
        unsettled: 0,
        cursor: 0,
    };
    let mut p = Peer {
        wire: wire.clone(),
        rx: Vec::new(),
        streams: BTreeMap::new(),
        go_away: None,
    };
    v.run(usize::MAX);
    p.read();

    let mut opened = vec![false; plan.streams.len()];
    for (k, &(i, step)) in plan.order.iter().enumerate() {
        v.run(plan.pauses[k]);
        p.read();
        let s = &plan.streams[i];
        let sid = sid_of(plan, i);
        let mut flags = 0;
        if !opened[i] {
            flags |= if s.v_opens { ACK } else { SYN };
            opened[i] = true;
        }
        let parked = v
            .handlers
            .iter()
            .find(|(_, h)| h.sid() == sid)
            .map(|(t, h)| h.phase == Phase::Reading && !t.flag.0.load(Ordering::SeqCst))
            .unwrap_or(false);
        if step < s.chunks.len() {
            p.send(&data(sid, flags, &s.chunks[step]));
            out.log.push(format!(
                "P -> V stream {sid}: data, {} bytes{}",
                s.chunks[step].len(),
                if flags & SYN != 0 { " (opens it)" } else { "" }
            ));
        } else {
            match s.close {
                Close::DataFin => p.send(&data(sid, flags | FIN, &[])),
                Close::WindowFin(c) => p.send(&window(sid, flags | FIN, c)),
            }
            out.log.push(format!(
                "P -> V stream {sid}: {} (V's handler {})",
                close_name(s.close),
                if parked { "was waiting for data" } else { "was not waiting" }
            ));
        }
    }
    v.run(usize::MAX);
    for _ in 0..4 {
        p.read();
        v.run(usize::MAX);
    }
    p.read();

    if v.unsettled > 0 {
        out.violations.push(format!(
            "V's tasks never settled: {} time(s) they were still being woken after {MAX_STEPS} polls with nothing new arriving",
            v.unsettled
        ));
    }
    if let Some(c) = &v.closed {
        out.violations.push(format!("V's connection ended: {c}"));
    }
    if let Some(code) = p.go_away {
        out.violations.push(format!("V sent GoAway (code {code})"));
    }
    for (i, s) in plan.streams.iter().enumerate() {
        let sid = sid_of(plan, i);
        let sent: Vec<u8> = s.chunks.concat();
        let Some((_, h)) = v.handlers.iter().find(|(_, h)| h.sid() == sid) else {
            out.violations.push(format!("stream {sid}: V never had a handler for it"));
            continue;
        };
        let frames = s.chunks.len() + 1;
        let seen = p.streams.get(&sid).cloned().unwrap_or_default();
        out.log.push(format!(
            "stream {sid} ({}, closed by P with a {}): V's handler {:?} after {} polls, read {} of {} bytes; P got {} bytes from V{}",
            if s.v_opens { "V opened it" } else { "P opened it" },
            close_name(s.close),
            h.phase,
            h.polls,
            h.got.len(),
            sent.len(),
            seen.data.len(),
            if seen.fin { " and V's FIN" } else { ", no FIN" }
        ));
        if h.got != sent {
            out.violations.push(format!(
                "stream {sid}: V's handler read {} bytes, P sent {}",
                h.got.len(),
                sent.len()
            ));
        }
        if h.phase != Phase::Done {
            out.violations.push(format!(
                "stream {sid}: V's handler is stuck in {:?}{} although P ended its side with a {}",
                h.phase,
                h.error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default(),
                close_name(s.close)
            ));
        }
        let expected = if s.v_opens {
            request_for(sid)
        } else {
            reply_for(sid, &sent)
        };
        if seen.data != expected || !seen.fin || seen.rst {
            out.violations.push(format!(
                "stream {sid}: P got {:?} (FIN {}, RST {}) from V, expected {:?} then FIN",
                String::from_utf8_lossy(&seen.data),
                seen.fin,
                seen.rst,
                String::from_utf8_lossy(&expected)
            ));
        }
        if h.polls > 6 * frames + 10 {
            out.violations.push(format!(
                "stream {sid}: V's handler was polled {} times for {} frames (it is woken without cause)",
                h.polls, frames
            ));
        }
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
fn request_half_closed_by_window_update() {
    let plan = symptom_plan();
    check("symptom", &plan, &run(&plan));
}

#[test]
fn half_close_with_credit_both_directions() {
    let plan = credit_plan();
    check("credit", &plan, &run(&plan));
}

#[test]
fn seeded_half_close() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..4 {
        let plan = plan_for_seed(seed * 4 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
