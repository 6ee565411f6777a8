//! `/nodes/{id}/...`: a request for another member's admin endpoint, sent
//! on by this one. The console is served by one node and reads every
//! node's `/metrics`, `/sessions` and the rest through it: a browser may
//! not read another origin's answers (no CORS here), and an operator's
//! network may reach one admin port only.
//!
//! The peer's admin address is the one its membership row advertises. The
//! request goes out as HTTP/1.1 with `Connection: close` (the peer serves
//! one request per connection), its `Authorization` header kept, and the
//! answer comes back with its status, content type and body. Bounded: the
//! connect and the whole exchange by [`FORWARD_TIMEOUT`], the answer by
//! [`FORWARD_RESPONSE_MAX_BYTES`]. A path that would forward again
//! (`/nodes/2/nodes/3/...`) is refused, so no request loops.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::routes::Body;
use super::AdminState;

/// How long a forwarded request may take, connect to last byte.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer forwarded, in bytes (a scrape is about 100 KB).
pub const FORWARD_RESPONSE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Where node `node_id`'s admin endpoint listens, as this node knows it.
fn admin_address(state: &AdminState, node_id: u64) -> Result<String, (StatusCode, &'static str)> {
    let view = state
        .cluster
        .as_ref()
        .ok_or((StatusCode::NOT_FOUND, "no cluster"))?;
    let snapshot = view.snapshot();
    let peer = snapshot
        .peers
        .get(&crate::ids::NodeId(node_id))
        .ok_or((StatusCode::NOT_FOUND, "no such member"))?;
    if peer.admin.is_empty() {
        return Err((
            StatusCode::BAD_GATEWAY,
            "the member advertises no admin address others can reach (none, or an unspecified \
             one such as 0.0.0.0: set its admin.advertise)",
        ));
    }
    Ok(peer.admin.clone())
}

/// What an endpoint that needs the cluster (its view or its operations)
/// answers on a node that runs none: a program embedding a bare router.
pub(super) fn no_cluster() -> Response<Body> {
    refused(
        StatusCode::NOT_FOUND,
        "no_cluster",
        "this node runs no cluster",
    )
}

pub(super) fn refused(status: StatusCode, error: &str, reason: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!(
        "{}\n",
        json!({ "error": error, "reason": reason })
    ))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The scope of a call that fans out to every up member (a rebalance, a
/// script reload): `Ok(true)` for `scope=node`, this node only (what the
/// node asked sends the others); `Ok(false)` for the whole cluster, the
/// default; a refusal for anything else.
pub(super) fn node_only(query: Option<&str>) -> Result<bool, Box<Response<Body>>> {
    match query {
        None | Some("") | Some("scope=cluster") => Ok(false),
        Some("scope=node") => Ok(true),
        Some(_) => Err(Box::new(refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the one parameter is scope=cluster (the default) or scope=node",
        ))),
    }
}

/// Forwards `request`, whose path is `/nodes/{node_id}/{rest}`, to that
/// node. The caller answers this node's own id itself.
pub(super) async fn forward(
    state: &AdminState,
    node_id: &str,
    rest: &[&str],
    request: &Request<Bytes>,
) -> Response<Body> {
    let Ok(node_id) = node_id.parse::<u64>() else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the node id must be a number",
        );
    };
    if rest.first() == Some(&"nodes") || rest.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "say which endpoint of the node: /nodes/{id}/metrics, ... (not /nodes again)",
        );
    }
    if request.method() != Method::GET
        && request.method() != Method::POST
        && request.method() != Method::PUT
    {
        return refused(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET, POST or PUT",
        );
    }
    let address = match admin_address(state, node_id) {
        Ok(address) => address,
        Err((status, reason)) => return refused(status, "unknown_node", reason),
    };
    let mut path = format!("/{}", rest.join("/"));
    if let Some(query) = request.uri().query() {
        path.push('?');
        path.push_str(query);
    }
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let exchange = send(
        &address,
        request.method().as_str(),
        &path,
        authorization,
        request.body(),
    );
    match tokio::time::timeout(FORWARD_TIMEOUT, exchange).await {
        Ok(Ok(response)) => response,
        Ok(Err(reason)) => refused(StatusCode::BAD_GATEWAY, "unreachable", &reason),
        Err(_) => refused(
            StatusCode::GATEWAY_TIMEOUT,
            "timed_out",
            "the node did not answer in time",
        ),
    }
}

/// One HTTP/1.1 exchange with `address`.
async fn send(
    address: &str,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &Bytes,
) -> Result<Response<Body>, String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|error| format!("connect to {address}: {error}"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(authorization) = authorization {
        head.push_str(&format!("Authorization: {authorization}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|error| format!("send to {address}: {error}"))?;
    stream
        .write_all(body)
        .await
        .map_err(|error| format!("send to {address}: {error}"))?;
    let mut answer = Vec::new();
    let mut limited = (&mut stream).take(FORWARD_RESPONSE_MAX_BYTES as u64 + 1);
    limited
        .read_to_end(&mut answer)
        .await
        .map_err(|error| format!("read from {address}: {error}"))?;
    if answer.len() > FORWARD_RESPONSE_MAX_BYTES {
        return Err(format!(
            "the answer is over {FORWARD_RESPONSE_MAX_BYTES} bytes"
        ));
    }
    parse_answer(&answer).ok_or_else(|| format!("{address} answered something not HTTP"))
}

/// The status, content type and body of an HTTP/1.1 answer read to its
/// end (the peer closes after it: `Connection: close`).
fn parse_answer(answer: &[u8]) -> Option<Response<Body>> {
    let end = answer.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let code: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
    let mut content_type = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-type") {
            content_type = HeaderValue::from_str(value.trim()).ok();
        }
        if name.eq_ignore_ascii_case("transfer-encoding") && value.trim() != "identity" {
            chunked = true;
        }
    }
    // routerd answers with a length, never chunked; anything else is not
    // a routerd admin endpoint.
    if chunked {
        return None;
    }
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(&answer[end + 4..])));
    *response.status_mut() = StatusCode::from_u16(code).ok()?;
    if let Some(content_type) = content_type {
        response.headers_mut().insert(CONTENT_TYPE, content_type);
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[test]
    fn an_answer_keeps_its_status_type_and_body() {
        let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                       content-length: 3\r\n\r\n{}\n";
        let response = parse_answer(answer).unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        let body = futures_lite::future::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"{}\n");
        assert!(parse_answer(b"garbage").is_none());
        assert!(parse_answer(b"HTTP/1.1 abc\r\n\r\n").is_none());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").is_none());
    }

    /// A peer whose answer is past the bound: refused, not buffered whole.
    #[test]
    fn an_answer_past_its_bound_is_refused() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let peer = tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = [0u8; 1024];
                let _ = stream.read(&mut head).await.unwrap();
                let body = vec![b'x'; FORWARD_RESPONSE_MAX_BYTES];
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                // The head pushes the answer past the bound; the reader
                // may close before all of it is written.
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
            let sent = send(&address, "GET", "/metrics", None, &Bytes::new()).await;
            let error = sent.expect_err("refused");
            assert!(error.contains("over"), "{error}");
            let _ = peer.await;
        });
    }
}
