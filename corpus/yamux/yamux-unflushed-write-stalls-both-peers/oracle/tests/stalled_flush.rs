//! Two yamux nodes, A (client side) and B (server side), each driving its connection on a
//! small deterministic executor that polls a task only after its waker was called, as real
//! executors do. Between them is an in-memory transport that, like TLS or Noise sessions and
//! buffered sockets, keeps what a node writes until the node flushes it. A flush can be
//! refused for a while: the link is congested (the other side has not read enough of what is
//! already in flight) or stalled; the transport wakes the flushing task once it can go on.
//!
//! Each node answers requests: a stream opened by the other node carries a request up to
//! its end, the handler replies on the same stream and closes it. Requests go both ways,
//! some large.
//!
//! The property: once the link is no longer stalled, every request reaches its handler, every
//! reply reaches the node that asked, and nothing stays in a node's transport buffer; this
//! holds whenever the stalls happen, whatever the link's capacity, and with large requests in
//! both directions at once. While a node waits for the link it keeps its task asleep (it is
//! woken when the link can take data, not polled in a loop).
//!
//! `seeded_stalls` draws the requests, the link's capacity and when each direction stalls from
//! `FAULTLINE_SEED`. `symptom_scenario` is the reported run, which the bundle generator replays.

use std::{
    cell::RefCell,
    collections::VecDeque,
    future::Future,
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    pin::Pin,
    rc::Rc,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll, Waker},
};

use futures::{
    task::{waker, ArcWake},
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use yamux::{Config, Connection, Control, Mode};

/// Executor steps after which "run until nothing is woken" counts as never settling.
const MAX_STEPS: usize = 20_000;

// ---- a deterministic executor ----

#[derive(Default)]
struct Flag(AtomicBool);

impl ArcWake for Flag {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.store(true, Ordering::SeqCst);
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

#[derive(Clone, Default)]
struct Spawner(Rc<RefCell<Vec<Task>>>);

impl Spawner {
    fn spawn(&self, f: impl Future<Output = ()> + 'static) {
        self.0.borrow_mut().push(Box::pin(f));
    }
}

struct Slot {
    flag: Arc<Flag>,
    waker: Waker,
    fut: Option<Task>,
}

struct Exec {
    slots: Vec<Slot>,
    spawner: Spawner,
    cursor: usize,
    /// Times a run hit `MAX_STEPS` with tasks still being woken.
    unsettled: usize,
}

impl Exec {
    fn new() -> Self {
        Exec {
            slots: Vec::new(),
            spawner: Spawner::default(),
            cursor: 0,
            unsettled: 0,
        }
    }

    fn absorb(&mut self) {
        let new: Vec<Task> = self.spawner.0.borrow_mut().drain(..).collect();
        for fut in new {
            let flag = Arc::new(Flag(AtomicBool::new(true)));
            let waker = waker(flag.clone());
            self.slots.push(Slot {
                flag,
                waker,
                fut: Some(fut),
            });
        }
    }

    /// Polls one woken task, round robin. False when none was woken.
    fn step(&mut self) -> bool {
        self.absorb();
        let n = self.slots.len();
        for i in 0..n {
            let k = (self.cursor + i) % n;
            let slot = &mut self.slots[k];
            if slot.fut.is_some() && slot.flag.0.swap(false, Ordering::SeqCst) {
                let mut cx = Context::from_waker(&slot.waker);
                if slot.fut.as_mut().unwrap().as_mut().poll(&mut cx).is_ready() {
                    slot.fut = None;
                }
                self.cursor = (k + 1) % n;
                return true;
            }
        }
        false
    }

    /// Runs up to `budget` steps (at most `MAX_STEPS`), stopping when nothing is woken.
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

// ---- the transport ----

#[derive(Default)]
struct Dir {
    /// Written by the sender, not yet flushed: still in its transport buffer.
    buffered: Vec<u8>,
    /// Flushed and in flight; the receiver reads from here.
    in_flight: VecDeque<u8>,
    /// Bytes in flight the link holds before a flush has to wait for the receiver.
    capacity: usize,
    stalled: bool,
    flush_waker: Option<Waker>,
    read_waker: Option<Waker>,
    flushes_refused: usize,
}

impl Dir {
    fn wake_flush(&mut self) {
        if let Some(w) = self.flush_waker.take() {
            w.wake();
        }
    }
}

#[derive(Default)]
struct Link {
    a_to_b: Dir,
    b_to_a: Dir,
}

#[derive(Clone)]
struct End {
    link: Arc<Mutex<Link>>,
    is_a: bool,
}

impl End {
    fn with<R>(&self, f: impl FnOnce(&mut Dir, &mut Dir) -> R) -> R {
        let mut l = self.link.lock().unwrap();
        let Link { a_to_b, b_to_a } = &mut *l;
        if self.is_a {
            f(a_to_b, b_to_a)
        } else {
            f(b_to_a, a_to_b)
        }
    }
}

impl AsyncRead for End {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|_out, inn| {
            if inn.in_flight.is_empty() {
                inn.read_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = buf.len().min(inn.in_flight.len());
            for b in buf[..n].iter_mut() {
                *b = inn.in_flight.pop_front().unwrap();
            }
            // Room in flight again: a flush waiting on it can go on.
            if !inn.stalled {
                inn.wake_flush();
            }
            Poll::Ready(Ok(n))
        })
    }
}

impl AsyncWrite for End {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|out, _inn| {
            out.buffered.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        })
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|out, _inn| {
            if !out.stalled {
                let room = out.capacity.saturating_sub(out.in_flight.len());
                let n = room.min(out.buffered.len());
                out.in_flight.extend(out.buffered.drain(..n));
                if n > 0 {
                    if let Some(w) = out.read_waker.take() {
                        w.wake();
                    }
                }
            }
            if out.buffered.is_empty() {
                Poll::Ready(Ok(()))
            } else {
                out.flushes_refused += 1;
                out.flush_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

// ---- the nodes ----

#[derive(Clone, Debug)]
pub struct Request {
    /// A asks B (true) or B asks A.
    pub from_a: bool,
    pub size: usize,
}

#[derive(Clone, Debug)]
pub struct Phase {
    /// A request started at the beginning of this phase, if any (index into `requests`).
    pub start: Option<usize>,
    pub stall_a_to_b: bool,
    pub stall_b_to_a: bool,
    /// Executor steps in this phase (usize::MAX: until nothing is woken).
    pub steps: usize,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub capacity: usize,
    pub requests: Vec<Request>,
    pub phases: Vec<Phase>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub log: Vec<String>,
    pub crash: Option<String>,
    pub violations: Vec<String>,
}

#[derive(Debug, Default, Clone)]
struct Record {
    /// What the asking side got back, once it read the reply to its end.
    reply: Option<Vec<u8>>,
    /// What the answering side's handler read, once it saw the request's end.
    served: Option<usize>,
    error: Option<String>,
}

fn request_bytes(i: usize, size: usize) -> Vec<u8> {
    (0..size).map(|k| ((k * 11 + i * 29) % 251) as u8).collect()
}

fn reply_bytes(req: &[u8]) -> Vec<u8> {
    let sum: u64 = req.iter().map(|&b| b as u64).sum();
    format!("ok {} bytes, sum {sum}", req.len()).into_bytes()
}

type Records = Rc<RefCell<Vec<Record>>>;

fn spawn_node(exec: &Exec, end: End, mode: Mode, records: Records) -> Control {
    let mut conn = Connection::new(end, Config::default(), mode);
    let control = conn.control();
    let spawner = exec.spawner.clone();
    exec.spawner.spawn(async move {
        while let Ok(Some(mut stream)) = conn.next_stream().await {
            let records = records.clone();
            spawner.spawn(async move {
                let mut req = Vec::new();
                if stream.read_to_end(&mut req).await.is_err() {
                    return;
                }
                // The request starts with its index (4 bytes) so the handler can report it.
                let idx = u32::from_be_bytes([req[0], req[1], req[2], req[3]]) as usize;
                records.borrow_mut()[idx].served = Some(req.len() - 4);
                let reply = reply_bytes(&req[4..]);
                if let Err(e) = stream.write_all(&reply).await {
                    records.borrow_mut()[idx].error = Some(format!("reply: {e}"));
                    return;
                }
                let _ = stream.close().await;
            });
        }
    });
    control
}

fn spawn_request(exec: &Exec, mut control: Control, idx: usize, size: usize, records: Records) {
    exec.spawner.spawn(async move {
        let result: Result<Vec<u8>, String> = async {
            let mut s = control.open_stream().await.map_err(|e| format!("open: {e}"))?;
            let mut msg = (idx as u32).to_be_bytes().to_vec();
            msg.extend(request_bytes(idx, size));
            s.write_all(&msg).await.map_err(|e| format!("write: {e}"))?;
            s.close().await.map_err(|e| format!("close: {e}"))?;
            let mut reply = Vec::new();
            s.read_to_end(&mut reply).await.map_err(|e| format!("read: {e}"))?;
            Ok(reply)
        }
        .await;
        let mut r = records.borrow_mut();
        match result {
            Ok(reply) => r[idx].reply = Some(reply),
            Err(e) => r[idx].error = Some(e),
        }
    });
}

// ---- scenarios ----

/// The reported run: A's link to B is congested for a moment right when A sends one small
/// request; the congestion clears, then nothing else happens.
pub fn symptom_plan() -> Plan {
    Plan {
        capacity: 64 * 1024,
        requests: vec![Request {
            from_a: true,
            size: 200,
        }],
        phases: vec![
            Phase {
                start: Some(0),
                stall_a_to_b: true,
                stall_b_to_a: false,
                steps: 200,
            },
            Phase {
                start: None,
                stall_a_to_b: false,
                stall_b_to_a: false,
                steps: usize::MAX,
            },
        ],
    }
}

/// Large requests both ways over a small link, with no stall at all: each node's flushes wait
/// for the other to read.
pub fn crossing_plan() -> Plan {
    Plan {
        capacity: 4096,
        requests: vec![
            Request {
                from_a: true,
                size: 180_000,
            },
            Request {
                from_a: false,
                size: 150_000,
            },
        ],
        phases: vec![
            Phase {
                start: Some(0),
                stall_a_to_b: false,
                stall_b_to_a: false,
                steps: 3,
            },
            Phase {
                start: Some(1),
                stall_a_to_b: false,
                stall_b_to_a: false,
                steps: usize::MAX,
            },
        ],
    }
}

/// B's link stays stalled for a while with A's request in flight; nobody should spin.
pub fn long_stall_plan() -> Plan {
    Plan {
        capacity: 16 * 1024,
        requests: vec![Request {
            from_a: true,
            size: 3000,
        }],
        phases: vec![
            Phase {
                start: Some(0),
                stall_a_to_b: false,
                stall_b_to_a: true,
                steps: usize::MAX,
            },
            Phase {
                start: None,
                stall_a_to_b: false,
                stall_b_to_a: false,
                steps: usize::MAX,
            },
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
    let requests: Vec<Request> = (0..n)
        .map(|_| Request {
            from_a: r.range(0, 1) == 0,
            size: if r.range(0, 3) == 0 {
                r.range(20_000, 200_000) as usize
            } else {
                r.range(1, 3_000) as usize
            },
        })
        .collect();
    let mut phases = Vec::new();
    let mut next = 0;
    for _ in 0..r.range(n as u64, n as u64 + 4) {
        let start = if next < n && r.range(0, 2) > 0 {
            next += 1;
            Some(next - 1)
        } else {
            None
        };
        phases.push(Phase {
            start,
            stall_a_to_b: r.range(0, 2) == 0,
            stall_b_to_a: r.range(0, 2) == 0,
            steps: match r.range(0, 3) {
                0 => r.range(1, 5) as usize,
                1 => r.range(6, 60) as usize,
                _ => usize::MAX,
            },
        });
    }
    while next < n {
        phases.push(Phase {
            start: Some(next),
            stall_a_to_b: r.range(0, 1) == 0,
            stall_b_to_a: r.range(0, 1) == 0,
            steps: usize::MAX,
        });
        next += 1;
    }
    Plan {
        capacity: r.range(512, 128 * 1024) as usize,
        requests,
        phases,
    }
}

fn set_stalls(link: &Arc<Mutex<Link>>, ab: bool, ba: bool) {
    let mut l = link.lock().unwrap();
    let Link { a_to_b, b_to_a } = &mut *l;
    for (d, s) in [(a_to_b, ab), (b_to_a, ba)] {
        let was = d.stalled;
        d.stalled = s;
        if was && !s {
            d.wake_flush();
        }
    }
}

fn run_inner(plan: &Plan, out: &mut Outcome) {
    let link = Arc::new(Mutex::new(Link::default()));
    {
        let mut l = link.lock().unwrap();
        l.a_to_b.capacity = plan.capacity;
        l.b_to_a.capacity = plan.capacity;
    }
    let mut exec = Exec::new();
    let records: Records = Rc::new(RefCell::new(vec![Record::default(); plan.requests.len()]));
    let control_a = spawn_node(
        &exec,
        End {
            link: link.clone(),
            is_a: true,
        },
        Mode::Client,
        records.clone(),
    );
    let control_b = spawn_node(
        &exec,
        End {
            link: link.clone(),
            is_a: false,
        },
        Mode::Server,
        records.clone(),
    );
    exec.run(usize::MAX);

    for phase in &plan.phases {
        set_stalls(&link, phase.stall_a_to_b, phase.stall_b_to_a);
        let mut line = format!(
            "link A->B {}, B->A {}",
            if phase.stall_a_to_b { "congested" } else { "clear" },
            if phase.stall_b_to_a { "congested" } else { "clear" }
        );
        if let Some(i) = phase.start {
            let req = &plan.requests[i];
            let control = if req.from_a { control_a.clone() } else { control_b.clone() };
            spawn_request(&exec, control, i, req.size, records.clone());
            line.push_str(&format!(
                "; {} sends request {i} ({} bytes) to {}",
                if req.from_a { "A" } else { "B" },
                req.size,
                if req.from_a { "B" } else { "A" }
            ));
        }
        let stalled_long = phase.steps == usize::MAX && (phase.stall_a_to_b || phase.stall_b_to_a);
        let before = exec.unsettled;
        exec.run(phase.steps);
        if stalled_long && exec.unsettled > before {
            out.violations.push(
                "while the link was congested, a node kept its task busy instead of waiting to be woken"
                    .into(),
            );
        }
        out.log.push(line);
    }
    set_stalls(&link, false, false);
    out.log.push("link A->B clear, B->A clear; both nodes run until nothing is woken".into());
    let before = exec.unsettled;
    exec.run(usize::MAX);
    if exec.unsettled > before {
        out.violations.push("after the link cleared, the nodes never settled".into());
    }

    let l = link.lock().unwrap();
    for (name, d) in [("A", &l.a_to_b), ("B", &l.b_to_a)] {
        out.log.push(format!(
            "{name}: {} byte(s) still in its transport buffer (written, not flushed), {} in flight, {} flush(es) refused during the run",
            d.buffered.len(),
            d.in_flight.len(),
            d.flushes_refused
        ));
        if !d.buffered.is_empty() {
            out.violations.push(format!(
                "{} bytes {name} wrote stayed in its transport buffer after the link cleared",
                d.buffered.len()
            ));
        }
    }
    drop(l);
    for (i, (req, rec)) in plan.requests.iter().zip(records.borrow().iter()).enumerate() {
        let (asker, answerer) = if req.from_a { ("A", "B") } else { ("B", "A") };
        let expected = reply_bytes(&request_bytes(i, req.size));
        let status = match (&rec.served, &rec.reply) {
            (_, Some(r)) if *r == expected => "answered".to_string(),
            (_, Some(_)) => "answered wrongly".to_string(),
            (Some(n), None) => format!("{answerer} read the request ({n} bytes), {asker} has no reply"),
            (None, None) => format!("{answerer} never saw the end of the request"),
        };
        out.log.push(format!("request {i} ({asker} -> {answerer}, {} bytes): {status}", req.size));
        if rec.reply.as_ref() != Some(&expected) {
            out.violations.push(format!(
                "request {i} from {asker}: {status}{}",
                rec.error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
            ));
        }
        if let Some(n) = rec.served {
            if n != req.size {
                out.violations.push(format!("request {i}: {answerer} read {n} of {} bytes", req.size));
            }
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
        out.violations.push(format!("a node panicked: {msg}"));
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
fn request_during_brief_congestion() {
    let plan = symptom_plan();
    check("symptom", &plan, &run(&plan));
}

#[test]
fn large_requests_crossing_on_small_link() {
    let plan = crossing_plan();
    check("crossing", &plan, &run(&plan));
}

#[test]
fn long_congestion_keeps_nodes_asleep() {
    let plan = long_stall_plan();
    check("long stall", &plan, &run(&plan));
}

#[test]
fn seeded_stalls() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 0..4 {
        let plan = plan_for_seed(seed * 4 + round);
        check(&format!("seed {seed} round {round}"), &plan, &run(&plan));
    }
}
