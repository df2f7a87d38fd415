//! Hidden oracle: when two peers open a sync connection (fresh sync states, or states persisted
//! from an earlier connection and decoded again) and exchange messages until neither has anything
//! to send, each peer's sync state must report the other's current heads, the documents must be
//! equal, and a quiet connection must stay quiet (identical documents cost at most one message
//! from each side).
//!
//! The seeded test varies, per session, the actor pair, the history both peers hold before the
//! connection (none at all, or one to three changes), the offline edits each side makes before it
//! connects (often none, so the documents are identical), which peer opens, whether both open at
//! once, and whether the connection reuses persisted sync states from an earlier one.

use automerge::sync::{self, Message, SyncDoc};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ChangeHash, ReadDoc, ROOT};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// The two ends of a connection: a client and the sync server it talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Client,
    Server,
}

impl Peer {
    pub fn other(self) -> Peer {
        match self {
            Peer::Client => Peer::Server,
            Peer::Server => Peer::Client,
        }
    }
}

/// The shape of one session.
#[derive(Clone, Debug)]
pub struct Session {
    pub client_actor: [u8; 16],
    pub server_actor: [u8; 16],
    /// Changes both peers hold before the connection (0: two empty documents).
    pub shared_changes: usize,
    /// Whether an earlier connection synced that history and both sides persisted their sync
    /// states (`encode`), which this connection decodes instead of starting fresh.
    pub reconnect: bool,
    /// Changes the client makes offline before it connects.
    pub client_offline: usize,
    /// Changes the server takes from other clients while this one is away.
    pub server_offline: usize,
    /// The peer that generates the first message of the connection.
    pub opener: Peer,
    /// Whether the other peer also generates its opening message before receiving anything.
    pub both_open: bool,
}

impl Session {
    /// The reported session: a client opens its saved document and connects, with a new sync
    /// state, to a server that holds the same document; the client speaks first.
    pub fn reported() -> Session {
        Session {
            client_actor: [0xc1; 16],
            server_actor: [0x5e; 16],
            shared_changes: 2,
            reconnect: false,
            client_offline: 0,
            server_offline: 0,
            opener: Peer::Client,
            both_open: false,
        }
    }
}

/// What a session reports as it goes; the bundle generator prints it, the oracle ignores it.
pub trait Observer {
    /// The connection opens; `identical` tells whether both documents hold the same changes.
    fn opened(&mut self, _client: &AutoCommit, _server: &AutoCommit, _identical: bool) {}
    /// `from` was asked for a message in step `step` and produced `message` (None: nothing).
    fn generated(&mut self, _step: usize, _from: Peer, _message: Option<&Message>) {}
    /// `to` received a message.
    fn received(&mut self, _step: usize, _to: Peer, _state: &sync::State) {}
}

impl Observer for () {}

/// One end of the connection.
pub struct End {
    pub doc: AutoCommit,
    pub state: sync::State,
    pub sent: usize,
}

/// Both ends at the end of a session.
pub struct Ended {
    pub client: End,
    pub server: End,
    /// Whether the documents held the same changes when the connection opened.
    pub identical: bool,
    /// Whether the exchange went quiet within the step budget.
    pub settled: bool,
}

fn end_mut<'a>(client: &'a mut End, server: &'a mut End, who: Peer) -> (&'a mut End, &'a mut End) {
    match who {
        Peer::Client => (client, server),
        Peer::Server => (server, client),
    }
}

fn generate(end: &mut End) -> Option<Message> {
    let m = end.doc.sync().generate_sync_message(&mut end.state);
    if m.is_some() {
        end.sent += 1;
    }
    m
}

fn receive(end: &mut End, message: Message) {
    end.doc.sync().receive_sync_message(&mut end.state, message).expect("receive sync message");
}

/// Exchanges messages until both peers have nothing to send: `first` speaks first (with
/// `both_open`, the other speaks before receiving it), then they take strict turns, each one
/// receiving what the other sent before it is asked for its own message.
pub fn connect(
    client: &mut End,
    server: &mut End,
    first: Peer,
    both_open: bool,
    observer: &mut dyn Observer,
) -> bool {
    let mut step = 0;
    let mut pending: Option<(Peer, Message)> = None;
    {
        step += 1;
        let (a, b) = end_mut(client, server, first);
        let m = generate(a);
        observer.generated(step, first, m.as_ref());
        if both_open {
            let n = generate(b);
            observer.generated(step, first.other(), n.as_ref());
            if let Some(n) = n {
                receive(a, n);
                observer.received(step, first, &a.state);
            }
        }
        if let Some(m) = m {
            pending = Some((first.other(), m));
        }
    }
    let mut turn = first.other();
    let mut quiet_in_a_row = 0;
    while step < 40 {
        step += 1;
        let (me, _) = end_mut(client, server, turn);
        if let Some((to, m)) = pending.take() {
            debug_assert_eq!(to, turn);
            receive(me, m);
            observer.received(step, turn, &me.state);
        }
        let out = generate(me);
        observer.generated(step, turn, out.as_ref());
        match out {
            Some(m) => {
                quiet_in_a_row = 0;
                pending = Some((turn.other(), m));
            }
            None => {
                quiet_in_a_row += 1;
                if quiet_in_a_row >= 2 {
                    return true;
                }
            }
        }
        turn = turn.other();
    }
    false
}

fn edit(doc: &mut AutoCommit, key: &str, value: i64) {
    doc.put(ROOT, key, value).unwrap();
    doc.commit();
}

/// Runs one session; `rng` supplies the values written.
pub fn run_session(session: &Session, rng: &mut SmallRng, observer: &mut dyn Observer) -> Ended {
    let mut origin = AutoCommit::new().with_actor(ActorId::from(session.client_actor));
    for i in 0..session.shared_changes {
        edit(&mut origin, &format!("shared-{i}"), rng.gen::<u32>() as i64);
    }
    let saved = origin.save();
    let server_doc = AutoCommit::load(&saved).unwrap().with_actor(ActorId::from(session.server_actor));
    let mut client = End { doc: origin, state: sync::State::new(), sent: 0 };
    let mut server = End { doc: server_doc, state: sync::State::new(), sent: 0 };

    if session.reconnect {
        // An earlier connection over the same history; both sides persist their sync state.
        connect(&mut client, &mut server, Peer::Client, false, &mut ());
        let (c, s) = (client.state.encode(), server.state.encode());
        client.state = sync::State::decode(&c).unwrap();
        server.state = sync::State::decode(&s).unwrap();
        client.sent = 0;
        server.sent = 0;
    }

    for i in 0..session.client_offline {
        edit(&mut client.doc, &format!("client-{i}"), rng.gen::<u32>() as i64);
    }
    let mut other = AutoCommit::load(&server.doc.save()).unwrap().with_actor(ActorId::from([0x07; 16]));
    for i in 0..session.server_offline {
        edit(&mut other, &format!("other-{i}"), rng.gen::<u32>() as i64);
    }
    if session.server_offline > 0 {
        server.doc.merge(&mut other).unwrap();
    }

    let identical = client.doc.get_heads() == server.doc.get_heads();
    observer.opened(&client.doc, &server.doc, identical);
    let settled = connect(&mut client, &mut server, session.opener, session.both_open, observer);
    Ended { client, server, identical, settled }
}

fn sorted(mut h: Vec<ChangeHash>) -> Vec<ChangeHash> {
    h.sort();
    h
}

/// Checks a session's end; returns a description of the failure, if any.
pub fn check(ended: &mut Ended) -> Option<String> {
    if !ended.settled {
        return Some("the exchange did not go quiet within 40 steps".into());
    }
    let (hc, hs) = (ended.client.doc.get_heads(), ended.server.doc.get_heads());
    if hc != hs {
        return Some(format!("the connection is quiet but heads differ: client={hc:?} server={hs:?}"));
    }
    for key in ended.client.doc.keys(ROOT).chain(ended.server.doc.keys(ROOT)).collect::<Vec<_>>() {
        let vc = ended.client.doc.get(ROOT, &key).unwrap().map(|(v, _)| v.to_string());
        let vs = ended.server.doc.get(ROOT, &key).unwrap().map(|(v, _)| v.to_string());
        if vc != vs {
            return Some(format!("values of {key} differ: client={vc:?} server={vs:?}"));
        }
    }
    let client_view = ended.client.state.their_heads.clone().map(sorted);
    if client_view != Some(sorted(hs.clone())) {
        return Some(format!(
            "the client's sync state does not report the server's heads: their_heads={client_view:?}, server heads={hs:?}"
        ));
    }
    let server_view = ended.server.state.their_heads.clone().map(sorted);
    if server_view != Some(sorted(hc.clone())) {
        return Some(format!(
            "the server's sync state does not report the client's heads: their_heads={server_view:?}, client heads={hc:?}"
        ));
    }
    if ended.identical && (ended.client.sent > 1 || ended.server.sent > 1) {
        return Some(format!(
            "identical documents but the client sent {} and the server {} messages",
            ended.client.sent, ended.server.sent
        ));
    }
    for _ in 0..2 {
        if generate(&mut ended.client).is_some() || generate(&mut ended.server).is_some() {
            return Some("a quiet connection produced another message without anything received".into());
        }
    }
    None
}

/// The session shapes of a seed.
pub fn seeded_sessions(seed: u64, count: usize) -> Vec<Session> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let offline = rng.gen_bool(0.5);
            Session {
                client_actor: rng.gen(),
                server_actor: rng.gen(),
                shared_changes: rng.gen_range(0..4),
                reconnect: rng.gen_bool(0.5),
                client_offline: if offline { rng.gen_range(0..3) } else { 0 },
                server_offline: if offline { rng.gen_range(0..3) } else { 0 },
                opener: if rng.gen_bool(0.5) { Peer::Client } else { Peer::Server },
                both_open: rng.gen_bool(0.3),
            }
        })
        .collect()
}

#[test]
fn reported_connection_learns_server_heads() {
    let mut rng = SmallRng::seed_from_u64(0);
    let mut ended = run_session(&Session::reported(), &mut rng, &mut ());
    if let Some(err) = check(&mut ended) {
        panic!("reported session: {err}");
    }
}

#[test]
fn seeded_connections_learn_each_others_heads() {
    let seed = seed();
    let mut values = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let mut failures = Vec::new();
    for (i, session) in seeded_sessions(seed, SESSIONS).iter().enumerate() {
        if let Some(err) = check(&mut run_session(session, &mut values, &mut ())) {
            failures.push(format!("seed {seed} session {i} {session:?}: {err}"));
        }
    }
    assert!(failures.is_empty(), "{} of {SESSIONS} sessions failed; first: {}", failures.len(), failures[0]);
}

const SESSIONS: usize = 300;
