//! A client of the admin endpoint: one HTTP/1.1 request per connection,
//! as the endpoint serves them (`connection: close`), blocking and bounded
//! in time and size. The CLI's `cluster status`, `transfer` and `drain` use
//! it, and a node forwards a transfer to the object's owner with it (on a
//! blocking thread of the admin runtime).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The largest answer read, head and body: the endpoint's answers are a
/// few KiB (`/metrics` of a many-core node tens of KiB).
pub const RESPONSE_MAX_BYTES: usize = 4 << 20;

/// Why a call got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0} does not resolve to an address")]
    Resolve(String),
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("no answer from {address} within {timeout:?}")]
    Timeout { address: String, timeout: Duration },
    #[error("reading the answer of {address}: {source}")]
    Io {
        address: String,
        source: std::io::Error,
    },
    #[error("{address} answered something that is not HTTP/1.1")]
    Malformed { address: String },
    #[error("{address} answered more than {RESPONSE_MAX_BYTES} bytes")]
    TooLarge { address: String },
}

impl CallError {
    /// Whether the request may have reached the endpoint and been acted
    /// on: the call failed after it was sent (no answer in time, the
    /// connection lost, an answer that could not be read). A call that
    /// never connected was not.
    pub fn may_have_arrived(&self) -> bool {
        match self {
            CallError::Resolve(_) | CallError::Connect { .. } => false,
            CallError::Timeout { .. }
            | CallError::Io { .. }
            | CallError::Malformed { .. }
            | CallError::TooLarge { .. } => true,
        }
    }
}

/// An HTTP answer: the status and the body as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }
}

/// `method path` on the admin endpoint at `address` (`host:port`), the
/// whole call within `timeout`; with `token`, as `Authorization: Bearer`
/// (what a mutating call needs when the endpoint has `admin.token`).
pub fn call(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Answer, CallError> {
    let deadline = Instant::now() + timeout;
    let socket = resolve(address)?;
    // Not connected in time is not a `Timeout`: nothing was sent.
    let mut stream =
        TcpStream::connect_timeout(&socket, timeout).map_err(|source| CallError::Connect {
            address: address.to_string(),
            source,
        })?;
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::Timeout {
            address: address.to_string(),
            timeout,
        },
        _ => CallError::Io {
            address: address.to_string(),
            source,
        },
    };
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\n{authorization}content-length: 0\r\n\
         connection: close\r\n\r\n"
    );
    stream
        .set_write_timeout(Some(remaining(deadline)))
        .map_err(io)?;
    stream.write_all(head.as_bytes()).map_err(io)?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        stream
            .set_read_timeout(Some(remaining(deadline)))
            .map_err(io)?;
        let n = stream.read(&mut chunk).map_err(io)?;
        if n == 0 {
            break;
        }
        if response.len() + n > RESPONSE_MAX_BYTES {
            return Err(CallError::TooLarge {
                address: address.to_string(),
            });
        }
        response.extend_from_slice(&chunk[..n]);
    }
    parse(&response).ok_or_else(|| CallError::Malformed {
        address: address.to_string(),
    })
}

/// What is left of the call's time; never zero (a zero timeout means
/// "none" to the socket calls).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn resolve(address: &str) -> Result<SocketAddr, CallError> {
    if let Ok(socket) = address.parse() {
        return Ok(socket);
    }
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut found| found.next())
        .ok_or_else(|| CallError::Resolve(address.to_string()))
}

/// Splits a whole `connection: close` response into status and body. The
/// endpoint answers with a content length; a chunked body is not expected.
fn parse(response: &[u8]) -> Option<Answer> {
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&response[..split]).ok()?;
    let status_line = head.lines().next()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status = parts.next()?.parse().ok()?;
    let body = String::from_utf8_lossy(&response[split + 4..]).into_owned();
    Some(Answer { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_response_is_split_into_status_and_body() {
        let answer = parse(b"HTTP/1.1 409 Conflict\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!(answer.status, 409);
        assert_eq!(answer.body, "{}");
        assert!(parse(b"SSH-2.0 hello\r\n\r\n").is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_none());
    }

    #[test]
    fn a_silent_server_times_out_and_a_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let started = Instant::now();
        let error = call(&address, "GET", "/", None, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(error, CallError::Timeout { .. }), "{error}");
        assert!(error.may_have_arrived(), "sent, then no answer");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
        let error = call(&address, "GET", "/", None, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(error, CallError::Connect { .. }), "{error}");
        assert!(!error.may_have_arrived(), "never sent");
        assert!(matches!(
            call("no-port-given", "GET", "/", None, Duration::from_secs(1)),
            Err(CallError::Resolve(_))
        ));
    }
}
