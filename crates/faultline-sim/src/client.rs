//! The clients: each runs its share of the workload one operation at a time against the
//! cluster, retrying on other servers, and records what it called and got back.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::api::{ClientReply, ClientRequest, KvOp, NodeId};
use faultline_linearize::models::KvOutput;

use crate::history::Recorder;
use crate::plan::FaultPlan;
use crate::seed::{Stream, derive};
use crate::transport::{
    self, CLIENT_PORT_BASE, NetStats, SERVER_PORT, Sender, decode_reply, encode_request, host_name,
};

/// How long a client waits after a server said it is not the leader and named none.
const NO_LEADER_BACKOFF: Duration = Duration::from_millis(10);

/// What every client shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) plan: Rc<FaultPlan>,
    pub(crate) seed: u64,
    pub(crate) stats: Rc<RefCell<NetStats>>,
    pub(crate) recorder: Rc<RefCell<Recorder>>,
    /// The server whose answer (a value or a done) a client got last, for the plan's island.
    pub(crate) served: Rc<Cell<Option<NodeId>>>,
}

/// Runs every client to the end of its operations; the run's client host.
pub(crate) async fn run_all(shared: Shared) -> turmoil::Result {
    let clients = shared.plan.workload.clients;
    let operations = shared.plan.workload.operations;
    let handles: Vec<_> = (0..clients)
        .map(|id| {
            let share = operations / clients + u32::from(id < operations % clients);
            tokio::task::spawn_local(run_one(u64::from(id), share, shared.clone()))
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    Ok(())
}

fn now_us() -> u64 {
    u64::try_from(turmoil::elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The `seq`-th operation of `client`: a get, put or append of a random key. Written values are
/// unique in the run, so a read names the writes it saw.
fn operation(rng: &mut ChaCha8Rng, keys: u32, client: u64, seq: u64) -> KvOp {
    let key = format!("k{}", rng.random_range(0..keys));
    match rng.random_range(0..100) {
        0..40 => KvOp::Get { key },
        40..60 => KvOp::Put {
            key,
            value: format!("p{client}.{seq}"),
        },
        _ => KvOp::Append {
            key,
            value: format!("a{client}.{seq} "),
        },
    }
}

/// The output a reply gives `op`, or why no correct server sends it.
fn output_of(op: &KvOp, reply: ClientReply) -> Result<KvOutput, String> {
    match (op, reply) {
        (KvOp::Get { .. }, ClientReply::Value { value }) => Ok(KvOutput::Get { value }),
        (KvOp::Put { .. }, ClientReply::Done) => Ok(KvOutput::Put),
        (KvOp::Append { .. }, ClientReply::Done) => Ok(KvOutput::Append),
        (op, reply) => Err(format!("{op:?} answered with {reply:?}")),
    }
}

async fn run_one(client: u64, operations: u32, shared: Shared) -> turmoil::Result {
    let plan = &shared.plan;
    let port = CLIENT_PORT_BASE + u16::try_from(client)?;
    let socket = Rc::new(transport::bind(port).await?);
    let sender = Sender::new(
        socket.clone(),
        None,
        plan.network.clone(),
        derive(shared.seed, Stream::ClientNet, &[client]),
        shared.stats.clone(),
    );
    let servers: Vec<SocketAddr> = (0..plan.nodes)
        .map(|n| SocketAddr::new(turmoil::lookup(host_name(n)), SERVER_PORT))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(derive(shared.seed, Stream::Client, &[client]));
    let timeout = Duration::from_millis(plan.workload.request_timeout_ms);
    let mut target: NodeId = rng.random_range(0..plan.nodes);
    let mut buffer = vec![0u8; 64 * 1024];
    for seq in 1..=u64::from(operations) {
        let op = operation(&mut rng, plan.workload.keys, client, seq);
        let index = shared
            .recorder
            .borrow_mut()
            .call(client, now_us(), op.clone());
        let request = encode_request(&ClientRequest {
            client,
            seq,
            op: op.clone(),
        });
        'attempt: loop {
            sender.dispatch(servers[target as usize], Some(target), request.clone());
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let received =
                    tokio::time::timeout_at(deadline, socket.recv_from(&mut buffer)).await;
                let Ok(received) = received else {
                    target = (target + 1) % plan.nodes;
                    continue 'attempt;
                };
                let (len, source) = received?;
                let Some(frame) = decode_reply(&buffer[..len]) else {
                    continue;
                };
                if frame.client != client || frame.seq != seq {
                    continue;
                }
                match frame.reply {
                    ClientReply::NotLeader { leader: Some(l) } if l < plan.nodes && l != target => {
                        target = l;
                    }
                    ClientReply::NotLeader { .. } => {
                        target = (target + 1) % plan.nodes;
                        tokio::time::sleep(NO_LEADER_BACKOFF).await;
                    }
                    reply => match output_of(&op, reply) {
                        Ok(output) => {
                            // A copy the relay held back names no server.
                            if let Some(node) = servers.iter().position(|a| *a == source) {
                                shared.served.set(NodeId::try_from(node).ok());
                            }
                            shared
                                .recorder
                                .borrow_mut()
                                .returned(index, now_us(), output);
                            break 'attempt;
                        }
                        Err(what) => {
                            shared
                                .recorder
                                .borrow_mut()
                                .protocol_error(format!("client {client} request {seq}: {what}"));
                            continue;
                        }
                    },
                }
                continue 'attempt;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_of_the_wrong_kind_are_protocol_errors() {
        let get = KvOp::Get { key: "k".into() };
        let put = KvOp::Put {
            key: "k".into(),
            value: "v".into(),
        };
        assert!(output_of(&get, ClientReply::Done).is_err());
        assert!(output_of(&put, ClientReply::Value { value: "x".into() }).is_err());
        assert_eq!(
            output_of(&get, ClientReply::Value { value: "x".into() }),
            Ok(KvOutput::Get { value: "x".into() })
        );
        assert_eq!(output_of(&put, ClientReply::Done), Ok(KvOutput::Put));
    }

    #[test]
    fn a_clients_operations_depend_only_on_its_seed() {
        let ops = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (1..=50)
                .map(|s| operation(&mut rng, 4, 2, s))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(5), ops(5));
        assert_ne!(ops(5), ops(6));
        let all = ops(5);
        assert!(all.iter().any(|o| matches!(o, KvOp::Get { .. })));
        assert!(all.iter().any(|o| matches!(o, KvOp::Append { .. })));
    }
}
