//! Our transport over turmoil's datagrams: the wire format of server and client messages, and
//! the faults turmoil does not inject itself (independent loss, duplication, long delays), each
//! decided on the sending side from a seeded stream; long-delayed copies wait in the relay.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use turmoil::net::UdpSocket;

use crate::api::{ClientReply, ClientRequest, MAX_PAYLOAD, Message, Network, NodeId};
use crate::plan::NetworkFaults;
use crate::relay::{self, Held, RELAY_HOST, RELAY_PORT, SocketAddrV4Parts};

/// The port every server listens on.
pub(crate) const SERVER_PORT: u16 = 7000;
/// Client `i` listens on `CLIENT_PORT_BASE + i`.
pub(crate) const CLIENT_PORT_BASE: u16 = 10_000;

const PEER: u8 = 0;
const REQUEST: u8 = 1;
const REPLY: u8 = 2;

/// A reply as it crosses the network to its client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReplyFrame {
    pub(crate) client: u64,
    pub(crate) seq: u64,
    pub(crate) reply: ClientReply,
}

/// The name of server `node` in the simulation.
pub(crate) fn host_name(node: NodeId) -> String {
    format!("n{node}")
}

/// The name of the host all clients run on.
pub(crate) const CLIENTS_HOST: &str = "clients";

/// What happened to messages in a run, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetStats {
    /// Messages handed to the network (servers and clients).
    pub sent: u64,
    /// Of those, lost on purpose.
    pub lost: u64,
    /// Of those, delivered twice on purpose.
    pub duplicated: u64,
    /// Copies held back for a long delay.
    pub held_back: u64,
    /// Server payloads dropped for being above [`MAX_PAYLOAD`].
    pub oversized: u64,
}

/// The sending side of a host: its socket, its faults and its own seeded stream of decisions.
#[derive(Clone)]
pub(crate) struct Sender {
    socket: Rc<UdpSocket>,
    origin: Option<NodeId>,
    relay: SocketAddr,
    faults: NetworkFaults,
    rng: Rc<RefCell<ChaCha8Rng>>,
    stats: Rc<RefCell<NetStats>>,
}

impl Sender {
    /// The sender of server `origin` (`None` for a client); must run inside the simulation.
    pub(crate) fn new(
        socket: Rc<UdpSocket>,
        origin: Option<NodeId>,
        faults: NetworkFaults,
        seed: u64,
        stats: Rc<RefCell<NetStats>>,
    ) -> Self {
        Sender {
            socket,
            origin,
            relay: SocketAddr::new(turmoil::lookup(RELAY_HOST), RELAY_PORT),
            faults,
            rng: Rc::new(RefCell::new(ChaCha8Rng::seed_from_u64(seed))),
            stats,
        }
    }

    /// Sends `bytes` to `dst` (server `to`, if a server) through the faults: lost, sent once or
    /// twice, each copy now (the simulator adds the link's latency) or through the relay after
    /// a long extra delay.
    pub(crate) fn dispatch(&self, dst: SocketAddr, to: Option<NodeId>, bytes: Vec<u8>) {
        let mut rng = self.rng.borrow_mut();
        let mut stats = self.stats.borrow_mut();
        stats.sent += 1;
        if rng.random_bool(self.faults.loss) {
            stats.lost += 1;
            return;
        }
        let copies = if rng.random_bool(self.faults.duplicate) {
            stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let held = (self.faults.long_delay_max_ms > 0
                && rng.random_bool(self.faults.long_delay))
            .then(|| rng.random_range(1..=self.faults.long_delay_max_ms))
            .zip(SocketAddrV4Parts::of(dst));
            // A send fails only when no link leads to the destination: a loss.
            let _ = match held {
                Some((wait_ms, dst)) => {
                    stats.held_back += 1;
                    let held = Held {
                        dst,
                        from: self.origin,
                        to,
                        wait_ms: u32::try_from(wait_ms).unwrap_or(u32::MAX),
                    };
                    self.socket
                        .try_send_to(&relay::encode(held, &bytes), self.relay)
                }
                None => self.socket.try_send_to(&bytes, dst),
            };
        }
    }

    pub(crate) fn count_oversized(&self) {
        self.stats.borrow_mut().oversized += 1;
    }
}

/// Binds a datagram socket on every address of the current host.
pub(crate) async fn bind(port: u16) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)).await
}

/// Encodes a client's request for the wire.
pub(crate) fn encode_request(request: &ClientRequest) -> Vec<u8> {
    let mut bytes = vec![REQUEST];
    bytes.extend(serde_json::to_vec(request).expect("a request always encodes"));
    bytes
}

/// Decodes a reply frame a client received; `None` for anything else.
pub(crate) fn decode_reply(bytes: &[u8]) -> Option<ReplyFrame> {
    match bytes.split_first() {
        Some((&REPLY, body)) => serde_json::from_slice(body).ok(),
        _ => None,
    }
}

/// The [`Network`] the simulator gives a server.
pub struct SimNet {
    id: NodeId,
    socket: Rc<UdpSocket>,
    servers: Vec<SocketAddr>,
    clients: IpAddr,
    sender: Sender,
    buffer: RefCell<Vec<u8>>,
}

impl SimNet {
    /// Binds server `id`'s socket; must run inside the simulation.
    pub(crate) async fn bind(
        id: NodeId,
        nodes: u32,
        faults: NetworkFaults,
        seed: u64,
        stats: Rc<RefCell<NetStats>>,
    ) -> std::io::Result<Self> {
        let socket = Rc::new(bind(SERVER_PORT).await?);
        let servers = (0..nodes)
            .map(|n| SocketAddr::new(turmoil::lookup(host_name(n)), SERVER_PORT))
            .collect();
        Ok(SimNet {
            id,
            sender: Sender::new(socket.clone(), Some(id), faults, seed, stats),
            socket,
            servers,
            clients: turmoil::lookup(CLIENTS_HOST),
            buffer: RefCell::new(vec![0; MAX_PAYLOAD + 64 * 1024]),
        })
    }

    /// Takes one datagram off the socket if one is there, decoded; `Some(None)` for a datagram
    /// that is not a well-formed message (dropped).
    fn take(&self) -> Option<Option<Message>> {
        let mut buffer = self.buffer.borrow_mut();
        let (len, _) = self.socket.try_recv_from(&mut buffer).ok()?;
        Some(decode_message(&buffer[..len]))
    }
}

fn decode_message(bytes: &[u8]) -> Option<Message> {
    match bytes.split_first()? {
        (&PEER, rest) if rest.len() >= 4 => {
            let (from, payload) = rest.split_at(4);
            Some(Message::Peer {
                from: NodeId::from_le_bytes(from.try_into().ok()?),
                payload: payload.to_vec(),
            })
        }
        (&REQUEST, body) => serde_json::from_slice(body).ok().map(Message::Client),
        _ => None,
    }
}

impl Network for SimNet {
    fn send(&self, to: NodeId, payload: Vec<u8>) {
        let Some(&dst) = self.servers.get(to as usize) else {
            return;
        };
        if payload.len() > MAX_PAYLOAD {
            self.sender.count_oversized();
            return;
        }
        let mut bytes = Vec::with_capacity(payload.len() + 5);
        bytes.push(PEER);
        bytes.extend(self.id.to_le_bytes());
        bytes.extend(payload);
        self.sender.dispatch(dst, Some(to), bytes);
    }

    fn reply(&self, request: &ClientRequest, reply: ClientReply) {
        let Some(port) = u16::try_from(request.client)
            .ok()
            .and_then(|c| CLIENT_PORT_BASE.checked_add(c))
        else {
            return;
        };
        let frame = ReplyFrame {
            client: request.client,
            seq: request.seq,
            reply,
        };
        let mut bytes = vec![REPLY];
        bytes.extend(serde_json::to_vec(&frame).expect("a reply always encodes"));
        self.sender
            .dispatch(SocketAddr::new(self.clients, port), None, bytes);
    }

    async fn recv(&self) -> Message {
        loop {
            // `readable` consumes nothing, so a caller that drops this future loses no message.
            if self.socket.readable().await.is_err() {
                std::future::pending::<()>().await;
            }
            if let Some(Some(message)) = self.take() {
                return message;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::KvOp;

    #[test]
    fn messages_round_trip_through_the_wire_format() {
        let request = ClientRequest {
            client: 3,
            seq: 9,
            op: KvOp::Append {
                key: "k".into(),
                value: "v".into(),
            },
        };
        assert_eq!(
            decode_message(&encode_request(&request)),
            Some(Message::Client(request))
        );
        let mut peer = vec![PEER];
        peer.extend(7u32.to_le_bytes());
        peer.extend(b"hi");
        assert_eq!(
            decode_message(&peer),
            Some(Message::Peer {
                from: 7,
                payload: b"hi".to_vec()
            })
        );
        assert_eq!(decode_message(&[PEER, 1, 2]), None);
        assert_eq!(decode_message(&[REQUEST, b'{']), None);
        assert_eq!(decode_message(&[]), None);
        let frame = ReplyFrame {
            client: 1,
            seq: 2,
            reply: ClientReply::Done,
        };
        let mut bytes = vec![REPLY];
        bytes.extend(serde_json::to_vec(&frame).unwrap());
        assert_eq!(decode_reply(&bytes), Some(frame));
        assert_eq!(decode_reply(&peer), None);
    }
}
