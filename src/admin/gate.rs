//! The decision on a request's head, before a byte of its body is read:
//! a client that may not make the call is answered at once, and holds
//! nothing while it sends (or pretends to send) a body.
//!
//! In order: the `Host` (`421`, see [`super::access`]), then for a call
//! that changes something its `Origin` (`403`) and the token (`401`), then
//! a `Content-Length` over the body bound (`413`). Each refusal is counted
//! in `routerd_admin_refused_total{reason}`. What passes is classed: a
//! probe or a scrape takes a slot reserved for them (see [`super::slots`]).

use hyper::header::CONTENT_LENGTH;
use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};

use super::routes::{error_json, Body};
use super::{auth, AdminState, REQUEST_BODY_MAX_BYTES};

/// What a request is, for the slot it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// `GET` or `HEAD` of `/healthz`, `/livez`, `/readyz` or `/metrics`:
    /// answered without its body, from slots nothing else takes.
    Probe,
    /// Everything else.
    Other,
}

/// The class of a request to `path` with `method`.
pub(super) fn class(method: &Method, path: &str) -> Class {
    let reads = method == Method::GET || method == Method::HEAD;
    match path.trim_matches('/') {
        "healthz" | "livez" | "readyz" | "metrics" if reads => Class::Probe,
        _ => Class::Other,
    }
}

/// `Ok` with the request's class when it may go on, or the answer that
/// refuses it (counted).
pub(super) fn decide(state: &AdminState, head: &Parts) -> Result<Class, Box<Response<Body>>> {
    let class = class(&head.method, head.uri.path());
    let admin = &state.metrics.admin;
    // The health probes tell nothing a rebinding page could use, and load
    // balancers send them with all kinds of Host.
    let health = class == Class::Probe && head.uri.path().trim_matches('/') != "metrics";
    if !health {
        if let Err(reason) = state.access.check_host(&head.headers) {
            admin.refused_host.inc();
            return Err(Box::new(error_json(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected",
                &reason,
            )));
        }
    }
    if auth::is_mutating(&head.method) {
        if let Err(reason) = state.access.check_origin(&head.headers) {
            admin.refused_origin.inc();
            return Err(Box::new(error_json(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                &reason,
            )));
        }
        if let Err(reason) = auth::authorize(state.token.as_ref(), &head.headers) {
            admin.unauthorized.inc();
            admin.refused_unauthorized.inc();
            return Err(Box::new(auth::unauthorized(reason)));
        }
    }
    let declared = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > REQUEST_BODY_MAX_BYTES as u64) {
        admin.refused_too_large.inc();
        return Err(Box::new(error_json(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            &format!("a request body is at most {REQUEST_BODY_MAX_BYTES} bytes"),
        )));
    }
    Ok(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_scrapes_are_reads_of_four_paths() {
        for path in ["/healthz", "/livez", "/readyz/", "/metrics"] {
            assert_eq!(class(&Method::GET, path), Class::Probe, "{path}");
            assert_eq!(class(&Method::HEAD, path), Class::Probe, "{path}");
            assert_eq!(class(&Method::POST, path), Class::Other, "{path}");
        }
        for path in ["/cluster", "/drain", "/nodes/2/metrics", "/healthz/x"] {
            assert_eq!(class(&Method::GET, path), Class::Other, "{path}");
        }
    }
}
