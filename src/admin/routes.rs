//! The admin endpoints: one routing function and one async handler each.
//!
//! A handler gets the state and the request with its body already read
//! (bounded by `REQUEST_BODY_MAX`), and answers within `HANDLER_TIMEOUT`
//! or the server answers 503 for it. An endpoint that needs the cores
//! (`POST /objects/../transfer`, `POST /drain`) goes through
//! [`crate::ops::Ops`], which sends them a message through a channel and
//! awaits the answer on a oneshot: the admin thread waits without
//! blocking, and other connections are served meanwhile.
//! [`route`] hands each family of paths (another node's, the operator's,
//! this node's own) to its match, where a path parameter is a slice
//! pattern:
//! `(&Method::GET, ["objects", kind, id]) => objects(state, kind, id).await`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use serde_json::json;
use wire::ObjectKey;

use super::forward::no_cluster;
use super::{probes, AdminState};
use crate::ids::NodeId;
use crate::ops::drain::DrainRefused;
use crate::ops::transfer::{OpAnswer, TransferCall};

pub(super) type Body = Full<Bytes>;

/// The one place a request finds its handler.
/// The token, the `Host` and the `Origin` were checked on the head (see
/// `gate`).
pub(super) async fn route(state: &AdminState, request: Request<Bytes>) -> Response<Body> {
    let path = request.uri().path();
    // The console's files are named by the path as it is (`/console/`
    // and `/console` differ: its modules load relative to the first).
    if let Some(name) = path.strip_prefix("/console/") {
        return match *request.method() {
            Method::GET => super::console::file(name),
            _ => method_not_allowed("GET"),
        };
    }
    // Empty segments are dropped: `/nodes/1//nodes/1/...` must meet the
    // "not `/nodes` again" check below, or each level answered as this
    // node's own went round again, one nested call deeper, until the
    // admin thread's stack overflowed and the process aborted.
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let query = request.uri().query();
    match (request.method(), segments.as_slice()) {
        (&Method::GET, ["console"]) => super::console::redirect(),
        (_, ["nodes", node, rest @ ..]) => route_to_node(state, node, rest, query, &request).await,
        (_, ["config" | "log-level" | "sessions" | "rooms", ..] | ["objects", _]) => {
            route_operator(state, &request, &segments, query).await
        }
        _ => route_node_local(state, &request, &segments, query).await,
    }
}

/// `/nodes/<id>/<path>`: this node's own is answered here, as `/<path>`
/// would be; another's is forwarded to it.
async fn route_to_node(
    state: &AdminState,
    node: &str,
    rest: &[&str],
    query: Option<&str>,
    request: &Request<Bytes>,
) -> Response<Body> {
    let me = state.cluster.as_ref().map(|view| view.me().0.to_string());
    if me.as_deref() == Some(node) && rest.first() != Some(&"nodes") {
        // This node's own: answered here, as the same path without
        // the prefix would be.
        let mut local = format!("/{}", rest.join("/"));
        if let Some(query) = query {
            local = format!("{local}?{query}");
        }
        let mut parts = Request::builder()
            .method(request.method().clone())
            .uri(local.as_str());
        for (name, value) in request.headers() {
            parts = parts.header(name, value);
        }
        return match parts.body(request.body().clone()) {
            Ok(local) => Box::pin(route(state, local)).await,
            Err(_) => error_json(StatusCode::BAD_REQUEST, "bad_request", "bad path"),
        };
    }
    super::forward::forward(state, node, rest, request).await
}

/// The operator's paths: the configuration, the log level, the sessions
/// and rooms, and the listing of one type's objects.
async fn route_operator(
    state: &AdminState,
    request: &Request<Bytes>,
    segments: &[&str],
    query: Option<&str>,
) -> Response<Body> {
    match (request.method(), segments) {
        (&Method::GET, ["config"]) => super::operator::config(state).await,
        (&Method::GET, ["log-level"]) => super::operator::log_level_get().await,
        (&Method::PUT | &Method::POST, ["log-level"]) => {
            super::operator::log_level_set(request.body()).await
        }
        (&Method::GET, ["sessions"]) => super::operator::list_sessions(state, query).await,
        (&Method::POST, ["sessions", session, "kick"]) => {
            super::sessions::kick(state, session, query).await
        }
        (&Method::POST, ["sessions", session, "push"]) => {
            super::sessions::push(state, session, query, request.body()).await
        }
        (&Method::POST, ["rooms", room, "message"]) => {
            super::sessions::room_message(state, room, request.body()).await
        }
        (&Method::GET, ["objects", kind]) => {
            super::operator::list_objects(state, kind, query).await
        }
        (_, ["config"] | ["sessions"] | ["objects", _]) => method_not_allowed("GET"),
        (_, ["log-level"]) => method_not_allowed("GET, PUT, POST"),
        _ => not_found(),
    }
}

/// The node's own paths: its health, metrics and cluster view, one
/// object's record and its transfer, rebalancing, scripts and draining.
async fn route_node_local(
    state: &AdminState,
    request: &Request<Bytes>,
    segments: &[&str],
    query: Option<&str>,
) -> Response<Body> {
    match (request.method(), segments) {
        (&Method::GET, ["healthz"]) => healthz(state).await,
        (&Method::GET, ["livez"]) => probes::livez(state).await,
        (&Method::GET, ["readyz"]) => probes::readyz(state).await,
        (&Method::GET, ["metrics"]) => metrics(state).await,
        (&Method::GET, ["cluster"]) => super::cluster_status::cluster(state).await,
        (&Method::GET, ["history"]) => super::history::get(state, query),
        (&Method::GET, ["hot-objects"]) => super::hot::get(state).await,
        (&Method::GET, ["calls-by-type"]) => super::by_type::get(state).await,
        (&Method::GET, ["objects", kind, id]) => objects(state, kind, id).await,
        (&Method::POST, ["objects", kind, id, "transfer"]) => {
            transfer(state, kind, id, request.uri().query()).await
        }
        (&Method::POST, ["rebalance"]) => super::rebalance::start(state, query).await,
        (&Method::GET, ["rebalance"]) => super::rebalance::status(state).await,
        (_, ["rebalance"]) => method_not_allowed("GET, POST"),
        (&Method::GET, ["scripts"]) => super::scripts::list(state).await,
        (&Method::POST, ["scripts", "reload"]) => super::scripts::reload(state, query).await,
        (_, ["scripts"]) => method_not_allowed("GET"),
        (_, ["scripts", "reload"]) => method_not_allowed("POST"),
        (&Method::POST, ["drain"]) => drain(state, true).await,
        (&Method::GET, ["drain"]) => drain(state, false).await,
        (
            _,
            ["healthz"]
            | ["livez"]
            | ["readyz"]
            | ["metrics"]
            | ["cluster"]
            | ["history"]
            | ["hot-objects"]
            | ["calls-by-type"]
            | ["objects", _, _],
        ) => method_not_allowed("GET"),
        (_, ["objects", _, _, "transfer"]) => method_not_allowed("POST"),
        (_, ["drain"]) => method_not_allowed("GET, POST"),
        _ => not_found(),
    }
}

/// No admin path by that name.
fn not_found() -> Response<Body> {
    error_json(StatusCode::NOT_FOUND, "not_found", "no such admin path")
}

/// `200 ok` while the node serves; `503` and the phase (`starting`,
/// `draining`, `stopping`) otherwise, so a load balancer sends new clients
/// elsewhere. A serving node whose store keeps failing answers `503` with
/// `store: <cause>`: it cannot load or save an object, and a client sent
/// there would only be refused.
async fn healthz(state: &AdminState) -> Response<Body> {
    let phase = state.phase.get();
    if phase != crate::ops::Phase::Serving {
        return text(StatusCode::SERVICE_UNAVAILABLE, phase.name());
    }
    match probes::store_failing(state).await {
        None => text(StatusCode::OK, phase.name()),
        Some(cause) => {
            let mut response = text(StatusCode::SERVICE_UNAVAILABLE, "store");
            *response.body_mut() = Full::new(Bytes::from(format!("store: {cause}")));
            response
        }
    }
}

/// The Prometheus text exposition. The rendered buffer becomes the body
/// without a copy.
async fn metrics(state: &AdminState) -> Response<Body> {
    let mut text = state.metrics.render();
    if let Some(view) = &state.cluster {
        super::peers::write_peer_metrics(&mut text, view);
    }
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// One object's ownership record, read from the store: `kind` is `player`,
/// `room` or a numeric type id (zone 0), `id` the object id.
async fn objects(state: &AdminState, kind: &str, id: &str) -> Response<Body> {
    let Some(store) = &state.store else {
        return error_json(StatusCode::NOT_FOUND, "no_store", "this node has no store");
    };
    let key = match parse_key(&state.object_types, kind, id) {
        Ok(key) => key,
        Err(reason) => match (super::operator::type_id_of(state, kind), id.parse::<u64>()) {
            (Some(type_id), Ok(object_id)) => ObjectKey {
                type_id,
                zone_id: 0,
                object_id,
            },
            _ => return error_json(StatusCode::BAD_REQUEST, "bad_request", reason.trim_end()),
        },
    };
    let id = key.object_id;
    let record = match store.load(key).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            return error_json(
                StatusCode::NOT_FOUND,
                "no_such_object",
                "the store holds no record of it",
            )
        }
        Err(error) => {
            return error_json(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                &error.to_string(),
            );
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
        "state": super::state_view::state_json(key, &record.state, state.debug_view.as_ref()),
    }))
}

/// The key a path names: `kind` is the name of one of the node's object
/// types (`player`, `room`, `guild`...) or a numeric type id (zone 0),
/// `id` the object id.
fn parse_key(
    object_types: &[(&'static str, u32)],
    kind: &str,
    id: &str,
) -> Result<ObjectKey, String> {
    let Ok(object_id) = id.parse::<u64>() else {
        return Err("the object id must be a number\n".to_string());
    };
    let named = object_types
        .iter()
        .find(|(name, _)| *name == kind)
        .map(|(_, type_id)| *type_id);
    match named.or_else(|| kind.parse::<u32>().ok()) {
        Some(type_id) => Ok(ObjectKey {
            type_id,
            zone_id: 0,
            object_id,
        }),
        None => {
            let names: Vec<&str> = object_types.iter().map(|(name, _)| *name).collect();
            Err(format!(
                "unknown object type {kind:?}: this node registers {}, or give a type id\n",
                names.join(", ")
            ))
        }
    }
}

/// `POST /objects/{kind}/{id}/transfer?to=N`: moves the object to node
/// `N` (see `ops::transfer`); JSON either way.
async fn transfer(state: &AdminState, kind: &str, id: &str, query: Option<&str>) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let bad = |reason: &str| {
        answer(OpAnswer {
            status: 400,
            body: json!({ "error": "bad_request", "reason": reason }),
        })
    };
    let key = match parse_key(&state.object_types, kind, id) {
        Ok(key) => key,
        Err(reason) => return bad(reason.trim_end()),
    };
    let (mut target, mut forwarded) = (None, false);
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("to", value)) => match value.parse::<u64>() {
                Ok(node) if node != 0 => target = Some(NodeId(node)),
                _ => return bad("to must be a node id (a positive number)"),
            },
            Some(("forwarded", "1")) => forwarded = true,
            _ => return bad("the query takes to=N (and forwarded=1 between nodes)"),
        }
    }
    let Some(target) = target else {
        return bad("say where to: ?to=N");
    };
    let call = TransferCall {
        key,
        kind,
        target,
        forwarded,
    };
    answer(ops.transfer(call).await)
}

/// `POST /drain` starts draining the node (`202` and its status; again:
/// the same); `GET /drain` reports how far it is.
async fn drain(state: &AdminState, start: bool) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    if !start {
        return json_response(ops.drain_status().to_json());
    }
    let refused = |status: u16, error: &str, reason: &str| {
        answer(OpAnswer {
            status,
            body: json!({ "error": error, "reason": reason }),
        })
    };
    match ops.drain() {
        Ok(status) => answer(OpAnswer {
            status: 202,
            body: status,
        }),
        Err(DrainRefused::Starting) => refused(503, "starting", "the node does not serve yet"),
        Err(DrainRefused::Stopping) => refused(409, "stopping", "the node is stopping already"),
    }
}

fn answer(op: OpAnswer) -> Response<Body> {
    let mut response = json_response(op.body);
    *response.status_mut() =
        StatusCode::from_u16(op.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}

/// A JSON answer with `status`.
pub(super) fn json_status(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut response = json_response(value);
    *response.status_mut() = status;
    response
}

pub(super) fn json_response(value: serde_json::Value) -> Response<Body> {
    let mut body = value.to_string();
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = error_json(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &format!("this path answers {allow}"),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// An error answer, as docs/protocol.md section 9 gives every one:
/// `{"error": "<code>", "reason": "<words>"}`.
pub(super) fn error_json(status: StatusCode, error: &str, reason: &str) -> Response<Body> {
    let mut response = json_response(json!({ "error": error, "reason": reason }));
    *response.status_mut() = status;
    response
}

/// A plain-text answer (`/healthz`'s, which load balancers read).
pub(super) fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
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
    use crate::builtins::{PLAYER_TYPE_ID, ROOM_TYPE_ID};
    use crate::ops::NodePhase;

    fn call(state: &AdminState, method: Method, path: &str) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Bytes::new())
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
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
        let mut state = AdminState::bare(Arc::new(crate::testing::node_metrics(1)));
        state.phase = NodePhase::new(shutdown.clone());
        state.store = None;
        state.object_types = vec![("player", PLAYER_TYPE_ID), ("room", ROOM_TYPE_ID)];
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
    fn healthz_says_the_store_fails_until_it_answers_again() {
        let config = crate::config::StoreConfig::default();
        let (store, faults) = crate::store::open_memory(&config);
        let mut state = AdminState::bare(Arc::new(crate::testing::node_metrics(1)));
        state.store = Some(store.clone());
        state.object_types = Vec::new();
        state.phase.set_serving();
        let healthz = || call(&state, Method::GET, "/healthz");
        assert_eq!(healthz(), (StatusCode::OK, "ok".to_string()));
        // The failures, then the probe healthz makes: all fail.
        let runs = crate::store::health::FAILURES_UNHEALTHY_MIN as usize;
        assert!(faults.inject(crate::store::Fault::Fail, runs + 1));
        for _ in 0..runs {
            let loaded = futures_lite::future::block_on(store.load(probes::STORE_PROBE_KEY));
            assert!(loaded.is_err());
        }
        assert_eq!(
            healthz(),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "store: injected fault".to_string()
            )
        );
        // The store answers again: the probe sees it.
        assert_eq!(faults.pending(), 0);
        assert_eq!(healthz(), (StatusCode::OK, "ok".to_string()));
    }

    #[test]
    fn routes_methods_and_unknown_paths() {
        let mut state = AdminState::bare(Arc::new(crate::testing::node_metrics(1)));
        state.store = None;
        state.object_types = vec![("player", PLAYER_TYPE_ID), ("room", ROOM_TYPE_ID)];
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

    #[test]
    fn a_path_names_a_type_by_a_registered_name_or_an_id() {
        let types = [("player", PLAYER_TYPE_ID), ("guild", 100)];
        assert_eq!(
            parse_key(&types, "guild", "7"),
            Ok(ObjectKey::new(100, 0, 7))
        );
        assert_eq!(
            parse_key(&types, "player", "7"),
            Ok(ObjectKey::new(PLAYER_TYPE_ID, 0, 7))
        );
        assert_eq!(parse_key(&types, "101", "7"), Ok(ObjectKey::new(101, 0, 7)));
        assert_eq!(
            parse_key(&types, "room", "7"),
            Err("unknown object type \"room\": this node registers player, guild, or give a type id\n"
                .to_string())
        );
        assert!(parse_key(&types, "guild", "x").is_err());
    }
}
