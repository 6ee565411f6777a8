//! Test clients for the gateway's TLS and WebSocket listeners, and test
//! certificates made at test time (no private key lives in the
//! repository). Included by the tests that need it (`#[path]`), not by
//! every test of `support`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use wire::client::{encode_frame, FrameDecoder, FrameKind, Peer};
use wire::websocket::{
    client_request, encode_masked, parse_client_response, Control, Decoder, Opcode, Role,
};

use crate::support::{token, Reply, READ_TIMEOUT};

/// A self-signed certificate for `localhost` and 127.0.0.1, written as
/// PEM files into `dir`.
pub struct TestCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub der: CertificateDer<'static>,
}

pub fn make_cert(dir: &Path, name: &str) -> TestCert {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let certified = rcgen::generate_simple_self_signed(names).expect("test certificate");
    let cert_file = dir.join(format!("{name}.crt"));
    let key_file = dir.join(format!("{name}.key"));
    std::fs::write(&cert_file, certified.cert.pem()).unwrap();
    std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
    TestCert {
        cert_file,
        key_file,
        der: certified.cert.der().clone(),
    }
}

/// A rustls client trusting `cert` alone, offering `alpn`.
pub fn client_config(cert: &CertificateDer<'static>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// Any byte stream a test client speaks over.
pub trait Wire: Read + Write {}
impl<T: Read + Write> Wire for T {}

/// A TLS connection (blocking, rustls over a std socket).
pub fn tls_connect(address: SocketAddr, config: Arc<rustls::ClientConfig>) -> Box<dyn Wire> {
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    Box::new(rustls::StreamOwned::new(conn, stream))
}

pub fn tcp_connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A client of the protocol over any stream (TLS, or plain for tests
/// that send garbage).
pub struct StreamClient {
    pub wire: Box<dyn Wire>,
    decoder: FrameDecoder,
}

impl StreamClient {
    pub fn new(wire: Box<dyn Wire>) -> StreamClient {
        StreamClient {
            wire,
            decoder: FrameDecoder::new(Peer::Server, 1 << 20),
        }
    }

    pub fn send(&mut self, route_id: u32, seq: u32, body: &[u8]) {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        self.wire.write_all(&bytes).expect("write");
    }

    pub fn recv(&mut self) -> Reply {
        loop {
            if let Some(frame) = self.decoder.next_frame().expect("server frame") {
                return Reply {
                    kind: frame.header.kind,
                    route_id: frame.header.route_id,
                    seq: frame.header.seq,
                    body: frame.body.to_vec(),
                };
            }
            let n = self.wire.read(self.decoder.read_buf()).expect("read");
            assert!(n > 0, "closed before a frame");
            self.decoder.advance(n);
        }
    }

    pub fn call(&mut self, route_id: u32, seq: u32, body: &[u8]) -> Reply {
        self.send(route_id, seq, body);
        self.recv()
    }

    pub fn login(&mut self, player_id: u64, seq: u32) {
        let reply = self.call(
            wire::client::route::AUTH_LOGIN,
            seq,
            token(player_id, 3600).as_bytes(),
        );
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        assert_eq!(reply.body, player_id.to_le_bytes());
    }

    /// `player.incr` by 1; the counter after it.
    pub fn incr(&mut self, seq: u32) -> i64 {
        let reply = self.call(wire::client::route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        i64::from_le_bytes(reply.body.try_into().unwrap())
    }
}

/// What a WebSocket client read.
#[derive(Debug, PartialEq, Eq)]
pub enum WsEvent {
    Frame(Reply),
    Pong,
    Close(Option<u16>),
    /// The connection ended without a close frame.
    Ended,
}

/// A WebSocket client of the protocol over any stream.
pub struct WsClient {
    pub wire: Box<dyn Wire>,
    ws: Decoder,
    frames: FrameDecoder,
    controls: Vec<Control>,
    pending: std::collections::VecDeque<WsEvent>,
}

impl WsClient {
    /// Upgrades `wire` with the given extra header lines (each ending in
    /// CRLF); panics unless the server answers 101.
    pub fn upgrade(mut wire: Box<dyn Wire>) -> WsClient {
        let (request, key) = client_request("localhost", [9; 16]);
        wire.write_all(&request).unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        let taken = loop {
            let n = wire.read(&mut buf).expect("read the upgrade answer");
            assert!(n > 0, "closed during the upgrade");
            answer.extend_from_slice(&buf[..n]);
            if let Some(taken) = parse_client_response(&answer, &key).expect("101") {
                break taken;
            }
        };
        let mut client = WsClient {
            wire,
            ws: Decoder::new(Role::Client, 1 << 24),
            frames: FrameDecoder::new(Peer::Server, 1 << 20),
            controls: Vec::new(),
            pending: Default::default(),
        };
        let rest = answer[taken..].to_vec();
        client.feed(&rest);
        client
    }

    /// Sends `payload` as one masked message of `opcode`.
    pub fn send_message(&mut self, opcode: Opcode, payload: &[u8]) {
        let mut out = Vec::new();
        encode_masked(&mut out, opcode, payload, [1, 2, 3, 4]);
        self.wire.write_all(&out).expect("write");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.wire.write_all(bytes).expect("write");
    }

    pub fn call(&mut self, route_id: u32, seq: u32, body: &[u8]) -> Reply {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        self.send_message(Opcode::Binary, &bytes);
        match self.next() {
            WsEvent::Frame(reply) => reply,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    pub fn login(&mut self, player_id: u64, seq: u32) {
        let reply = self.call(
            wire::client::route::AUTH_LOGIN,
            seq,
            token(player_id, 3600).as_bytes(),
        );
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    }

    pub fn incr(&mut self, seq: u32) -> i64 {
        let reply = self.call(wire::client::route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        i64::from_le_bytes(reply.body.try_into().unwrap())
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut data = Vec::new();
        self.controls.clear();
        self.ws
            .decode(bytes, &mut data, &mut self.controls)
            .expect("server framing");
        self.frames.extend(&data);
        while let Some(frame) = self.frames.next_frame().expect("server frame") {
            self.pending.push_back(WsEvent::Frame(Reply {
                kind: frame.header.kind,
                route_id: frame.header.route_id,
                seq: frame.header.seq,
                body: frame.body.to_vec(),
            }));
        }
        for control in self.controls.drain(..) {
            self.pending.push_back(match control {
                Control::Ping(_) | Control::Pong => WsEvent::Pong,
                Control::Close(code) => WsEvent::Close(code),
            });
        }
    }

    /// The next event; panics after `READ_TIMEOUT` with none.
    pub fn next(&mut self) -> WsEvent {
        let mut buf = [0u8; 16384];
        loop {
            if let Some(event) = self.pending.pop_front() {
                return event;
            }
            match self.wire.read(&mut buf) {
                Ok(0) | Err(_) => return WsEvent::Ended,
                Ok(n) => self.feed(&buf[..n]),
            }
        }
    }

    /// Reads until a close frame; returns its code.
    pub fn expect_close(&mut self) -> Option<u16> {
        loop {
            match self.next() {
                WsEvent::Close(code) => return code,
                WsEvent::Ended => panic!("ended without a close frame"),
                _ => {}
            }
        }
    }
}

/// The interpreter with the `websockets` package (`ROUTERD_TEST_PYTHON`),
/// or `None` to skip (outside CI); fails in CI.
pub fn test_python() -> Option<PathBuf> {
    match std::env::var_os("ROUTERD_TEST_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None if std::env::var_os("CI").is_some() => {
            panic!("ROUTERD_TEST_PYTHON is not set: .ci/run makes the venv with `websockets`")
        }
        None => {
            eprintln!("skipped: ROUTERD_TEST_PYTHON is not set (a python with `websockets`)");
            None
        }
    }
}
