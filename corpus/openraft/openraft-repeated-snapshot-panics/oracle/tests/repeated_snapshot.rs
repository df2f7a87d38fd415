//! Hidden oracle: asking a single-node cluster for a snapshot twice, with nothing written in
//! between, must leave the node serving requests.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

/// No peer is ever reachable; a one-voter cluster never needs one.
struct NoPeers;

#[derive(Debug)]
struct Down;
impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer is down")
    }
}
impl std::error::Error for Down {}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<MemNodeId>,
        RPCError<MemNodeId, (), RaftError<MemNodeId, openraft::error::InstallSnapshotError>>,
    > {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        Err(RPCError::Unreachable(Unreachable::new(&Down)))
    }
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: MemNodeId, _node: &()) -> NoPeers {
        NoPeers
    }
}

fn request(serial: u64) -> ClientRequest {
    ClientRequest { client: "c1".to_string(), serial, status: format!("s{serial}") }
}

#[tokio::test(flavor = "current_thread")]
async fn second_snapshot_request_at_same_applied_index_keeps_node_alive() {
    let config = Config {
        cluster_name: "oracle".to_string(),
        enable_heartbeat: false,
        enable_tick: false,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let store = Arc::new(MemStore::new());
    let (log_store, sm) = Adaptor::new(store.clone());
    let raft = Raft::new(1, config, NoPeers, log_store, sm).await.unwrap();
    let wait = || raft.wait(Some(Duration::from_secs(5)));

    raft.initialize(BTreeSet::from([1u64])).await.unwrap();
    wait().state(ServerState::Leader, "node 1 leads").await.unwrap();

    let written = raft.client_write(request(1)).await.unwrap();
    wait().applied_index(Some(written.log_id.index), "first write applied").await.unwrap();

    raft.trigger().snapshot().await.unwrap();
    wait().snapshot(written.log_id, "first snapshot built").await.unwrap();
    let first = raft.get_snapshot().await.unwrap().expect("a snapshot exists");

    // Same request again: nothing was applied in between.
    raft.trigger().snapshot().await.unwrap();

    // Wait until the state machine has finished the second build.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match raft.get_snapshot().await {
            Ok(Some(s)) if s.meta.snapshot_id != first.meta.snapshot_id => break,
            Ok(_) => {}
            Err(e) => panic!("node stopped serving after the repeated snapshot request: {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "second snapshot was never built");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the Raft core handle the builder's answer before checking it still serves writes.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let next = tokio::time::timeout(Duration::from_secs(5), raft.client_write(request(2)))
        .await
        .expect("write after the repeated snapshot request timed out")
        .unwrap_or_else(|e| panic!("write after the repeated snapshot request failed: {e}"));
    wait().applied_index(Some(next.log_id.index), "second write applied").await.unwrap();
    let m = raft.metrics().borrow().clone();
    assert_eq!(m.state, ServerState::Leader);
    assert_eq!(m.snapshot, Some(written.log_id));
}
