//! Log replication: the leader's appends and snapshots, a follower's checks, and commitment.

use std::time::Duration;

use faultline_sim::NodeId;

use crate::machine::Machine;
use crate::msg::{Entry, Msg, Snapshot};
use crate::node::{Node, Role};

/// Most entries in one append.
const BATCH: usize = 16;

impl Node {
    /// Sends `peer` what it lacks from its next index on: entries, or the snapshot when the log
    /// no longer holds them.
    pub(crate) fn send_append(&mut self, peer: NodeId) {
        let next = self.next.get(&peer).copied().unwrap_or(1).max(1);
        let term = self.term;
        if next <= self.log.base() {
            let snapshot = self.snapshot.clone();
            self.send(peer, Msg::InstallSnapshot { term, snapshot });
            return;
        }
        let prev_index = next - 1;
        let prev_term = self.log.term_at(prev_index).unwrap_or(0);
        let entries = self.log.entries_from(next, BATCH);
        let commit = self.commit;
        self.send(
            peer,
            Msg::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
            },
        );
    }

    /// Accepts a leader of the current term: a candidate gives up, the election timer restarts.
    fn follow(&mut self, leader: NodeId, now: Duration) {
        if self.role != Role::Follower {
            self.step_down(now);
        }
        self.leader = Some(leader);
        self.reset_election_timer(now);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_append(
        &mut self,
        from: NodeId,
        term: u64,
        mut prev_index: u64,
        mut prev_term: u64,
        mut entries: Vec<Entry>,
        commit: u64,
        now: Duration,
    ) {
        let my_term = self.term;
        if term < my_term {
            let reply = Msg::AppendReply {
                term: my_term,
                success: false,
                index: 0,
            };
            self.send(from, reply);
            return;
        }
        self.follow(from, now);
        let base = self.log.base();
        if prev_index < base {
            // Entries through the base are committed and in the snapshot: they match.
            let skip = usize::try_from(base - prev_index).unwrap_or(usize::MAX);
            if skip >= entries.len() {
                let index = prev_index + entries.len() as u64;
                self.send(
                    from,
                    Msg::AppendReply {
                        term,
                        success: true,
                        index,
                    },
                );
                return;
            }
            entries.drain(..skip);
            prev_index = base;
            prev_term = self.log.base_term();
        }
        if self.log.term_at(prev_index) != Some(prev_term) {
            let index = if prev_index > self.log.last_index() {
                self.log.last_index() + 1
            } else {
                self.log.first_of_term_at(prev_index)
            };
            self.send(
                from,
                Msg::AppendReply {
                    term,
                    success: false,
                    index,
                },
            );
            return;
        }
        let last_new = prev_index + entries.len() as u64;
        let mut index = prev_index;
        for entry in entries {
            index += 1;
            match self.log.term_at(index) {
                Some(t) if t == entry.term => continue,
                Some(_) => {
                    self.log.truncate_from(index);
                    self.log.push(entry);
                }
                None => {
                    self.log.push(entry);
                }
            }
            self.dirty.log(index);
        }
        let commit = commit.min(last_new);
        if commit > self.commit {
            self.commit = commit;
            self.apply_committed();
        }
        self.send(
            from,
            Msg::AppendReply {
                term,
                success: true,
                index: last_new,
            },
        );
    }

    pub(crate) fn on_append_reply(
        &mut self,
        from: NodeId,
        term: u64,
        success: bool,
        index: u64,
        now: Duration,
    ) {
        if self.role != Role::Leader || term != self.term {
            return;
        }
        self.heard.insert(from, now);
        // Only a reply that tells something new sends more: answering every duplicate or stale
        // reply would multiply messages on a network that duplicates them.
        let matched = self.matched.get(&from).copied().unwrap_or(0);
        let old_next = self.next.get(&from).copied().unwrap_or(1);
        if success {
            if index <= matched {
                return;
            }
            self.matched.insert(from, index);
            let next = old_next.max(index + 1);
            self.next.insert(from, next);
            self.advance_commit();
            if next <= self.log.last_index() {
                self.send_append(from);
            }
        } else {
            let next = index.min(self.log.last_index() + 1).max(matched + 1);
            if next >= old_next {
                return;
            }
            self.next.insert(from, next);
            self.send_append(from);
        }
    }

    pub(crate) fn on_install_snapshot(
        &mut self,
        from: NodeId,
        term: u64,
        snapshot: Snapshot,
        now: Duration,
    ) {
        let my_term = self.term;
        if term < my_term {
            self.send(
                from,
                Msg::SnapshotReply {
                    term: my_term,
                    index: 0,
                },
            );
            return;
        }
        self.follow(from, now);
        let index = snapshot.index;
        if index > self.commit {
            if self.log.term_at(index) == Some(snapshot.term) {
                self.log.compact_to(index);
            } else {
                self.log.reset_to(index, snapshot.term);
            }
            self.machine = Machine::from_snapshot(&snapshot);
            self.snapshot = snapshot;
            self.commit = index;
            self.applied = index;
            self.dirty.snapshot = true;
            self.dirty.log(index + 1);
        }
        self.send(from, Msg::SnapshotReply { term, index });
    }

    pub(crate) fn on_snapshot_reply(&mut self, from: NodeId, term: u64, index: u64, now: Duration) {
        if self.role != Role::Leader || term != self.term {
            return;
        }
        self.heard.insert(from, now);
        let matched = self.matched.get(&from).copied().unwrap_or(0).max(index);
        self.matched.insert(from, matched);
        let next = self.next.get(&from).copied().unwrap_or(1).max(matched + 1);
        self.next.insert(from, next);
        self.advance_commit();
    }

    /// Commits the highest entry of the current term that a replication quorum stores, and
    /// everything before it. Safe with a quorum smaller than a majority because every election
    /// quorum includes one of those servers, and it votes only for a log holding the entry.
    pub(crate) fn advance_commit(&mut self) {
        let mut n = self.log.last_index();
        while n > self.commit {
            if self.log.term_at(n) == Some(self.term) {
                let stored = 1 + self.matched.values().filter(|&&m| m >= n).count();
                if stored >= self.replication_quorum {
                    self.commit = n;
                    self.apply_committed();
                    return;
                }
            } else if self.log.term_at(n).is_some_and(|t| t < self.term) {
                return;
            }
            n -= 1;
        }
    }
}
