//! A blocking client of the client protocol (docs/protocol.md) on one TCP
//! connection, for tests: connect, send a REQUEST, read the next frame,
//! log in with a token minted from the gateway's secret. The integration
//! tests and the guild example's tests both drive nodes through it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wire::client::{decode_error_body, encode_frame, FrameDecoder, FrameKind, Peer};

/// The largest frame body the client decodes: more than any test is sent.
const BODY_BYTES_MAX: u32 = 1 << 20;

/// One frame from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// RESPONSE, ERROR or PUSH.
    pub kind: FrameKind,
    /// The route the frame answers or pushes on.
    pub route_id: u32,
    /// The seq of the request it answers (0 for most pushes).
    pub seq: u32,
    /// The frame's body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The ERROR code, or panics if this is not an ERROR.
    pub fn error_code(&self) -> u16 {
        assert_eq!(self.kind, FrameKind::Error, "{self:?}");
        decode_error_body(&self.body).expect("error body").0
    }

    /// The ERROR reason, or panics if this is not an ERROR.
    pub fn error_reason(&self) -> String {
        assert_eq!(self.kind, FrameKind::Error, "{self:?}");
        decode_error_body(&self.body)
            .expect("error body")
            .1
            .to_string()
    }

    /// The RESPONSE body, or panics if this is not a RESPONSE.
    pub fn ok(self) -> Vec<u8> {
        assert_eq!(self.kind, FrameKind::Response, "{self:?}");
        self.body
    }
}

/// A token for `player_id` signed with `secret`, valid for `ttl_secs`
/// from now (wall-clock seconds, as the gateway checks it).
pub fn token(secret: &[u8], player_id: u64, ttl_secs: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    wire::token::mint(secret, player_id, now + ttl_secs)
}

/// A blocking client on one connection; frames come in the order the
/// server sent them.
pub struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
    /// How long a read waits for a frame before the test fails.
    read_timeout: Duration,
}

impl Client {
    /// Connects to a gateway; a read waits at most `read_timeout`.
    pub fn connect(address: SocketAddr, read_timeout: Duration) -> Client {
        let stream = TcpStream::connect(address).expect("connect");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
            .set_read_timeout(Some(read_timeout))
            .expect("read timeout");
        Client {
            stream,
            decoder: FrameDecoder::new(Peer::Server, BODY_BYTES_MAX),
            read_timeout,
        }
    }

    /// Sends one REQUEST.
    pub fn send(&mut self, route_id: u32, seq: u32, body: &[u8]) {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        self.stream.write_all(&bytes).expect("write");
    }

    /// Writes `bytes` as they are (a malformed frame, a frame cut short).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// The next frame; panics on timeout or end of stream.
    pub fn recv(&mut self) -> Reply {
        self.try_recv().expect("connection closed before a frame")
    }

    /// The next frame, or `None` at end of stream (or reset); panics on
    /// timeout.
    pub fn try_recv(&mut self) -> Option<Reply> {
        loop {
            if let Some(frame) = self.decoder.next_frame().expect("server frame") {
                return Some(Reply {
                    kind: frame.header.kind,
                    route_id: frame.header.route_id,
                    seq: frame.header.seq,
                    body: frame.body.to_vec(),
                });
            }
            match self.stream.read(self.decoder.read_buf()) {
                Ok(0) => return None,
                Ok(n) => self.decoder.advance(n),
                Err(error)
                    if error.kind() == std::io::ErrorKind::WouldBlock
                        || error.kind() == std::io::ErrorKind::TimedOut =>
                {
                    panic!("no frame within {:?}", self.read_timeout)
                }
                Err(_) => return None,
            }
        }
    }

    /// Sends one request and returns the next frame.
    pub fn call(&mut self, route_id: u32, seq: u32, body: &[u8]) -> Reply {
        self.send(route_id, seq, body);
        self.recv()
    }

    /// Logs in as `player_id` with a token signed with `secret`, by the
    /// request `seq`; asserts the gateway answers with the player id.
    pub fn login(&mut self, secret: &[u8], player_id: u64, seq: u32) {
        let token = token(secret, player_id, 3600);
        let reply = self.call(wire::client::route::AUTH_LOGIN, seq, token.as_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        assert_eq!(reply.body, player_id.to_le_bytes());
    }

    /// Asserts the server closes the connection (end of stream) within
    /// the read timeout.
    pub fn expect_closed(&mut self) {
        if let Some(reply) = self.try_recv() {
            panic!("expected close, got {reply:?}");
        }
    }

    /// Asserts the server closes the connection within `limit`.
    pub fn expect_closed_within(&mut self, limit: Duration) {
        self.stream.set_read_timeout(Some(limit)).expect("timeout");
        self.expect_closed();
        self.stream
            .set_read_timeout(Some(self.read_timeout))
            .expect("timeout");
    }

    /// Shuts the connection down both ways.
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
