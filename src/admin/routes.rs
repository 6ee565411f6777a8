//! The admin endpoints: one routing function and one async handler each.
//!
//! A handler gets the state and the request with its body already read
//! (bounded by `REQUEST_BODY_MAX`), and answers within `HANDLER_TIMEOUT`
//! or the server answers 503 for it. An endpoint that needs the cores
//! (`GET /cluster`, `POST /drain`) sends them a message through a channel
//! in [`AdminState`] and awaits the answer on a oneshot: the admin thread
//! waits without blocking, and other connections are served meanwhile.
//! A path parameter is a slice pattern in [`route`]:
//! `(&Method::GET, ["objects", kind, id]) => objects(state, kind, id).await`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use serde_json::json;
use wire::ObjectKey;

use super::AdminState;
use crate::cluster::view::LinkStatus;
use crate::router::driver::clock;
use crate::services::{player, room};

pub(super) type Body = Full<Bytes>;

/// The one place a request finds its handler.
pub(super) async fn route(state: &AdminState, request: Request<Bytes>) -> Response<Body> {
    let path = request.uri().path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (&Method::GET, ["healthz"]) => healthz(state).await,
        (&Method::GET, ["metrics"]) => metrics(state).await,
        (&Method::GET, ["cluster"]) => cluster(state).await,
        (&Method::GET, ["objects", kind, id]) => objects(state, kind, id).await,
        (_, ["healthz"] | ["metrics"] | ["cluster"] | ["objects", _, _]) => {
            method_not_allowed("GET")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `200 ok` while the node serves; `503` and the phase (`starting`,
/// `draining`, `stopping`) otherwise, so a load balancer sends new clients
/// elsewhere.
async fn healthz(state: &AdminState) -> Response<Body> {
    let phase = state.phase.get();
    let status = match phase {
        super::Phase::Serving => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    text(status, phase.name())
}

/// The Prometheus text exposition. The rendered buffer becomes the body
/// without a copy.
async fn metrics(state: &AdminState) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(state.metrics.render())));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The cluster as this node sees it: itself (incarnation, state, lease,
/// fence), every other member, and each core's links.
async fn cluster(state: &AdminState) -> Response<Body> {
    let Some(view) = &state.cluster else {
        return text(StatusCode::NOT_FOUND, "no cluster\n");
    };
    let snapshot = view.snapshot();
    let now = clock::now_ms();
    let links = view.links();
    let me = snapshot.me;
    let mut members = vec![json!({
        "node_id": view.me().0,
        "incarnation": me.incarnation,
        "state": if me.fenced { "down" } else { me.state.as_str() },
        "link": "self",
    })];
    members.extend(snapshot.peers.values().map(|peer| {
        let to_peer = links.iter().flatten().filter(|link| link.node == peer.node);
        json!({
            "node_id": peer.node.0,
            "incarnation": peer.incarnation,
            "state": peer.state.as_str(),
            "gateway": peer.gateway,
            "admin": peer.admin,
            "cores": peer.cores.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "link": link_summary(to_peer),
        })
    }));
    members.sort_by_key(|member| member["node_id"].as_u64());
    let links: Vec<_> = links
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
        .collect();
    json_response(json!({
        "node_id": view.me().0,
        "incarnation": me.incarnation,
        "state": me.state.as_str(),
        "fenced": me.fenced,
        "lease_remaining_ms": me.lease_until_ms.saturating_sub(now),
        "members": members,
        "links": links,
    }))
}

/// How this node's links to one peer stand, over all its cores: `up` when
/// every link it has is up, `refused` when a handshake was refused,
/// `connecting` while one dials or backs off, `none` before any frame was
/// sent there.
fn link_summary<'a>(links: impl Iterator<Item = &'a LinkStatus>) -> &'static str {
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

/// One object's ownership record, read from the store: `kind` is `player`,
/// `room` or a numeric type id (zone 0), `id` the object id.
async fn objects(state: &AdminState, kind: &str, id: &str) -> Response<Body> {
    let Some(store) = &state.store else {
        return text(StatusCode::NOT_FOUND, "no store\n");
    };
    let Ok(id) = id.parse::<u64>() else {
        return text(StatusCode::BAD_REQUEST, "the object id must be a number\n");
    };
    let key = match kind {
        "player" => player::player_key(id),
        "room" => room::room_key(id),
        _ => match kind.parse::<u32>() {
            Ok(type_id) => ObjectKey {
                type_id,
                zone_id: 0,
                object_id: id,
            },
            Err(_) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "the kind must be player, room or a type id\n",
                )
            }
        },
    };
    let record = match store.load(key).await {
        Ok(Some(record)) => record,
        Ok(None) => return text(StatusCode::NOT_FOUND, "no such object\n"),
        Err(error) => {
            let mut response = text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n");
            *response.body_mut() = Full::new(Bytes::from(format!("store unavailable: {error}\n")));
            return response;
        }
    };
    let owner_live = state.cluster.as_ref().map(|view| {
        let snapshot = view.snapshot();
        if record.owner_node == view.me() {
            record.owner_incarnation == snapshot.me.incarnation && !snapshot.me.fenced
        } else {
            snapshot
                .peers
                .get(&record.owner_node)
                .is_some_and(|peer| peer.is_live() && peer.incarnation == record.owner_incarnation)
        }
    });
    json_response(json!({
        "type": kind,
        "id": id,
        "type_id": key.type_id,
        "zone_id": key.zone_id,
        "owner": record.owner_node.0,
        "owner_incarnation": record.owner_incarnation,
        "owner_live": owner_live,
        "route_version": record.route_version.0,
        "cas_version": record.cas_version.0,
        "save_timepoint_ms": record.save_timepoint_ms,
        "state_bytes": record.state.len(),
    }))
}

fn json_response(value: serde_json::Value) -> Response<Body> {
    let mut body = value.to_string();
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// A plain-text answer.
pub(super) fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt;
    use shards::ShutdownHandle;

    use super::*;
    use crate::admin::NodePhase;
    use crate::metrics::NodeMetrics;

    fn call(state: &AdminState, method: Method, path: &str) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Bytes::new())
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let response = route(state, request).await;
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8(body.to_vec()).unwrap())
        })
    }

    #[test]
    fn healthz_says_why_it_is_not_ok() {
        let shutdown = ShutdownHandle::new();
        let state = AdminState {
            phase: NodePhase::new(shutdown.clone()),
            metrics: Arc::new(NodeMetrics::new(1)),
            cluster: None,
            store: None,
        };
        let healthz = || call(&state, Method::GET, "/healthz");
        assert_eq!(
            healthz(),
            (StatusCode::SERVICE_UNAVAILABLE, "starting".to_string())
        );
        state.phase.set_serving();
        assert_eq!(healthz(), (StatusCode::OK, "ok".to_string()));
        state.phase.set_draining();
        assert_eq!(
            healthz(),
            (StatusCode::SERVICE_UNAVAILABLE, "draining".to_string())
        );
        shutdown.trigger();
        assert_eq!(
            healthz(),
            (StatusCode::SERVICE_UNAVAILABLE, "stopping".to_string())
        );
    }

    #[test]
    fn routes_methods_and_unknown_paths() {
        let state = AdminState {
            phase: NodePhase::new(ShutdownHandle::new()),
            metrics: Arc::new(NodeMetrics::new(1)),
            cluster: None,
            store: None,
        };
        let (status, body) = call(&state, Method::GET, "/metrics");
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("# TYPE routerd_build_info gauge"), "{body}");
        assert_eq!(call(&state, Method::GET, "/metrics/").0, StatusCode::OK);
        assert_eq!(
            call(&state, Method::POST, "/metrics").0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(call(&state, Method::GET, "/").0, StatusCode::NOT_FOUND);
        assert_eq!(
            call(&state, Method::GET, "/healthz/x").0,
            StatusCode::NOT_FOUND
        );
    }
}
