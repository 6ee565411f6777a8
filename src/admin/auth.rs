//! The admin token: every call that changes something presents it as
//! `Authorization: Bearer <token>` when `admin.token` is set.
//!
//! Which calls: every method but `GET` and `HEAD`. The rule is by method,
//! not by a list of paths, so an endpoint a later change adds is guarded
//! the day it is added; reads (`/healthz`, `/livez`, `/readyz`,
//! `/metrics`, `/cluster`, `/objects/..`, `GET /drain`) stay open, as probes
//! and scrapers carry no credentials.

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::{Method, Response, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::routes::{json_status, Body};
use crate::config::Secret;

/// Whether a call with `method` must present the token.
pub(super) fn is_mutating(method: &Method) -> bool {
    method != Method::GET && method != Method::HEAD
}

/// `Ok` when no token is configured or `headers` carry the right one;
/// otherwise what was wrong, for [`unauthorized`].
pub(super) fn authorize(token: Option<&Secret>, headers: &HeaderMap) -> Result<(), &'static str> {
    let Some(token) = token else {
        return Ok(());
    };
    match headers.get(AUTHORIZATION).map(HeaderValue::to_str) {
        None => Err("this call needs Authorization: Bearer <admin.token>"),
        Some(Err(_)) => Err("the Authorization header is not text"),
        Some(Ok(value)) => match bearer_credentials(value) {
            None => Err("the Authorization header must be: Bearer <admin.token>"),
            Some(given) if same_secret(given.as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err("wrong admin token"),
        },
    }
}

/// The credentials of `Authorization: Bearer <credentials>`; the scheme's
/// name in any case (RFC 7235 section 2.1: schemes are case-insensitive).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// The 401 a refused call gets: JSON saying why, and the scheme to use.
pub(super) fn unauthorized(reason: &'static str) -> Response<Body> {
    let mut response = json_status(
        StatusCode::UNAUTHORIZED,
        json!({ "error": "unauthorized", "reason": reason }),
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Compares two secrets in time that depends on neither: both are hashed
/// first, so the comparison runs over 32 bytes whatever their lengths, and
/// every byte is looked at (no early exit that a caller could time to
/// guess the token a byte at a time).
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let given = Sha256::digest(given);
    let expected = Sha256::digest(expected);
    let difference = given
        .iter()
        .zip(expected.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    // `black_box`: the compiler may not turn the fold into an early exit.
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn the_token_is_checked_only_when_configured() {
        let token = Secret::new("t0ken");
        assert!(authorize(None, &HeaderMap::new()).is_ok());
        for right in [
            "Bearer t0ken",
            "bearer t0ken",
            "BEARER  t0ken ",
            "bEaReR\tt0ken",
        ] {
            assert!(authorize(Some(&token), &headers(right)).is_ok(), "{right}");
        }
        for wrong in [
            HeaderMap::new(),
            headers("Bearer t0ke"),
            headers("Bearer t0ken2"),
            headers("Basic t0ken"),
            headers("t0ken"),
            headers("Bearert0ken"),
            headers("Bearer"),
        ] {
            let refused = unauthorized(authorize(Some(&token), &wrong).unwrap_err());
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(refused.headers()[WWW_AUTHENTICATE], "Bearer");
        }
    }

    /// The config takes exactly the tokens a call can present: one that
    /// passes `check_secrets` authenticates with its header, and one a
    /// header cannot carry back whole is refused when the node starts
    /// rather than answering every call 401.
    #[test]
    fn a_token_the_config_accepts_is_one_a_call_can_present() {
        for value in [
            "t0ken",
            "a b",
            "~!@#",
            " lead",
            "trail ",
            "tab\tin",
            "tab\t",
            "caf\u{e9}",
            "nul\u{0}",
            "cr\r",
            "del\x7f",
        ] {
            let mut config = crate::config::Config::default();
            let token = Secret::new(value);
            config.admin.token = Some(token.clone());
            let accepted = config.check_secrets().is_ok();
            let mut presented = HeaderMap::new();
            let header = HeaderValue::from_bytes(format!("Bearer {value}").as_bytes());
            if let Ok(header) = header {
                presented.insert(AUTHORIZATION, header);
            }
            let authenticates = authorize(Some(&token), &presented).is_ok();
            assert_eq!(accepted, authenticates, "{value:?}");
        }
    }

    #[test]
    fn reads_are_open_and_everything_else_mutates() {
        assert!(!is_mutating(&Method::GET));
        assert!(!is_mutating(&Method::HEAD));
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(is_mutating(&method), "{method}");
        }
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"", b"abc"));
    }
}
