//! What servers send each other, and what the log holds.

use std::collections::BTreeMap;

use faultline_sim::{ClientRequest, NodeId};
use serde::{Deserialize, Serialize};

/// A command in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Written by a new leader so that entries of earlier terms get committed with it.
    Noop,
    /// A client's request.
    Client(ClientRequest),
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The term of the leader that created it.
    pub term: u64,
    /// What it does.
    pub command: Command,
}

/// A client's last applied request, kept so that a retry is not applied again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The highest request number applied.
    pub seq: u64,
}

/// The state machine at a log index: what a snapshot holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The last index it includes.
    pub index: u64,
    /// The term of that entry.
    pub term: u64,
    /// The key-value data.
    pub kv: BTreeMap<String, String>,
    /// Each client's last applied request.
    pub sessions: BTreeMap<u64, Session>,
}

/// A message between servers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// A candidate asks for a vote.
    Vote {
        /// The candidate's term.
        term: u64,
        /// Index of its last entry.
        last_index: u64,
        /// Term of its last entry.
        last_term: u64,
    },
    /// The answer to [`Msg::Vote`].
    VoteReply {
        /// The voter's term.
        term: u64,
        /// Whether it voted for the candidate.
        granted: bool,
    },
    /// The leader replicates entries (none for a heartbeat).
    Append {
        /// The leader's term.
        term: u64,
        /// Index of the entry just before `entries`.
        prev_index: u64,
        /// Its term.
        prev_term: u64,
        /// Entries from `prev_index + 1` on.
        entries: Vec<Entry>,
        /// The leader's commit index.
        commit: u64,
    },
    /// The answer to [`Msg::Append`].
    AppendReply {
        /// The follower's term.
        term: u64,
        /// Whether the follower's log now matches the leader's through `index`.
        success: bool,
        /// On success the last index known to match; on failure where the leader should
        /// try next.
        index: u64,
    },
    /// The leader sends its snapshot to a follower whose next entry it no longer has.
    InstallSnapshot {
        /// The leader's term.
        term: u64,
        /// The snapshot.
        snapshot: Snapshot,
    },
    /// The answer to [`Msg::InstallSnapshot`].
    SnapshotReply {
        /// The follower's term.
        term: u64,
        /// The snapshot's last index, now matching.
        index: u64,
    },
}

impl Msg {
    /// The sender's term.
    pub fn term(&self) -> u64 {
        match self {
            Msg::Vote { term, .. }
            | Msg::VoteReply { term, .. }
            | Msg::Append { term, .. }
            | Msg::AppendReply { term, .. }
            | Msg::InstallSnapshot { term, .. }
            | Msg::SnapshotReply { term, .. } => *term,
        }
    }
}

/// Something to send once the state it depends on is stored.
#[derive(Debug)]
pub enum Out {
    /// To a server.
    Peer(NodeId, Msg),
    /// To a client.
    Client(ClientRequest, faultline_sim::ClientReply),
}
