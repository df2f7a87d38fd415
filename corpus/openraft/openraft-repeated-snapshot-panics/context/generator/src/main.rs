//! Regenerates `../node-trace.md`: a one-node openraft cluster (openraft-memstore) is asked for a
//! snapshot twice with no write in between; the node's metrics are printed after every step, with
//! the panic reported by the Raft core's task and the core's own info-level log around it.
//! Run: `cargo run --quiet > ../node-trace.md`
//! The log section keeps only the lines from the first snapshot request on (earlier lines cover
//! start-up and election), drops the state-machine worker's own scheduling lines (`worker_loop`,
//! `build_snapshot` spans) and strips timestamps; the panic location is shortened to the path
//! inside the crate (the cargo registry prefix is dropped); nothing else is edited.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft, RaftMetrics, ServerState};
use openraft_memstore::{ClientRequest, MemNodeId, MemStore, TypeConfig};

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

/// Collects formatted log lines in memory.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);
impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn row(step: &str, m: &RaftMetrics<MemNodeId, ()>) -> String {
    let show = |l: Option<openraft::LogId<MemNodeId>>| l.map(|l| l.to_string()).unwrap_or("-".into());
    format!(
        "| {step} | {:?} | {} | {} | {} | {} |",
        m.state,
        m.current_term,
        m.last_log_index.map(|i| i.to_string()).unwrap_or("-".into()),
        show(m.last_applied),
        show(m.snapshot),
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let sink = Sink::default();
    let writer = sink.clone();
    tracing_subscriber::fmt()
        .with_env_filter("openraft=info")
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(move || writer.clone())
        .init();
    let panics = Arc::new(Mutex::new(Vec::<String>::new()));
    let p = panics.clone();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        let text = format!("thread '{thread}' {info}");
        let text = match (text.find(" at "), text.find("openraft-0.9.23/")) {
            (Some(a), Some(b)) if a < b => format!("{}{}", &text[..a + 4], &text[b..]),
            _ => text,
        };
        p.lock().unwrap().push(text);
    }));

    let config = Config {
        cluster_name: "demo".to_string(),
        enable_heartbeat: false,
        enable_tick: false,
        ..Default::default()
    };
    let config = Arc::new(config.validate().unwrap());
    let (log_store, sm) = Adaptor::new(Arc::new(MemStore::new()));
    let raft = Raft::new(1, config, NoPeers, log_store, sm).await.unwrap();
    let wait = || raft.wait(Some(Duration::from_secs(5)));
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();

    raft.initialize(BTreeSet::from([1u64])).await.unwrap();
    wait().state(ServerState::Leader, "leader").await.unwrap();
    rows.push(row("initialize({1})", &raft.metrics().borrow()));

    let req = |serial: u64| ClientRequest { client: "c1".into(), serial, status: format!("s{serial}") };
    let w = raft.client_write(req(1)).await.unwrap();
    wait().applied_index(Some(w.log_id.index), "applied").await.unwrap();
    rows.push(row("client_write #1", &raft.metrics().borrow()));

    let log_start = sink.0.lock().unwrap().len();
    outcomes.push(format!("trigger().snapshot() #1 -> {:?}", raft.trigger().snapshot().await));
    wait().snapshot(w.log_id, "snapshot").await.unwrap();
    rows.push(row("trigger().snapshot() #1", &raft.metrics().borrow()));

    outcomes.push(format!("trigger().snapshot() #2 -> {:?}", raft.trigger().snapshot().await));
    tokio::time::sleep(Duration::from_millis(300)).await;
    rows.push(row("trigger().snapshot() #2", &raft.metrics().borrow()));

    let r = tokio::time::timeout(Duration::from_secs(2), raft.client_write(req(2))).await;
    outcomes.push(format!(
        "client_write #2 -> {}",
        match r {
            Ok(Ok(resp)) => format!("Ok(log_id {})", resp.log_id),
            Ok(Err(e)) => format!("Err({e:?})"),
            Err(_) => "timed out after 2 s".to_string(),
        }
    ));
    rows.push(row("client_write #2", &raft.metrics().borrow()));

    println!("# Node trace\n");
    println!("Single voter, node 1, openraft-memstore via `Adaptor`, heartbeats and ticks off, default snapshot policy.\n");
    println!("## Metrics after each step\n");
    println!("| step | state | term | last_log_index | last_applied | snapshot |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!("\n## Call results\n");
    println!("```text");
    for o in &outcomes {
        println!("{o}");
    }
    println!("```\n");
    println!("## Panics captured\n");
    println!("```text");
    for p in panics.lock().unwrap().iter() {
        println!("{p}");
    }
    println!("```\n");
    println!("## Log (openraft=info, from the first snapshot request on)\n");
    println!("```text");
    let log = sink.0.lock().unwrap();
    for line in String::from_utf8_lossy(&log[log_start..]).lines() {
        if line.contains("worker_loop") || line.contains("build_snapshot:") {
            continue;
        }
        println!("{line}");
    }
    println!("```");
}
