//! A Raft server's state and its handlers for timers, votes and client requests. Replication is
//! in `replicate.rs`, storage in `persist.rs`.
//!
//! Handlers only change memory and queue what to send; the event loop then stores what changed
//! and only after that sends (`Node::flush`), so nothing leaves a server before the state it
//! depends on is durable.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use faultline_sim::{ClientReply, ClientRequest, KvOp, NodeId, Quorums};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::log::Log;
use crate::machine::Machine;
use crate::msg::{Command, Entry, Msg, Out, Snapshot};

/// How often a leader sends heartbeats.
pub const HEARTBEAT: Duration = Duration::from_millis(50);
/// Shortest election timeout; also how long a leader goes without hearing from enough servers
/// to commit before it steps down.
pub const ELECTION_MIN: Duration = Duration::from_millis(300);
/// Longest election timeout.
pub const ELECTION_MAX: Duration = Duration::from_millis(600);
/// Applied entries kept in the log before they are folded into a snapshot.
pub const SNAPSHOT_EVERY: u64 = 32;

/// A server's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Asks for votes.
    Candidate,
    /// Leads its term.
    Leader,
}

/// What must be written to storage before the queued messages are sent.
#[derive(Debug, Default)]
pub struct Dirty {
    /// The term and vote.
    pub meta: bool,
    /// The snapshot.
    pub snapshot: bool,
    /// The first log index to write again (entries from there to the end).
    pub log_from: Option<u64>,
}

impl Dirty {
    /// Marks the log dirty from `index` on.
    pub fn log(&mut self, index: u64) {
        self.log_from = Some(self.log_from.map_or(index, |i| i.min(index)));
    }
}

/// A Raft server.
pub struct Node {
    pub(crate) id: NodeId,
    pub(crate) peers: Vec<NodeId>,
    /// Votes that elect this server, its own included.
    pub(crate) election_quorum: usize,
    /// Servers, the leader included, that must store an entry before it commits.
    pub(crate) replication_quorum: usize,
    pub(crate) term: u64,
    pub(crate) voted_for: Option<NodeId>,
    pub(crate) log: Log,
    pub(crate) snapshot: Snapshot,
    pub(crate) role: Role,
    pub(crate) leader: Option<NodeId>,
    pub(crate) commit: u64,
    pub(crate) applied: u64,
    pub(crate) machine: Machine,
    pub(crate) election_deadline: Duration,
    pub(crate) heartbeat_due: Duration,
    pub(crate) leader_since: Duration,
    pub(crate) votes: BTreeSet<NodeId>,
    pub(crate) next: BTreeMap<NodeId, u64>,
    pub(crate) matched: BTreeMap<NodeId, u64>,
    pub(crate) heard: BTreeMap<NodeId, Duration>,
    /// Client requests this leader appended, by log index, to answer once applied.
    pub(crate) pending: BTreeMap<u64, ClientRequest>,
    pub(crate) out: Vec<Out>,
    pub(crate) dirty: Dirty,
    /// Log indices stored on disk (inclusive range), to remove what falls out of the log.
    pub(crate) stored: Option<(u64, u64)>,
    rng: ChaCha8Rng,
}

impl Node {
    /// A server with the durable state it recovered.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: NodeId,
        nodes: &[NodeId],
        quorums: Quorums,
        seed: u64,
        now: Duration,
        term: u64,
        voted_for: Option<NodeId>,
        snapshot: Snapshot,
        log: Log,
        stored: Option<(u64, u64)>,
    ) -> Self {
        let mut node = Node {
            id,
            peers: nodes.iter().copied().filter(|&n| n != id).collect(),
            election_quorum: quorums.election as usize,
            replication_quorum: quorums.replication as usize,
            term,
            voted_for,
            machine: Machine::from_snapshot(&snapshot),
            commit: snapshot.index,
            applied: snapshot.index,
            snapshot,
            log,
            role: Role::Follower,
            leader: None,
            election_deadline: now,
            heartbeat_due: now,
            leader_since: now,
            votes: BTreeSet::new(),
            next: BTreeMap::new(),
            matched: BTreeMap::new(),
            heard: BTreeMap::new(),
            pending: BTreeMap::new(),
            out: Vec::new(),
            dirty: Dirty::default(),
            stored,
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        node.reset_election_timer(now);
        node
    }

    /// When the server next has something to do if no message comes.
    pub fn next_wakeup(&self) -> Duration {
        match self.role {
            Role::Leader => self.heartbeat_due,
            _ => self.election_deadline,
        }
    }

    pub(crate) fn reset_election_timer(&mut self, now: Duration) {
        let spread = (ELECTION_MAX - ELECTION_MIN).as_millis() as u64;
        self.election_deadline =
            now + ELECTION_MIN + Duration::from_millis(self.rng.random_range(0..spread));
    }

    pub(crate) fn send(&mut self, to: NodeId, msg: Msg) {
        self.out.push(Out::Peer(to, msg));
    }

    fn answer(&mut self, request: ClientRequest, reply: ClientReply) {
        self.out.push(Out::Client(request, reply));
    }

    /// Timers: a leader's heartbeat and its check that enough servers to commit still answer
    /// (with fewer it could serve nothing, and a leader elsewhere may have replaced it); a
    /// follower's or candidate's election timeout.
    pub fn on_timer(&mut self, now: Duration) {
        if self.role != Role::Leader {
            if now >= self.election_deadline {
                self.start_election(now);
            }
            return;
        }
        if now >= self.leader_since + ELECTION_MIN {
            let recent = self
                .peers
                .iter()
                .filter(|p| self.heard.get(p).is_some_and(|&t| t + ELECTION_MIN >= now))
                .count();
            if recent + 1 < self.replication_quorum {
                self.step_down(now);
                return;
            }
        }
        if now >= self.heartbeat_due {
            self.heartbeat_due = now + HEARTBEAT;
            for peer in self.peers.clone() {
                self.send_append(peer);
            }
        }
    }

    /// Leaves leadership (or candidacy) without a new term; clients waiting on this leader are
    /// told to look elsewhere.
    pub(crate) fn step_down(&mut self, now: Duration) {
        if self.role == Role::Leader {
            self.leader = None;
        }
        self.role = Role::Follower;
        self.votes.clear();
        for (_, request) in std::mem::take(&mut self.pending) {
            self.answer(request, ClientReply::NotLeader { leader: None });
        }
        self.reset_election_timer(now);
    }

    /// Adopts a higher term seen in a message, as a follower with no vote cast in it.
    pub(crate) fn adopt_term(&mut self, term: u64, now: Duration) {
        self.term = term;
        self.voted_for = None;
        self.leader = None;
        self.dirty.meta = true;
        self.step_down(now);
    }

    fn start_election(&mut self, now: Duration) {
        self.term += 1;
        self.voted_for = Some(self.id);
        self.dirty.meta = true;
        self.role = Role::Candidate;
        self.leader = None;
        self.votes = BTreeSet::from([self.id]);
        self.reset_election_timer(now);
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        for peer in self.peers.clone() {
            let term = self.term;
            self.send(
                peer,
                Msg::Vote {
                    term,
                    last_index,
                    last_term,
                },
            );
        }
        if self.votes.len() >= self.election_quorum {
            self.become_leader(now);
        }
    }

    fn become_leader(&mut self, now: Duration) {
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.leader_since = now;
        let next = self.log.last_index() + 1;
        for &peer in &self.peers {
            self.next.insert(peer, next);
            self.matched.insert(peer, 0);
            self.heard.insert(peer, now);
        }
        let index = self.log.push(Entry {
            term: self.term,
            command: Command::Noop,
        });
        self.dirty.log(index);
        self.heartbeat_due = now + HEARTBEAT;
        for peer in self.peers.clone() {
            self.send_append(peer);
        }
        self.advance_commit();
    }

    /// A message from another server.
    pub fn on_peer(&mut self, from: NodeId, msg: Msg, now: Duration) {
        if msg.term() > self.term {
            self.adopt_term(msg.term(), now);
        }
        match msg {
            Msg::Vote {
                term,
                last_index,
                last_term,
            } => self.on_vote(from, term, last_index, last_term, now),
            Msg::VoteReply { term, granted } => {
                if self.role == Role::Candidate && term == self.term && granted {
                    self.votes.insert(from);
                    if self.votes.len() >= self.election_quorum {
                        self.become_leader(now);
                    }
                }
            }
            Msg::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
            } => self.on_append(from, term, prev_index, prev_term, entries, commit, now),
            Msg::AppendReply {
                term,
                success,
                index,
            } => self.on_append_reply(from, term, success, index, now),
            Msg::InstallSnapshot { term, snapshot } => {
                self.on_install_snapshot(from, term, snapshot, now)
            }
            Msg::SnapshotReply { term, index } => self.on_snapshot_reply(from, term, index, now),
        }
    }

    fn on_vote(&mut self, from: NodeId, term: u64, last_index: u64, last_term: u64, now: Duration) {
        let (my_index, my_term) = (self.log.last_index(), self.log.last_term());
        let up_to_date = last_term > my_term || (last_term == my_term && last_index >= my_index);
        let granted = term == self.term && self.voted_for.is_none_or(|v| v == from) && up_to_date;
        if granted {
            self.voted_for = Some(from);
            self.dirty.meta = true;
            self.reset_election_timer(now);
        }
        let term = self.term;
        self.send(from, Msg::VoteReply { term, granted });
    }

    /// A client's request: a leader appends it (once) and answers when it is applied; any
    /// other server names the leader it knows.
    pub fn on_client(&mut self, request: ClientRequest) {
        if self.role != Role::Leader {
            let leader = self.leader;
            self.answer(request, ClientReply::NotLeader { leader });
            return;
        }
        let write = !matches!(request.op, KvOp::Get { .. });
        if write && self.machine.applied(request.client, request.seq) {
            self.answer(request, ClientReply::Done);
            return;
        }
        if self
            .pending
            .values()
            .any(|p| p.client == request.client && p.seq == request.seq)
        {
            return;
        }
        let index = self.log.push(Entry {
            term: self.term,
            command: Command::Client(request.clone()),
        });
        self.dirty.log(index);
        self.pending.insert(index, request);
        for peer in self.peers.clone() {
            if self.next.get(&peer) == Some(&index) {
                self.send_append(peer);
            }
        }
        self.advance_commit();
    }

    /// Applies committed entries, answers the clients waiting on them, and folds a long
    /// applied prefix into a snapshot.
    pub(crate) fn apply_committed(&mut self) {
        while self.applied < self.commit {
            self.applied += 1;
            let Some(entry) = self.log.entry(self.applied).cloned() else {
                continue;
            };
            let reply = self.machine.apply(&entry.command);
            if let Some(request) = self.pending.remove(&self.applied) {
                let answer = match (&entry.command, reply) {
                    (Command::Client(c), Some(reply))
                        if c.client == request.client && c.seq == request.seq =>
                    {
                        reply
                    }
                    _ => ClientReply::NotLeader {
                        leader: self.leader,
                    },
                };
                self.answer(request, answer);
            }
        }
        if self.applied >= self.log.base() + SNAPSHOT_EVERY {
            let term = self.log.term_at(self.applied).unwrap_or(0);
            self.snapshot = self.machine.snapshot(self.applied, term);
            self.log.compact_to(self.applied);
            self.dirty.snapshot = true;
        }
    }
}
