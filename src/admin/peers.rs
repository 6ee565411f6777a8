//! The cluster gauges of a scrape: each peer's heartbeat age, link state
//! and membership state, and each core's queued link frames, read from the
//! cluster view when `/metrics` is asked for.

use crate::clock;
use crate::cluster::view::ClusterView;
use crate::metrics::{write_peers, CoreLinkQueue, PeerGauges};

/// Appends the peer and link families to a rendered scrape.
pub(super) fn write_peer_metrics(out: &mut String, view: &ClusterView) {
    let snapshot = view.snapshot();
    let links = view.links();
    let heartbeats = view.heartbeats_seen();
    let now = clock::now_ms();
    let peers: Vec<PeerGauges> = snapshot
        .peers
        .values()
        .map(|peer| {
            let to_peer = links.iter().flatten().filter(|link| link.node == peer.node);
            PeerGauges {
                node_id: peer.node.0,
                heartbeat_age_ms: heartbeats
                    .get(&peer.node)
                    .map(|since| now.saturating_sub(*since)),
                link_up: super::cluster_status::link_summary(to_peer) == "up",
                live: peer.is_live(),
            }
        })
        .collect();
    let queues: Vec<CoreLinkQueue> = links
        .iter()
        .enumerate()
        .map(|(core, links)| CoreLinkQueue {
            core,
            queued: links.iter().map(|link| link.queued).sum(),
        })
        .collect();
    write_peers(out, &peers, &queues);
}
