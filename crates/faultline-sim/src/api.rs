//! The node API: what a submission implements ([`Server`]) and what the simulator gives each
//! server ([`Network`], [`Storage`], [`Clock`]).
//!
//! A server is a future that runs until the simulator stops it. It sees the rest of the world only
//! through these traits, so that every run of it is decided by the schedule's seed: it must not
//! read the system clock, draw randomness from the operating system, start threads or iterate a
//! `HashMap` where the order changes what it sends.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A server's number: `0..nodes`.
pub type NodeId = u32;

/// The largest payload a server may send; larger ones are dropped.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// A key-value operation a client asks for. A key never written reads as the empty string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum KvOp {
    /// Read a key's value.
    Get {
        /// The key.
        key: String,
    },
    /// Replace a key's value.
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: String,
    },
    /// Append to a key's value.
    Append {
        /// The key.
        key: String,
        /// What is appended.
        value: String,
    },
}

/// A client's request as a server receives it.
///
/// A client has one request outstanding at a time and numbers them `1, 2, 3...`; when it gets no
/// answer it sends the same request (same `client` and `seq`) again, to the same server or
/// another, so a server may see one request many times and must apply it once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRequest {
    /// Which client; never reused.
    pub client: u64,
    /// The request's number within its client.
    pub seq: u64,
    /// What is asked.
    pub op: KvOp,
}

/// A server's answer to a [`ClientRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientReply {
    /// The value a get read.
    Value {
        /// The key's value.
        value: String,
    },
    /// A put or append took effect.
    Done,
    /// This server cannot serve the request; the client tries `leader` if given, or another
    /// server.
    NotLeader {
        /// Where the client should go instead, if the server knows.
        leader: Option<NodeId>,
    },
}

/// Something that arrived at a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Bytes another server sent with [`Network::send`].
    Peer {
        /// The sender.
        from: NodeId,
        /// What it sent.
        payload: Vec<u8>,
    },
    /// A client's request, to be answered with [`Network::reply`].
    Client(ClientRequest),
}

/// The network as a server sees it: unreliable datagrams between servers, and client requests.
///
/// A message may be lost, delivered twice, delayed or overtaken by later ones; servers in
/// different groups of a partition do not reach each other. Nothing reports a loss.
pub trait Network {
    /// Sends `payload` to server `to` (a message to itself is delivered like any other).
    /// Payloads above 1 MiB are dropped.
    fn send(&self, to: NodeId, payload: Vec<u8>);
    /// Answers a client's request; the answer crosses the same unreliable network.
    fn reply(&self, request: &ClientRequest, reply: ClientReply);
    /// Waits for the next message. Dropping the future before it finishes loses nothing.
    fn recv(&self) -> impl Future<Output = Message>;
}

/// A server's durable storage: named byte strings that survive a crash.
///
/// A write is atomic and durable when it returns; what a server keeps only in memory is lost
/// when it crashes. The bytes of all names and contents together count against the schedule's
/// storage limit.
pub trait Storage {
    /// The content stored under `name`, if any.
    fn read(&self, name: &str) -> Option<Vec<u8>>;
    /// Stores `data` under `name`, replacing what was there.
    fn write(&self, name: &str, data: &[u8]);
    /// Removes `name`; nothing happens when it is absent.
    fn remove(&self, name: &str);
    /// Every stored name, in ascending order.
    fn names(&self) -> Vec<String>;
}

/// A server's clock. Clocks of different servers may disagree by an offset and run at slightly
/// different rates; each is monotonic.
pub trait Clock {
    /// The time on this server's clock.
    fn now(&self) -> Duration;
    /// Waits until this server's clock reads `deadline` (returns at once if it already does).
    fn sleep_until(&self, deadline: Duration) -> impl Future<Output = ()>;
}

/// How many servers make an election and how many store an entry before it is committed.
///
/// A plan may set them for tasks on flexible quorums (any two election quorums intersect, and
/// every election quorum intersects every replication quorum); without one, both are a majority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quorums {
    /// Votes a candidate needs to lead, its own included.
    pub election: u32,
    /// Servers that must store an entry, the leader included, before it is committed.
    pub replication: u32,
}

impl Quorums {
    /// Both quorums a majority of `nodes`: what a cluster uses when its plan names none.
    pub fn majority(nodes: u32) -> Self {
        let majority = nodes / 2 + 1;
        Quorums {
            election: majority,
            replication: majority,
        }
    }

    /// Why these quorums are unsafe for a cluster of `nodes`, if they are: each must be between
    /// 1 and `nodes`, two elections must share a voter (`2 * election > nodes`), and an
    /// election must share a server with every replication (`election + replication > nodes`).
    pub fn check(&self, nodes: u32) -> Result<(), String> {
        let Quorums {
            election,
            replication,
        } = *self;
        if !(1..=nodes).contains(&election) || !(1..=nodes).contains(&replication) {
            return Err(format!(
                "quorums {election} and {replication} must each be 1 to {nodes} servers"
            ));
        }
        if 2 * election <= nodes {
            return Err(format!(
                "two election quorums of {election} in {nodes} servers need not share a voter"
            ));
        }
        if election + replication <= nodes {
            return Err(format!(
                "an election quorum of {election} and a replication quorum of {replication} \
                 need not share a server in {nodes}"
            ));
        }
        Ok(())
    }
}

/// Everything a server starts with. A restarted server gets a new `Env` with the same `id`,
/// `nodes`, `quorums` and storage, and a new `seed`.
pub struct Env<N, S, C> {
    /// This server.
    pub id: NodeId,
    /// Every server of the cluster, this one included, in ascending order.
    pub nodes: Vec<NodeId>,
    /// The cluster's quorum sizes (both a majority unless the schedule sets them).
    pub quorums: Quorums,
    /// The network.
    pub net: N,
    /// Its durable storage.
    pub storage: S,
    /// Its clock.
    pub clock: C,
    /// A seed for the server's own random choices (election timeouts), fixed by the schedule.
    pub seed: u64,
}

/// What a submission implements: a server of the replicated key-value store.
pub trait Server {
    /// Runs one incarnation of server `env.id` until the simulator stops it. A server that was
    /// stopped is started again with this same function and must recover from `env.storage`.
    fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) -> impl Future<Output = ()>;
}

/// Waits for the next message until `clock` reads `deadline`: `None` when the deadline came
/// first. The usual body of a server's loop, with nothing lost when the deadline wins.
pub async fn recv_until<N: Network, C: Clock>(
    net: &N,
    clock: &C,
    deadline: Duration,
) -> Option<Message> {
    tokio::select! {
        biased;
        message = net.recv() => Some(message),
        () = clock.sleep_until(deadline) => None,
    }
}
