//! Hidden oracle: a catch-up reset that carries an older garbage-collection horizon than the
//! one the node already holds must be ignored, not applied (and must never panic).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use chitchat::{Chitchat, ChitchatConfig, ChitchatId, DeletionStatus, FailureDetectorConfig, VersionedValue};
use tokio::sync::watch;

fn addr(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

fn node() -> Chitchat {
    let chitchat_id = ChitchatId::new("self-node", 1, addr(17001));
    let config = ChitchatConfig {
        listen_addr: chitchat_id.gossip_advertise_addr,
        chitchat_id,
        cluster_id: "oracle-cluster".to_string(),
        gossip_interval: Duration::from_millis(100),
        seed_nodes: Vec::new(),
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let (_tx, seeds) = watch::channel(HashSet::new());
    Chitchat::with_chitchat_id_and_seeds(config, seeds, Vec::new())
}

fn kv(key: &str, value: &str, version: u64) -> (String, VersionedValue) {
    (
        key.to_string(),
        VersionedValue { value: value.to_string(), version, status: DeletionStatus::Set },
    )
}

#[test]
fn stale_catchup_snapshot_with_older_gc_is_ignored() {
    let mut chitchat = node();
    let peer = ChitchatId::new("peer-node", 7, addr(17002));

    // Newer snapshot first: gc horizon 100, max version 80.
    chitchat.reset_node_state_if_update(&peer, vec![kv("svc", "new", 80)].into_iter(), 80, 100);
    // Then an older one (lower gc horizon), whose max version happens to be higher.
    chitchat.reset_node_state_if_update(&peer, vec![kv("svc", "old", 100)].into_iter(), 100, 50);

    let state = chitchat.node_state(&peer).expect("peer state");
    assert_eq!(state.last_gc_version(), 100);
    assert_eq!(state.max_version(), 80);
    assert_eq!(state.get("svc"), Some("new"));
}

#[test]
fn stale_catchup_snapshot_with_newer_max_version_is_ignored() {
    let mut chitchat = node();
    let peer = ChitchatId::new("peer-node", 7, addr(17002));

    chitchat.reset_node_state_if_update(&peer, vec![kv("a", "1", 60)].into_iter(), 60, 40);
    chitchat.reset_node_state_if_update(&peer, vec![kv("b", "2", 90)].into_iter(), 90, 30);

    let state = chitchat.node_state(&peer).expect("peer state");
    assert_eq!(state.last_gc_version(), 40);
    assert_eq!(state.max_version(), 60);
    assert_eq!(state.get("a"), Some("1"));
    assert_eq!(state.get("b"), None);
}
