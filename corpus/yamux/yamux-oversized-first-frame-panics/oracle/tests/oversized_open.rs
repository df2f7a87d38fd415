//! A yamux node V (server side) and a peer P that speaks the yamux wire format directly
//! (hand-encoded 12-byte frame headers over an in-memory byte pipe), so P can send frames a
//! well-behaved yamux sender never would.
//!
//! The property: a data frame carrying more bytes than the stream's receive window allows is
//! a protocol violation whether it opens the stream or arrives on one already open. V answers
//! it with a GoAway carrying the protocol-error code, hands its application no stream for it
//! and none of its bytes, and never panics, neither then nor while it keeps running its
//! connection until P goes away. Streams P opened before keep what P sent on them, and a
//! frame that fills the window exactly is accepted.
//!
//! `seeded_oversized_frames` draws the honest streams, the size of the offending frame, its
//! flags, what follows it and whether it opens a stream from `FAULTLINE_SEED`.
//! `symptom_scenario` is the reported run, which the bundle generator replays.

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
const TY_WINDOW_UPDATE: u8 = 1;
const TY_PING: u8 = 2;
const TY_GO_AWAY: u8 = 3;
const SYN: u16 = 1;
const ACK: u16 = 2;
const FIN: u16 = 4;
/// The initial receive window of every stream, from the yamux specification.
const WINDOW: usize = 256 * 1024;
const PROTOCOL_ERROR: u32 = 1;
/// The largest frame body yamux decodes.
const MAX_BODY: usize = 1024 * 1024;

#[derive(Default)]
struct Wire {
    to_v: VecDeque<u8>,
    from_v: VecDeque<u8>,
    /// P closed its side: V reads end-of-stream once it has read everything.
    p_closed: bool,
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
            return if w.p_closed { Poll::Ready(Ok(0)) } else { Poll::Pending };
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

fn body(sid: u32, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k * 5 + sid as usize * 41) % 251) as u8).collect()
}

struct Peer {
    wire: Arc<Mutex<Wire>>,
    rx: Vec<u8>,
    go_away: Vec<u32>,
    pongs: usize,
    /// Bytes P may still send on each stream: the initial window, less what P sent, plus the
    /// credit V granted since (V grows a stream's window as its application keeps up).
    credit: BTreeMap<u32, usize>,
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
            let blen = if ty == TY_DATA { len as usize } else { 0 };
            if self.rx.len() < HEADER + blen {
                break;
            }
            self.rx.drain(..HEADER + blen);
            match ty {
                TY_GO_AWAY => self.go_away.push(len),
                TY_WINDOW_UPDATE => *self.credit.entry(sid).or_insert(WINDOW) += len as usize,
                TY_PING if flags & ACK != 0 => self.pongs += 1,
                TY_PING => self.send(&header(TY_PING, ACK, 0, len)),
                _ => {}
            }
        }
    }
}

struct Node {
    conn: Connection<Sock>,
    streams: BTreeMap<u32, Stream>,
    received: BTreeMap<u32, Vec<u8>>,
    ended: Option<String>,
}

fn with_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    f(&mut cx)
}

impl Node {
    /// V's connection task and its application (which accepts every stream and reads all it
    /// can) run until neither makes progress.
    fn drive(&mut self) {
        for _ in 0..100_000 {
            let mut progress = false;
            if self.ended.is_none() {
                match with_cx(|cx| self.conn.poll_next_inbound(cx)) {
                    Poll::Ready(Some(Ok(s))) => {
                        self.streams.insert(s.id().val(), s);
                        progress = true;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        self.ended = Some(format!("error: {e}"));
                        progress = true;
                    }
                    Poll::Ready(None) => {
                        self.ended = Some("closed".into());
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }
            for (id, s) in self.streams.iter_mut() {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match with_cx(|cx| Pin::new(&mut *s).poll_read(cx, &mut buf)) {
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
    }
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// Sizes of the streams P opens properly first (each at most one window).
    pub honest: Vec<usize>,
    /// Bytes in the offending frame when it opens a stream (more than one window); on an open
    /// stream it goes as far beyond the credit V granted as this goes beyond one window.
    pub oversized: usize,
    /// The offending frame opens a new stream (true) or goes on the last honest stream.
    pub opens: bool,
    pub fin: bool,
    /// Pings P sends in the same write right after the offending frame.
    pub pings_after: u32,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

/// The reported run: one stream P opens normally, then a stream whose first frame carries
/// a 300 KiB request.
pub fn symptom_plan() -> Plan {
    Plan {
        honest: vec![1200],
        oversized: 300 * 1024,
        opens: true,
        fin: true,
        pings_after: 0,
    }
}

/// An oversized frame on a stream that is already open, after one that fills the window of
/// its own stream exactly.
pub fn existing_stream_plan() -> Plan {
    Plan {
        honest: vec![WINDOW, 10],
        oversized: WINDOW + 1,
        opens: false,
        fin: false,
        pings_after: 2,
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
    let honest = (0..r.range(0, 3))
        .map(|_| match r.range(0, 3) {
            0 => WINDOW,
            _ => r.range(1, 20_000) as usize,
        })
        .collect::<Vec<_>>();
    let opens = honest.is_empty() || r.range(0, 3) > 0;
    Plan {
        oversized: match r.range(0, 2) {
            0 => WINDOW + r.range(1, 64) as usize,
            _ => r.range(WINDOW as u64 + 1, MAX_BODY as u64) as usize,
        },
        opens,
        fin: r.range(0, 1) == 0,
        pings_after: r.range(0, 3) as u32,
        honest,
    }
}

fn run_inner(plan: &Plan, out: &mut Outcome) {
    let wire = Arc::new(Mutex::new(Wire::default()));
    let mut v = Node {
        conn: Connection::new(Sock(wire.clone()), Config::default(), Mode::Server),
        streams: BTreeMap::new(),
        received: BTreeMap::new(),
        ended: None,
    };
    let mut p = Peer {
        wire: wire.clone(),
        rx: Vec::new(),
        go_away: Vec::new(),
        pongs: 0,
        credit: BTreeMap::new(),
    };
    let mut sid = 1;
    for &len in &plan.honest {
        p.send(&data(sid, SYN, &body(sid, len)));
        *p.credit.entry(sid).or_insert(WINDOW) -= len;
        v.drive();
        p.read();
        out.log.push(format!("P opens stream {sid} with a {len} byte frame"));
        sid += 2;
    }
    let target = if plan.opens { sid } else { sid - 2 };
    let credit = p.credit.get(&target).copied().unwrap_or(WINDOW);
    // Still a frame V's decoder takes: a larger one is refused before any window check.
    let size = (credit + (plan.oversized - WINDOW)).min(MAX_BODY);
    assert!(size > credit, "plan cannot exceed a credit of {credit} bytes in one frame");
    let mut flags = if plan.opens { SYN } else { 0 };
    if plan.fin {
        flags |= FIN;
    }
    let mut batch = data(target, flags, &body(target, size));
    for k in 0..plan.pings_after {
        batch.extend(header(TY_PING, SYN, 0, 100 + k));
    }
    p.send(&batch);
    out.log.push(format!(
        "P sends a {size} byte data frame {} stream {target}{}{}",
        if plan.opens { "opening" } else { "on the open" },
        if plan.fin { " with FIN" } else { "" },
        if plan.pings_after > 0 {
            format!(", then {} ping(s)", plan.pings_after)
        } else {
            String::new()
        }
    ));
    v.drive();
    p.read();
    out.log.push(format!(
        "V answered with GoAway code(s) {:?}; V's application has streams {:?}",
        p.go_away,
        v.streams.keys().collect::<Vec<_>>()
    ));
    // P goes away; V keeps running its connection until it sees the end.
    wire.lock().unwrap().p_closed = true;
    v.drive();
    out.log.push(format!(
        "P closes the connection; V's connection ended: {}",
        v.ended.clone().unwrap_or_else(|| "not yet".into())
    ));

    if p.go_away != [PROTOCOL_ERROR] {
        out.violations.push(format!(
            "V should answer the oversized frame with one GoAway carrying the protocol-error code, sent {:?}",
            p.go_away
        ));
    }
    if plan.opens && v.streams.contains_key(&target) {
        out.violations.push(format!(
            "V's application was handed stream {target}, opened by a frame larger than the window"
        ));
    }
    for (i, &len) in plan.honest.iter().enumerate() {
        let id = 1 + 2 * i as u32;
        let got = v.received.get(&id).cloned().unwrap_or_default();
        let mut expected = body(id, len);
        if !plan.opens && id == target && got.len() > len {
            out.violations.push(format!(
                "stream {id}: V's application read {} bytes beyond the window",
                got.len() - len
            ));
            expected = got.clone();
        }
        if got != expected {
            out.violations.push(format!(
                "stream {id}: V's application read {} of the {len} bytes P sent within the window",
                got.len()
            ));
        }
    }
    if v.ended.is_none() {
        out.violations.push("V's connection never ended after P went away".into());
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
        out.log.push(format!("V panicked: {msg}"));
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
fn oversized_first_frame() {
    let plan = symptom_plan();
    check("symptom", &plan, &run(&plan));
}

#[test]
fn oversized_frame_on_open_stream() {
    let plan = existing_stream_plan();
    check("existing", &plan, &run(&plan));
}

#[test]
fn seeded_oversized_frames() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..4 {
        let plan = plan_for_seed(seed * 4 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
