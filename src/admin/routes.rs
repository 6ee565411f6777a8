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

use super::AdminState;

pub(super) type Body = Full<Bytes>;

/// The one place a request finds its handler.
pub(super) async fn route(state: &AdminState, request: Request<Bytes>) -> Response<Body> {
    let path = request.uri().path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (&Method::GET, ["healthz"]) => healthz(state).await,
        (&Method::GET, ["metrics"]) => metrics(state).await,
        (_, ["healthz"] | ["metrics"]) => method_not_allowed("GET"),
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
