//! A replicated key-value store: the crate the grader builds. Read `task.md` first.
//!
//! The grader runs `KvServer` on every server of a simulated cluster. As it stands the server
//! refuses every request, so no operation completes and every schedule fails.

use faultline_sim::{ClientReply, Clock, Env, Message, Network, Server, Storage};

/// The server the grader runs.
pub struct KvServer;

impl Server for KvServer {
    async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
        loop {
            match env.net.recv().await {
                Message::Client(request) => {
                    env.net
                        .reply(&request, ClientReply::NotLeader { leader: None });
                }
                Message::Peer { .. } => {}
            }
        }
    }
}
