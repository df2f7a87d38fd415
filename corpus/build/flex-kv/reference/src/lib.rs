//! A replicated key-value store on Raft with flexible quorums: a leader is elected by the
//! cluster's election quorum and an entry commits once its replication quorum stores it, which
//! may be fewer than a majority. Otherwise Raft: leader election, log replication with fast backup,
//! commitment only of the current term's entries, reads and writes through the log, a table
//! of applied client requests against duplicates, durable state, and snapshots that keep the
//! stored log short.

mod log;
mod machine;
mod msg;
mod node;
mod persist;
mod replicate;

use faultline_sim::{Clock, Env, Message, Network, Server, Storage, recv_until};

use crate::msg::Msg;
use crate::node::Node;

/// The server the harness runs.
pub struct KvServer;

impl Server for KvServer {
    async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
        let mut node = Node::recover(
            env.id,
            &env.nodes,
            env.quorums,
            &env.storage,
            env.seed,
            env.clock.now(),
        );
        loop {
            let message = recv_until(&env.net, &env.clock, node.next_wakeup()).await;
            let now = env.clock.now();
            match message {
                Some(Message::Peer { from, payload }) => {
                    if let Ok(msg) = serde_json::from_slice::<Msg>(&payload) {
                        node.on_peer(from, msg, now);
                    }
                }
                Some(Message::Client(request)) => node.on_client(request),
                None => {}
            }
            node.on_timer(now);
            node.flush(&env.storage, &env.net);
        }
    }
}
