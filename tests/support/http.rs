//! The tests' HTTP/1.1 client for a node's admin endpoint: one request on a
//! fresh connection (`connection: close`), the whole answer read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a test waits to connect, and then for the whole answer (a
/// drain or a forwarded call answers within this).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// One answer.
pub struct Answer {
    pub status: u16,
    /// The status line and the headers.
    pub head: String,
    pub body: String,
}

impl Answer {
    /// The value of header `name` (any case), if the answer has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Writes `head` and `body` exactly as given (a test of malformed requests
/// writes its own head) and reads the answer.
pub fn exchange(address: SocketAddr, head: &str, body: &[u8]) -> Answer {
    let mut stream =
        TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).expect("admin reachable");
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// `method path` with `headers` (each `name: value`) and `body`.
pub fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> Answer {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    exchange(address, &head, body.as_bytes())
}
