//! `/console/`: the operator's web console, static files compiled into the
//! binary (plain ES modules and CSS, no build step), served with their
//! content types. The page reads only the admin API of the node serving
//! it, which forwards to the other members (`/nodes/{id}/...`).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use super::routes::{error_json, text, Body};

/// Each file: its name under `/console/`, content type and bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("console/console.js"),
    ),
    (
        "metrics.js",
        "text/javascript; charset=utf-8",
        include_str!("console/metrics.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("console/charts.js"),
    ),
    (
        "panels.js",
        "text/javascript; charset=utf-8",
        include_str!("console/panels.js"),
    ),
    (
        "sessions.js",
        "text/javascript; charset=utf-8",
        include_str!("console/sessions.js"),
    ),
    (
        "rooms.js",
        "text/javascript; charset=utf-8",
        include_str!("console/rooms.js"),
    ),
    (
        "types.js",
        "text/javascript; charset=utf-8",
        include_str!("console/types.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
];

/// The file at `/console/{name}`.
pub(super) fn file(name: &str) -> Response<Body> {
    let Some((_, content_type, body)) = FILES.iter().find(|(file, _, _)| *file == name) else {
        return error_json(StatusCode::NOT_FOUND, "not_found", "no such console file");
    };
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The files change with the binary only; a node restarted on a new
    // build must not serve its predecessor's page from a browser cache.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `/console` without its slash: the page's relative module paths need it.
pub(super) fn redirect() -> Response<Body> {
    let mut response = text(StatusCode::MOVED_PERMANENTLY, "moved to /console/\n");
    response.headers_mut().insert(
        hyper::header::LOCATION,
        HeaderValue::from_static("/console/"),
    );
    response
}
