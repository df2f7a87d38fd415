//! Drives one async-raft node (id 2) by hand: it follows leader 0 as a voter of {0, 1, 2}, is
//! removed, and later receives a RequestVote from node 1, which missed the removal. Prints the
//! node's metrics stream and the RPCs it tries to send (Markdown, on stdout).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_raft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, EntryConfigChange, EntryPayload,
    InstallSnapshotRequest, InstallSnapshotResponse, MembershipConfig, VoteRequest, VoteResponse,
};
use async_raft::{Config, NodeId, Raft, RaftNetwork};
use memstore::{ClientRequest, ClientResponse, MemStore};
use tokio::time::Instant;

type Node = Raft<ClientRequest, ClientResponse, Net, MemStore>;

struct Net {
    start: Instant,
    sent: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl RaftNetwork<ClientRequest> for Net {
    async fn append_entries(&self, target: NodeId, rpc: AppendEntriesRequest<ClientRequest>) -> Result<AppendEntriesResponse> {
        self.sent.lock().unwrap().push(format!("{} ms: AppendEntries to node {} (term {}) -> unreachable", self.start.elapsed().as_millis(), target, rpc.term));
        Err(anyhow!("unreachable"))
    }
    async fn install_snapshot(&self, target: NodeId, _rpc: InstallSnapshotRequest) -> Result<InstallSnapshotResponse> {
        Err(anyhow!("node {} unreachable", target))
    }
    async fn vote(&self, target: NodeId, rpc: VoteRequest) -> Result<VoteResponse> {
        self.sent.lock().unwrap().push(format!(
            "{} ms: RequestVote to node {} (term {}, candidate {}, last_log_index {}) -> unreachable",
            self.start.elapsed().as_millis(), target, rpc.term, rpc.candidate_id, rpc.last_log_index
        ));
        Err(anyhow!("unreachable"))
    }
}

fn cfg(term: u64, index: u64, members: &[NodeId], after: Option<&[NodeId]>) -> Entry<ClientRequest> {
    Entry {
        term,
        index,
        payload: EntryPayload::ConfigChange(EntryConfigChange {
            membership: MembershipConfig {
                members: members.iter().cloned().collect::<HashSet<_>>(),
                members_after_consensus: after.map(|a| a.iter().cloned().collect()),
            },
        }),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let start = Instant::now();
    let config = Arc::new(Config::build("demo".into()).heartbeat_interval(50).election_timeout_min(200).election_timeout_max(300).validate().unwrap());
    let net = Arc::new(Net { start, sent: Mutex::new(Vec::new()) });
    let node = Node::new(2, config, net.clone(), Arc::new(MemStore::new(2)));
    let rows = Arc::new(Mutex::new(Vec::new()));
    {
        let mut rx = node.metrics();
        let rows = rows.clone();
        tokio::spawn(async move {
            loop {
                let m = rx.borrow().clone();
                let mut members: Vec<_> = m.membership_config.members.iter().cloned().collect();
                members.sort();
                let after = m.membership_config.members_after_consensus.as_ref().map(|a| {
                    let mut v: Vec<_> = a.iter().cloned().collect();
                    v.sort();
                    v
                });
                rows.lock().unwrap().push(format!(
                    "| {} | {:?} | {} | {} | {:?} | {:?} -> {:?} |",
                    start.elapsed().as_millis(), m.state, m.current_term, m.last_log_index, m.current_leader, members, after
                ));
                if rx.changed().await.is_err() {
                    break;
                }
            }
        });
    }
    let mut events = Vec::new();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = node
        .append_entries(AppendEntriesRequest { term: 1, leader_id: 0, prev_log_index: 0, prev_log_term: 0, entries: vec![cfg(1, 1, &[0, 1, 2], None)], leader_commit: 1 })
        .await
        .unwrap();
    events.push(format!("{} ms: AppendEntries from leader 0 (term 1): config {{0,1,2}} at index 1 -> success={}", start.elapsed().as_millis(), r.success));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = node
        .append_entries(AppendEntriesRequest {
            term: 1,
            leader_id: 0,
            prev_log_index: 1,
            prev_log_term: 1,
            entries: vec![cfg(1, 2, &[0, 1, 2], Some(&[0, 1])), cfg(1, 3, &[0, 1], None)],
            leader_commit: 2,
        })
        .await
        .unwrap();
    events.push(format!("{} ms: AppendEntries from leader 0 (term 1): joint config at index 2, config {{0,1}} at index 3 -> success={}", start.elapsed().as_millis(), r.success));
    tokio::time::sleep(Duration::from_millis(600)).await;
    events.push(format!("{} ms: (leader 0 silent since the last AppendEntries)", start.elapsed().as_millis()));
    let r = node.vote(VoteRequest::new(2, 1, 1, 1)).await.unwrap();
    events.push(format!(
        "{} ms: RequestVote from node 1 (term 2, last_log_index 1, last_log_term 1) -> granted={}, term={}",
        start.elapsed().as_millis(), r.vote_granted, r.term
    ));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    events.push(format!("{} ms: end of run", start.elapsed().as_millis()));

    println!("# Node 2 after being removed from the cluster\n");
    println!("Single async-raft 0.6.0 node (id 2, memstore), election timeout 200-300 ms. The RPCs it");
    println!("receives are delivered by hand; everything it sends goes to an unreachable network.\n");
    println!("## RPCs delivered to node 2\n");
    for e in events {
        println!("- {}", e);
    }
    println!("\n## Node 2 metrics stream\n");
    println!("| t (ms) | state | term | last_log_index | current_leader | members -> after consensus |");
    println!("|---|---|---|---|---|---|");
    for r in rows.lock().unwrap().iter() {
        println!("{}", r);
    }
    println!("\n## RPCs node 2 tried to send\n");
    let sent = net.sent.lock().unwrap().clone();
    if sent.is_empty() {
        println!("(none)");
    }
    for s in sent {
        println!("- {}", s);
    }
}
