//! The network's holding pen: a copy the transport holds back for a long delay waits here, on a
//! host of its own, rather than on its sender, so that it still arrives after its sender crashed
//! (as a packet already on the wire would), and is dropped if a partition cuts its two servers
//! when its wait ends.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use turmoil::net::UdpSocket;

use crate::api::{MAX_PAYLOAD, NodeId};

/// The relay's host name.
pub(crate) const RELAY_HOST: &str = "network";
/// The relay's port.
pub(crate) const RELAY_PORT: u16 = 6000;
/// The server pairs (low first) a partition cuts right now, kept current by the run.
pub(crate) type Cut = Rc<RefCell<BTreeSet<(NodeId, NodeId)>>>;

const NONE: u32 = u32::MAX;
const HEADER: usize = 18;

/// Where a held-back copy goes and how long it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// Its destination.
    pub(crate) dst: SocketAddrV4Parts,
    /// The sending server, if a server sent it.
    pub(crate) from: Option<NodeId>,
    /// The receiving server, if it goes to a server.
    pub(crate) to: Option<NodeId>,
    /// How long it waits, in milliseconds.
    pub(crate) wait_ms: u32,
}

/// An IPv4 destination (turmoil gives every host one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SocketAddrV4Parts {
    ip: [u8; 4],
    port: u16,
}

impl SocketAddrV4Parts {
    /// The parts of `addr`, if it is IPv4.
    pub(crate) fn of(addr: SocketAddr) -> Option<Self> {
        match addr.ip() {
            IpAddr::V4(ip) => Some(SocketAddrV4Parts {
                ip: ip.octets(),
                port: addr.port(),
            }),
            IpAddr::V6(_) => None,
        }
    }

    fn addr(self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(self.ip)), self.port)
    }
}

/// A datagram for the relay: the header, then the held copy.
pub(crate) fn encode(held: Held, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + bytes.len());
    out.extend(held.dst.ip);
    out.extend(held.dst.port.to_le_bytes());
    out.extend(held.from.unwrap_or(NONE).to_le_bytes());
    out.extend(held.to.unwrap_or(NONE).to_le_bytes());
    out.extend(held.wait_ms.to_le_bytes());
    out.extend(bytes);
    out
}

fn decode(bytes: &[u8]) -> Option<(Held, &[u8])> {
    if bytes.len() < HEADER {
        return None;
    }
    let (header, rest) = bytes.split_at(HEADER);
    let u32_at =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let node = |v: u32| (v != NONE).then_some(v);
    let held = Held {
        dst: SocketAddrV4Parts {
            ip: [header[0], header[1], header[2], header[3]],
            port: u16::from_le_bytes([header[4], header[5]]),
        },
        from: node(u32_at(6)),
        to: node(u32_at(10)),
        wait_ms: u32_at(14),
    };
    Some((held, rest))
}

/// The relay's software: forwards each held copy when its wait ends, unless its servers are cut
/// from each other by then.
pub(crate) async fn run(cut: Cut) -> turmoil::Result {
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), RELAY_PORT);
    let socket = Rc::new(UdpSocket::bind(any).await?);
    let mut buffer = vec![0u8; MAX_PAYLOAD + 64 * 1024];
    loop {
        let (len, _) = socket.recv_from(&mut buffer).await?;
        let Some((held, bytes)) = decode(&buffer[..len]) else {
            continue;
        };
        let (socket, cut, bytes) = (socket.clone(), cut.clone(), bytes.to_vec());
        tokio::task::spawn_local(async move {
            tokio::time::sleep(Duration::from_millis(u64::from(held.wait_ms))).await;
            if let (Some(a), Some(b)) = (held.from, held.to)
                && cut.borrow().contains(&(a.min(b), a.max(b)))
            {
                return;
            }
            let _ = socket.try_send_to(&bytes, held.dst.addr());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_copy_round_trips_through_its_header() {
        let dst = SocketAddrV4Parts::of("10.1.2.3:7000".parse().unwrap()).unwrap();
        let held = Held {
            dst,
            from: Some(2),
            to: None,
            wait_ms: 1_500,
        };
        let bytes = encode(held, b"payload");
        assert_eq!(decode(&bytes), Some((held, &b"payload"[..])));
        assert_eq!(dst.addr(), "10.1.2.3:7000".parse().unwrap());
        assert_eq!(decode(&bytes[..5]), None);
        assert_eq!(SocketAddrV4Parts::of("[::1]:1".parse().unwrap()), None);
    }
}
