//! `GET /cluster`: the cluster as this node sees it, each member and each
//! core's links and standing, as one JSON document.

use std::collections::BTreeMap;

use hyper::Response;
use serde_json::json;

use super::forward::no_cluster;
use super::routes::{json_response, Body};
use super::AdminState;
use crate::clock;
use crate::cluster::membership::timers_of;
use crate::cluster::view::{ClusterView, LinkStatus, Peer, Standing};
use crate::gateway_addresses::{GatewayAddresses, Transport};
use crate::ids::NodeId;
use crate::store::MemberTimers;

/// The cluster as this node sees it: itself (incarnation, state, lease,
/// fence), every other member, and each core's links.
pub(super) async fn cluster(state: &AdminState) -> Response<Body> {
    let Some(view) = &state.cluster else {
        return no_cluster();
    };
    let snapshot = view.snapshot();
    let now = clock::now_ms();
    let links = view.links();
    let heartbeats = view.heartbeats_seen();
    let me = snapshot.me;
    // The router gauges, mirrored by each core every quarter second.
    let objects: i64 = state
        .metrics
        .cores
        .iter()
        .map(|core| core.router.objects.get())
        .sum();
    let mut members = vec![own_member_json(state, view, &me, objects)];
    members.extend(
        snapshot
            .peers
            .values()
            .map(|peer| peer_member_json(peer, &links, &heartbeats, now)),
    );
    members.sort_by_key(|member| member["node_id"].as_u64());
    json_response(json!({
        "node_id": view.me().0,
        "incarnation": me.incarnation,
        "state": me.state.as_str(),
        "fenced": me.fenced,
        "serving": !me.fenced && now < me.lease_until_ms,
        "lease_remaining_ms": me.lease_until_ms.saturating_sub(now),
        "cores": cores_json(view, now),
        "objects": objects,
        "members": members,
        "links": links_json(links),
    }))
}

/// This node among the members: `link` is `self`, and its addresses are
/// the ones it advertises, when it advertises any.
fn own_member_json(
    state: &AdminState,
    view: &ClusterView,
    me: &Standing,
    objects: i64,
) -> serde_json::Value {
    let mut own = json!({
        "node_id": view.me().0,
        "incarnation": me.incarnation,
        "state": if me.fenced { "down" } else { me.state.as_str() },
        "link": "self",
        "objects": objects,
    });
    if let Some(advertised) = &state.advertised {
        own["gateway"] = json!(advertised.gateway.get(Transport::Plain).unwrap_or_default());
        own["gateways"] = gateways_json(&advertised.gateway);
        own["admin"] = json!(advertised.admin);
    }
    if let Some(config) = &state.config {
        own["timers"] = timers_json(Some(timers_of(&config.cluster)));
    }
    own
}

/// A member's failure-detection timers as its row carries them (`null`: a
/// row from a build that did not record them).
fn timers_json(timers: Option<MemberTimers>) -> serde_json::Value {
    match timers {
        Some(timers) => json!({
            "heartbeat_interval_ms": timers.heartbeat_interval_ms,
            "fence_after_ms": timers.fence_after_ms,
            "down_after_ms": timers.down_after_ms,
        }),
        None => serde_json::Value::Null,
    }
}

/// Another member as this node knows it, with how this node's links to it
/// stand and how long ago it last heard its heartbeat.
fn peer_member_json(
    peer: &Peer,
    links: &[Vec<LinkStatus>],
    heartbeats: &BTreeMap<NodeId, u64>,
    now: u64,
) -> serde_json::Value {
    let to_peer = links.iter().flatten().filter(|link| link.node == peer.node);
    json!({
        "node_id": peer.node.0,
        "incarnation": peer.incarnation,
        "state": peer.state.as_str(),
        // The plain listener, as before; every transport beside it.
        "gateway": peer.gateway.get(Transport::Plain).unwrap_or_default(),
        "gateways": gateways_json(&peer.gateway),
        "admin": peer.admin,
        "cores": peer.cores.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "link": link_summary(to_peer),
        "heartbeat_age_ms": heartbeats.get(&peer.node).map(|since| now.saturating_sub(*since)),
        "timers": timers_json(peer.timers),
    })
}

/// Every link of every core, one row each.
fn links_json(links: Vec<Vec<LinkStatus>>) -> Vec<serde_json::Value> {
    links
        .into_iter()
        .enumerate()
        .flat_map(|(core, links)| {
            links.into_iter().map(move |link| {
                json!({
                    "core": core,
                    "node_id": link.node.0,
                    "peer_core": link.core,
                    "state": link.state,
                    "queued": link.queued,
                    "last_refusal": link.last_refusal,
                })
            })
        })
        .collect()
}

/// Each core's own standing: its incarnation, lease and fence.
fn cores_json(view: &ClusterView, now: u64) -> Vec<serde_json::Value> {
    view.cores()
        .into_iter()
        .enumerate()
        .map(|(core, standing)| {
            json!({
                "core": core,
                "incarnation": standing.incarnation,
                "serving": standing.is_serving(now),
                "fenced": standing.fenced,
                "lease_remaining_ms": standing.lease_until_ms.saturating_sub(now),
            })
        })
        .collect()
}

/// A node's advertised gateways by transport: `{"tcp": "10.0.0.5:7400"}`.
fn gateways_json(addresses: &GatewayAddresses) -> serde_json::Value {
    addresses
        .iter()
        .map(|(transport, address)| (transport.as_str().to_string(), json!(address)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// How this node's links to one peer stand, over all its cores: `up` when
/// every link it has is up, `refused` when a handshake was refused,
/// `connecting` while one dials or backs off, `none` before any frame was
/// sent there.
pub(super) fn link_summary<'a>(links: impl Iterator<Item = &'a LinkStatus>) -> &'static str {
    let (mut any, mut all_up) = (false, true);
    for link in links {
        if link.last_refusal.is_some() {
            return "refused";
        }
        any = true;
        all_up &= link.state == "up";
    }
    match (any, all_up) {
        (false, _) => "none",
        (true, true) => "up",
        (true, false) => "connecting",
    }
}
