//! Unit tests of the store on a fault-free cluster: three servers in memory, every message
//! delivered in order and at once, no crash, no partition, one clock for all (tokio's, paused, so
//! timeouts cost no real time). They check the happy path only.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use SUBMISSION_CRATE::KvServer;
use faultline_sim::{
    ClientReply, ClientRequest, Clock, Env, KvOp, Message, Network, NodeId, Quorums, Server,
    Storage,
};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

const SERVERS: u32 = 3;

/// A server's view of the network: channels to every inbox, its own inbox, the clients' one.
struct Net {
    id: NodeId,
    inboxes: Rc<Vec<mpsc::UnboundedSender<Message>>>,
    inbox: Mutex<mpsc::UnboundedReceiver<Message>>,
    replies: mpsc::UnboundedSender<(ClientRequest, ClientReply)>,
}

impl Network for Net {
    fn send(&self, to: NodeId, payload: Vec<u8>) {
        let from = self.id;
        if let Some(inbox) = self.inboxes.get(to as usize) {
            let _ = inbox.send(Message::Peer { from, payload });
        }
    }

    fn reply(&self, request: &ClientRequest, reply: ClientReply) {
        let _ = self.replies.send((request.clone(), reply));
    }

    fn recv(&self) -> impl Future<Output = Message> {
        async move {
            match self.inbox.lock().await.recv().await {
                Some(message) => message,
                None => std::future::pending().await,
            }
        }
    }
}

/// Storage in memory.
#[derive(Clone, Default)]
struct Memory(Rc<RefCell<BTreeMap<String, Vec<u8>>>>);

impl Storage for Memory {
    fn read(&self, name: &str) -> Option<Vec<u8>> {
        self.0.borrow().get(name).cloned()
    }
    fn write(&self, name: &str, data: &[u8]) {
        self.0.borrow_mut().insert(name.to_string(), data.to_vec());
    }
    fn remove(&self, name: &str) {
        self.0.borrow_mut().remove(name);
    }
    fn names(&self) -> Vec<String> {
        self.0.borrow().keys().cloned().collect()
    }
}

/// tokio's clock, from the cluster's start.
struct Time(Instant);

impl Clock for Time {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep_until(&self, deadline: Duration) -> impl Future<Output = ()> {
        tokio::time::sleep_until(self.0 + deadline)
    }
}

/// The running cluster, as its clients see it.
struct Cluster {
    inboxes: Rc<Vec<mpsc::UnboundedSender<Message>>>,
    replies: mpsc::UnboundedReceiver<(ClientRequest, ClientReply)>,
    client: u64,
    seq: u64,
}

/// Starts three servers on the current `LocalSet`.
fn start() -> Cluster {
    let (reply_tx, replies) = mpsc::unbounded_channel();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..SERVERS {
        let (tx, rx) = mpsc::unbounded_channel();
        senders.push(tx);
        receivers.push(rx);
    }
    let inboxes = Rc::new(senders);
    let start = Instant::now();
    for (id, inbox) in (0..SERVERS).zip(receivers) {
        let env = Env {
            id,
            nodes: (0..SERVERS).collect(),
            quorums: Quorums::majority(SERVERS),
            net: Net {
                id,
                inboxes: inboxes.clone(),
                inbox: Mutex::new(inbox),
                replies: reply_tx.clone(),
            },
            storage: Memory::default(),
            clock: Time(start),
            seed: u64::from(id) + 1,
        };
        tokio::task::spawn_local(KvServer::run(env));
    }
    Cluster {
        inboxes,
        replies,
        client: 1,
        seq: 0,
    }
}

impl Cluster {
    /// Sends `op` as the next request, retrying on the named leader or, after a pause, the next
    /// server, and returns the first answer that is not a redirection.
    async fn call(&mut self, op: KvOp) -> ClientReply {
        self.seq += 1;
        let request = ClientRequest {
            client: self.client,
            seq: self.seq,
            op,
        };
        let mut server = 0usize;
        for _ in 0..200 {
            let _ = self.inboxes[server].send(Message::Client(request.clone()));
            let answer = tokio::time::timeout(Duration::from_millis(500), async {
                loop {
                    match self.replies.recv().await {
                        Some((r, reply)) if r.client == request.client && r.seq == request.seq => {
                            return Some(reply);
                        }
                        Some(_) => continue,
                        None => return None,
                    }
                }
            })
            .await;
            match answer {
                Ok(Some(ClientReply::NotLeader {
                    leader: Some(leader),
                })) if (leader as usize) < self.inboxes.len() => server = leader as usize,
                Ok(Some(ClientReply::NotLeader { .. })) | Ok(None) | Err(_) => {
                    // No leader known yet: give the cluster time to elect one.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    server = (server + 1) % self.inboxes.len();
                }
                Ok(Some(reply)) => return reply,
            }
        }
        panic!("{request:?} was not answered in 200 tries");
    }
}

fn put(key: &str, value: &str) -> KvOp {
    KvOp::Put {
        key: key.into(),
        value: value.into(),
    }
}

fn append(key: &str, value: &str) -> KvOp {
    KvOp::Append {
        key: key.into(),
        value: value.into(),
    }
}

fn get(key: &str) -> KvOp {
    KvOp::Get { key: key.into() }
}

fn value(v: &str) -> ClientReply {
    ClientReply::Value { value: v.into() }
}

/// Runs `test` against a fresh cluster.
fn with_cluster<F: Future<Output = ()>>(test: impl FnOnce(Cluster) -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move { test(start()).await });
}

#[test]
fn a_put_is_read_back() {
    with_cluster(|mut c| async move {
        assert_eq!(c.call(put("x", "1")).await, ClientReply::Done);
        assert_eq!(c.call(get("x")).await, value("1"));
    });
}

#[test]
fn a_key_never_written_reads_empty() {
    with_cluster(|mut c| async move {
        assert_eq!(c.call(get("nothing")).await, value(""));
    });
}

#[test]
fn appends_extend_a_value_in_order() {
    with_cluster(|mut c| async move {
        assert_eq!(c.call(put("k", "a")).await, ClientReply::Done);
        assert_eq!(c.call(append("k", "b")).await, ClientReply::Done);
        assert_eq!(c.call(append("k", "c")).await, ClientReply::Done);
        assert_eq!(c.call(get("k")).await, value("abc"));
    });
}

#[test]
fn later_writes_win() {
    with_cluster(|mut c| async move {
        for i in 0..20 {
            assert_eq!(c.call(put("k", &i.to_string())).await, ClientReply::Done);
        }
        assert_eq!(c.call(get("k")).await, value("19"));
    });
}

#[test]
fn answers_come_within_seconds() {
    with_cluster(|mut c| async move {
        let started = Instant::now();
        c.call(put("t", "1")).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first write took {:?} of simulated time",
            started.elapsed()
        );
    });
}
