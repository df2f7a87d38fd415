//! The key-value state machine the log drives, with the table that keeps a retried request
//! from being applied twice.

use std::collections::BTreeMap;

use faultline_sim::{ClientReply, KvOp};

use crate::msg::{Command, Session, Snapshot};

/// The state after applying a prefix of the log.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    kv: BTreeMap<String, String>,
    sessions: BTreeMap<u64, Session>,
}

impl Machine {
    /// The machine a snapshot describes.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        Machine {
            kv: snapshot.kv.clone(),
            sessions: snapshot.sessions.clone(),
        }
    }

    /// A snapshot of the machine after applying `index` (of term `term`).
    pub fn snapshot(&self, index: u64, term: u64) -> Snapshot {
        Snapshot {
            index,
            term,
            kv: self.kv.clone(),
            sessions: self.sessions.clone(),
        }
    }

    /// Whether a write `seq` of `client` was applied already.
    pub fn applied(&self, client: u64, seq: u64) -> bool {
        self.sessions.get(&client).is_some_and(|s| s.seq >= seq)
    }

    /// Applies a command; the answer its client gets. A write seen before is not applied again;
    /// a read always reads the current value.
    pub fn apply(&mut self, command: &Command) -> Option<ClientReply> {
        let Command::Client(request) = command else {
            return None;
        };
        if let KvOp::Get { key } = &request.op {
            let value = self.kv.get(key).cloned().unwrap_or_default();
            return Some(ClientReply::Value { value });
        }
        if self.applied(request.client, request.seq) {
            return Some(ClientReply::Done);
        }
        match &request.op {
            KvOp::Put { key, value } => {
                self.kv.insert(key.clone(), value.clone());
            }
            KvOp::Append { key, value } => self.kv.entry(key.clone()).or_default().push_str(value),
            KvOp::Get { .. } => {}
        }
        self.sessions
            .insert(request.client, Session { seq: request.seq });
        Some(ClientReply::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_sim::ClientRequest;

    fn append(client: u64, seq: u64, value: &str) -> Command {
        Command::Client(ClientRequest {
            client,
            seq,
            op: KvOp::Append {
                key: "k".into(),
                value: value.into(),
            },
        })
    }

    #[test]
    fn a_retried_write_is_applied_once_and_survives_a_snapshot() {
        let mut m = Machine::default();
        m.apply(&append(1, 1, "a"));
        m.apply(&append(1, 1, "a"));
        m.apply(&append(2, 1, "b"));
        let mut copy = Machine::from_snapshot(&m.snapshot(3, 1));
        copy.apply(&append(2, 1, "b"));
        let read = Command::Client(ClientRequest {
            client: 3,
            seq: 1,
            op: KvOp::Get { key: "k".into() },
        });
        assert_eq!(
            copy.apply(&read),
            Some(ClientReply::Value { value: "ab".into() })
        );
        assert_eq!(copy.apply(&Command::Noop), None);
    }
}
