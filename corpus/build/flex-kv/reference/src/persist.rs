//! What a server keeps in storage, and how it comes back after a crash.
//!
//! `meta` holds the term and vote, `snapshot` the state machine through the log's base, and
//! `log/<index>` one entry each, so that appending writes one small value.

use std::time::Duration;

use faultline_sim::{Network, NodeId, Quorums, Storage};
use serde::{Deserialize, Serialize};

use crate::log::Log;
use crate::msg::{Entry, Out, Snapshot};
use crate::node::Node;

const META: &str = "meta";
const SNAPSHOT: &str = "snapshot";
const LOG_PREFIX: &str = "log/";

#[derive(Serialize, Deserialize)]
struct Meta {
    term: u64,
    voted_for: Option<NodeId>,
}

fn log_name(index: u64) -> String {
    format!("{LOG_PREFIX}{index:012}")
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: Option<Vec<u8>>) -> Option<T> {
    bytes.and_then(|b| serde_json::from_slice(&b).ok())
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("state always encodes")
}

impl Node {
    /// The server as it was last stored (a fresh one on an empty storage).
    pub fn recover<S: Storage>(
        id: NodeId,
        nodes: &[NodeId],
        quorums: Quorums,
        storage: &S,
        seed: u64,
        now: Duration,
    ) -> Self {
        let meta: Meta = decode(storage.read(META)).unwrap_or(Meta {
            term: 0,
            voted_for: None,
        });
        let snapshot: Snapshot = decode(storage.read(SNAPSHOT)).unwrap_or_default();
        let mut entries: Vec<Entry> = Vec::new();
        let mut index = snapshot.index + 1;
        while let Some(entry) = decode(storage.read(&log_name(index))) {
            entries.push(entry);
            index += 1;
        }
        let stored_indices: Vec<u64> = storage
            .names()
            .iter()
            .filter_map(|n| n.strip_prefix(LOG_PREFIX)?.parse().ok())
            .collect();
        let stored = match (stored_indices.iter().min(), stored_indices.iter().max()) {
            (Some(&lo), Some(&hi)) => Some((lo, hi)),
            _ => None,
        };
        let log = Log::new(snapshot.index, snapshot.term, entries);
        Node::new(
            id,
            nodes,
            quorums,
            seed,
            now,
            meta.term,
            meta.voted_for,
            snapshot,
            log,
            stored,
        )
    }

    /// Stores what changed, then sends what the handlers queued.
    pub fn flush<S: Storage, N: Network>(&mut self, storage: &S, net: &N) {
        let dirty = std::mem::take(&mut self.dirty);
        if dirty.snapshot {
            storage.write(SNAPSHOT, &encode(&self.snapshot));
        }
        if dirty.meta {
            let meta = Meta {
                term: self.term,
                voted_for: self.voted_for,
            };
            storage.write(META, &encode(&meta));
        }
        let (first, last) = (self.log.base() + 1, self.log.last_index());
        if let Some((lo, hi)) = self.stored {
            for index in (lo..=hi).filter(|i| *i < first || *i > last) {
                storage.remove(&log_name(index));
            }
        }
        if let Some(from) = dirty.log_from {
            for index in from.max(first)..=last {
                if let Some(entry) = self.log.entry(index) {
                    storage.write(&log_name(index), &encode(entry));
                }
            }
        }
        self.stored = (first <= last).then_some((first, last));
        for out in std::mem::take(&mut self.out) {
            match out {
                Out::Peer(to, msg) => net.send(to, encode(&msg)),
                Out::Client(request, reply) => net.reply(&request, reply),
            }
        }
    }
}
