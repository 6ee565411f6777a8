//! The opening handshake (RFC 6455 section 4): the server's check of an
//! upgrade request and its answer, and the client's request and its check
//! of the answer.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use sha1::{Digest, Sha1};

/// The longest upgrade request read (request line and headers): a peer
/// that sends more without ending its headers is answered 431.
pub const UPGRADE_REQUEST_MAX_BYTES: usize = 8192;
/// RFC 6455 section 1.3's GUID, appended to the client's key.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The subprotocol a client may ask for; echoed if it does.
pub const SUBPROTOCOL: &str = "routerd";

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(ACCEPT_GUID.as_bytes());
    BASE64.encode(sha.finalize())
}

/// An accepted upgrade: the 101 answer to send, and how many bytes of the
/// input the request took (what follows is already WebSocket frames).
#[derive(Debug, PartialEq, Eq)]
pub struct Upgrade {
    /// The `101 Switching Protocols` answer, bytes to write as they are.
    pub response: Vec<u8>,
    /// Bytes of the input the request line and headers took.
    pub consumed: usize,
}

/// A refused upgrade: the HTTP status and the answer to send before
/// closing.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status: 400 (not a well-formed version 13 upgrade), 403 (an
    /// `Origin` not allowed), 404 (a path other than `/`) or 431 (headers
    /// over [`UPGRADE_REQUEST_MAX_BYTES`]).
    pub status: u16,
    /// The whole HTTP answer with that status, bytes to write as they are.
    pub response: Vec<u8>,
}

/// Checks an upgrade request at the start of `input` against the rules
/// and `origins` (empty: any origin). `Ok(None)`: the headers have not
/// ended yet (read more).
pub fn parse_request(input: &[u8], origins: &[String]) -> Result<Option<Upgrade>, Refusal> {
    // HTTP/1.1 lines end in CRLF; a bare LF would otherwise leave the
    // request waiting for a blank line that never comes.
    let end = find_headers_end(input);
    if has_bare_lf(&input[..end.unwrap_or(input.len())]) {
        return Err(refuse(400, "line ends must be CRLF"));
    }
    let Some(end) = end else {
        if input.len() >= UPGRADE_REQUEST_MAX_BYTES {
            return Err(refuse(431, "upgrade request headers too long"));
        }
        return Ok(None);
    };
    if end > UPGRADE_REQUEST_MAX_BYTES {
        return Err(refuse(431, "upgrade request headers too long"));
    }
    let Ok(head) = std::str::from_utf8(&input[..end]) else {
        return Err(refuse(400, "upgrade request is not UTF-8"));
    };
    let mut lines = head.split("\r\n");
    check_request_line(lines.next().unwrap_or_default())?;
    let mut headers = Headers::default();
    for line in lines.filter(|line| !line.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(refuse(400, "malformed header line"));
        };
        headers.note(name.trim(), value.trim())?;
    }
    if !headers.upgrade_websocket {
        return Err(refuse(400, "missing Upgrade: websocket"));
    }
    if !headers.connection_upgrade {
        return Err(refuse(400, "missing Connection: Upgrade"));
    }
    if headers.version.as_deref() != Some("13") {
        return Err(refuse(400, "Sec-WebSocket-Version must be 13"));
    }
    let key = match headers.key {
        Some(key) if BASE64.decode(&key).is_ok_and(|raw| raw.len() == 16) => key,
        _ => return Err(refuse(400, "missing or malformed Sec-WebSocket-Key")),
    };
    if !origins.is_empty() {
        let allowed = headers
            .origin
            .as_deref()
            .is_some_and(|origin| origins.iter().any(|o| o.eq_ignore_ascii_case(origin)));
        if !allowed {
            return Err(refuse(403, "origin not allowed"));
        }
    }
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        accept_key(&key)
    );
    if headers.wants_subprotocol {
        response.push_str("Sec-WebSocket-Protocol: routerd\r\n");
    }
    response.push_str("\r\n");
    Ok(Some(Upgrade {
        response: response.into_bytes(),
        consumed: end,
    }))
}

/// The request line: `GET / HTTP/1.1` (a query string allowed).
fn check_request_line(request_line: &str) -> Result<(), Refusal> {
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    if method != Some("GET") || version != Some("HTTP/1.1") || parts.next().is_some() {
        return Err(refuse(400, "expected GET / HTTP/1.1"));
    }
    let path = target.unwrap_or_default();
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    if path != "/" {
        return Err(refuse(404, "the WebSocket endpoint is /"));
    }
    Ok(())
}

#[derive(Default)]
struct Headers {
    upgrade_websocket: bool,
    connection_upgrade: bool,
    version: Option<String>,
    key: Option<String>,
    origin: Option<String>,
    wants_subprotocol: bool,
}

impl Headers {
    fn note(&mut self, name: &str, value: &str) -> Result<(), Refusal> {
        let has_token = |token: &str| {
            value
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        };
        if name.eq_ignore_ascii_case("upgrade") {
            self.upgrade_websocket |= has_token("websocket");
        } else if name.eq_ignore_ascii_case("connection") {
            self.connection_upgrade |= has_token("upgrade");
        } else if name.eq_ignore_ascii_case("sec-websocket-version") {
            self.version = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("sec-websocket-key") {
            // One key, one accept: a second is not a list (RFC 6455
            // section 11.3.1: the header must not appear more than once).
            if self.key.is_some() {
                return Err(refuse(400, "more than one Sec-WebSocket-Key"));
            }
            self.key = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("origin") {
            self.origin = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
            self.wants_subprotocol |= has_token(SUBPROTOCOL);
        }
        Ok(())
    }
}

/// Whether a line of `head` ends in a LF without its CR.
fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(at, &byte)| byte == b'\n' && (at == 0 || head[at - 1] != b'\r'))
}

/// Where the headers end (just past the blank line), if they have.
fn find_headers_end(input: &[u8]) -> Option<usize> {
    input
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
}

fn refuse(status: u16, reason: &str) -> Refusal {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Request Header Fields Too Large",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason.len() + 1
    );
    if status == 400 {
        response.push_str("Sec-WebSocket-Version: 13\r\n");
    }
    response.push_str("\r\n");
    response.push_str(reason);
    response.push('\n');
    Refusal {
        status,
        response: response.into_bytes(),
    }
}

/// The client's upgrade request for `host` with the 16 random bytes of
/// its key; returns the request and the key (base64) to check the answer
/// with.
pub fn client_request(host: &str, key_bytes: [u8; 16]) -> (Vec<u8>, String) {
    let key = BASE64.encode(key_bytes);
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    (request.into_bytes(), key)
}

/// Why a server's answer to an upgrade is not a valid 101.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeRequestError {
    /// The status line was not `HTTP/1.1 101` (carried here, as sent).
    #[error("the server answered the upgrade with: {0}")]
    Refused(String),
    /// No `Sec-WebSocket-Accept` header matched the key the request sent.
    #[error("the server's Sec-WebSocket-Accept does not match the key")]
    BadAccept,
    /// The answer's headers did not end within
    /// [`UPGRADE_REQUEST_MAX_BYTES`].
    #[error("the server's answer to the upgrade is over {UPGRADE_REQUEST_MAX_BYTES} bytes")]
    TooLong,
}

/// Checks the server's answer at the start of `input` for a request made
/// with `key`: how many bytes it took once whole, `Ok(None)` before.
pub fn parse_client_response(
    input: &[u8],
    key: &str,
) -> Result<Option<usize>, UpgradeRequestError> {
    let Some(end) = find_headers_end(input) else {
        if input.len() >= UPGRADE_REQUEST_MAX_BYTES {
            return Err(UpgradeRequestError::TooLong);
        }
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&input[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 101") {
        return Err(UpgradeRequestError::Refused(status.to_owned()));
    }
    let expected = accept_key(key);
    let accepted = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("sec-websocket-accept") && value.trim() == expected
        })
    });
    if !accepted {
        return Err(UpgradeRequestError::BadAccept);
    }
    Ok(Some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn request(extra: &str) -> String {
        format!(
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    }

    #[test]
    fn accept_key_is_rfc_6455s_example() {
        assert_eq!(accept_key(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn a_valid_request_is_answered_101_and_what_follows_is_left() {
        let mut input = request("").into_bytes();
        let len = input.len();
        input.extend_from_slice(b"\x82\x80");
        let upgrade = parse_request(&input, &[]).unwrap().unwrap();
        assert_eq!(upgrade.consumed, len);
        let text = String::from_utf8(upgrade.response).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 "));
        assert!(text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(!text.contains("Sec-WebSocket-Protocol"));
    }

    #[test]
    fn a_request_cut_anywhere_waits_for_the_rest() {
        let input = request("").into_bytes();
        for cut in 0..input.len() {
            assert_eq!(parse_request(&input[..cut], &[]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn the_routerd_subprotocol_is_echoed() {
        let input = request("Sec-WebSocket-Protocol: chat, routerd\r\n");
        let upgrade = parse_request(input.as_bytes(), &[]).unwrap().unwrap();
        let text = String::from_utf8(upgrade.response).unwrap();
        assert!(text.contains("Sec-WebSocket-Protocol: routerd\r\n"));
    }

    #[test]
    fn missing_headers_are_400() {
        let cases = [
            request("").replace("Upgrade: websocket\r\n", ""),
            request("").replace("keep-alive, Upgrade", "keep-alive"),
            request("").replace("Version: 13", "Version: 8"),
            request("").replace(KEY, "c2hvcnQ="),
            request("").replace(&format!("Sec-WebSocket-Key: {KEY}\r\n"), ""),
            request("").replace("GET", "POST"),
            request("").replace("HTTP/1.1", "HTTP/1.0"),
        ];
        for case in cases {
            let refusal = parse_request(case.as_bytes(), &[]).unwrap_err();
            assert_eq!(refusal.status, 400, "{case}");
            assert!(String::from_utf8(refusal.response)
                .unwrap()
                .starts_with("HTTP/1.1 400 Bad Request\r\n"));
        }
    }

    #[test]
    fn another_path_is_404_and_a_query_is_ignored() {
        let other = request("").replace("GET / ", "GET /chat ");
        assert_eq!(
            parse_request(other.as_bytes(), &[]).unwrap_err().status,
            404
        );
        let query = request("").replace("GET / ", "GET /?v=1 ");
        assert!(parse_request(query.as_bytes(), &[]).unwrap().is_some());
    }

    #[test]
    fn origins_are_checked_only_when_listed() {
        let allowed = vec!["https://game.example".to_owned()];
        let good = request("Origin: https://GAME.example\r\n");
        assert!(parse_request(good.as_bytes(), &allowed).unwrap().is_some());
        let bad = request("Origin: https://evil.example\r\n");
        assert_eq!(
            parse_request(bad.as_bytes(), &allowed).unwrap_err().status,
            403
        );
        let none = request("");
        assert_eq!(
            parse_request(none.as_bytes(), &allowed).unwrap_err().status,
            403
        );
        assert!(parse_request(bad.as_bytes(), &[]).unwrap().is_some());
    }

    #[test]
    fn a_second_key_is_400() {
        let twice = request("Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n");
        let refusal = parse_request(twice.as_bytes(), &[]).unwrap_err();
        assert_eq!(refusal.status, 400);
        assert!(String::from_utf8(refusal.response)
            .unwrap()
            .ends_with("more than one Sec-WebSocket-Key\n"));
    }

    #[test]
    fn bare_lf_line_ends_are_400_at_once() {
        // Refused on the first bare LF, before the head could end.
        let bare = request("").replace("\r\n", "\n");
        let first_line = bare.find('\n').unwrap() + 1;
        for cut in [first_line, bare.len()] {
            let refusal = parse_request(&bare.as_bytes()[..cut], &[]).unwrap_err();
            assert_eq!(refusal.status, 400, "cut at {cut}");
        }
        let one = request("").replacen("Host: x\r\n", "Host: x\n", 1);
        assert_eq!(parse_request(one.as_bytes(), &[]).unwrap_err().status, 400);
    }

    #[test]
    fn endless_headers_are_431() {
        let mut input = b"GET / HTTP/1.1\r\n".to_vec();
        input.resize(UPGRADE_REQUEST_MAX_BYTES, b'a');
        assert_eq!(parse_request(&input, &[]).unwrap_err().status, 431);
    }

    #[test]
    fn the_client_checks_the_servers_answer() {
        let (request, key) = client_request("localhost", [7; 16]);
        let upgrade = parse_request(&request, &[]).unwrap().unwrap();
        let mut answer = upgrade.response.clone();
        answer.extend_from_slice(b"rest");
        assert_eq!(
            parse_client_response(&answer, &key),
            Ok(Some(upgrade.response.len()))
        );
        assert_eq!(
            parse_client_response(&upgrade.response, KEY),
            Err(UpgradeRequestError::BadAccept)
        );
        let refusal = parse_request(b"GET /x HTTP/1.1\r\n\r\n", &[]).unwrap_err();
        assert!(matches!(
            parse_client_response(&refusal.response, &key),
            Err(UpgradeRequestError::Refused(_))
        ));
    }
}
