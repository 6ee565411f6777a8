//! What authenticating a link's records costs, the measurement behind
//! the links' record format (docs/cluster.md, "Why AES-128-GCM records"):
//! the shipped records (`routerd::cluster::codec`'s `Sealer` and
//! `LinkDecoder`: AES-128-GCM, keyed from the link's handshake), link
//! version 2's records (the same layout under a truncated HMAC-SHA256, the
//! body in the clear), TLS 1.3 records (rustls, an in-memory client and
//! server, AES-128-GCM and ChaCha20-Poly1305), and the same frames with no
//! authentication at all (the framing alone), all in one run, on the same
//! frames, one record shape at a time.
//!
//! A "record" here is what one link send carries: the frames that queued
//! in one loop turn. The link's formats seal it as one record; TLS writes
//! it as one `write` (rustls cuts records of 16 KiB). Each path builds the
//! record from the same encoded frames and opens it back to validated
//! frames (`FrameBuf::from_network`, as the link's reader does), so the
//! differences are the authentication's.
//!
//! `link_records [FRAMES_PER_RECORD [FRAME_BYTES [MILLISECONDS]]]`: the
//! shape to measure (defaults: the shape `bench/cross_node.sh` makes; it
//! prints it) plus, for the record, one frame alone and a full 256 KiB
//! record; MILLISECONDS of each path per shape (default 1000). Prints ns
//! per record and per frame, each path's ratio to the shipped one, and
//! what its authentication adds to the framing alone. Timing figures want
//! a quiet machine.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use routerd::cluster::codec::{LinkDecoder, LinkFrame, Sealer, RECORD_BODY_MAX_BYTES};
use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConnection, ServerConnection, SupportedCipherSuite};
use sha2::Sha256;
use wire::frame::{FrameBuf, Message};

/// Frames per record and bytes per frame under `bench/cross_node.sh`'s
/// load (32 connections x pipeline 16 of `player.incr` through the
/// non-owner: 176 frames a record from the non-owner, 227 back, 128 bytes
/// a frame), from `routerd_cluster_link_records_sent_total`,
/// `..._frames_sent_total` and `..._record_bytes_sent_total`, which the
/// script prints after its rounds.
const DEFAULT_FRAMES_PER_RECORD: usize = 200;
const DEFAULT_FRAME_BYTES: usize = 128;
/// The link's frame head: kind u8, length u32.
const FRAME_HEAD_LEN: usize = 5;
const KEY: &[u8] = b"one direction's key of one link, 32 bytes";
/// Bytes of either record's tag.
const TAG_LEN: usize = 16;

/// One way of carrying records from a writer to a reader.
trait Path {
    fn name(&self) -> &'static str;
    /// Writes `frames` as one record into the path, reads them back, and
    /// returns how many validated frames came out.
    fn round(&mut self, frames: &[FrameBuf]) -> usize;
}

/// The shipped format: `Sealer` then `LinkDecoder`.
struct Shipped {
    sealer: Sealer,
    decoder: LinkDecoder,
    wire: Vec<u8>,
}

impl Path for Shipped {
    fn name(&self) -> &'static str {
        "aes-128-gcm record (shipped)"
    }

    fn round(&mut self, frames: &[FrameBuf]) -> usize {
        self.wire.clear();
        for frame in frames {
            self.sealer.message(&mut self.wire, frame);
        }
        self.sealer.seal(&mut self.wire);
        self.decoder.extend(&self.wire);
        let mut opened = 0;
        while let Some(frame) = self.decoder.next_frame().expect("authentic") {
            if matches!(frame, LinkFrame::Message(_)) {
                opened += 1;
            }
        }
        opened
    }
}

/// Link version 2's record: the same layout sealed with a truncated
/// HMAC-SHA256 over the record number, head and body, the body in the
/// clear (the format before the choice this binary measured; kept here
/// to compare against).
struct HmacRecord {
    key: Hmac<Sha256>,
    seq_sealed: u64,
    seq_opened: u64,
    wire: Vec<u8>,
}

impl HmacRecord {
    fn new() -> HmacRecord {
        HmacRecord {
            key: Hmac::new_from_slice(KEY).expect("any key length"),
            seq_sealed: 0,
            seq_opened: 0,
            wire: Vec::new(),
        }
    }

    fn mac(&self, seq: u64, record: &[u8]) -> [u8; 32] {
        let mut mac = self.key.clone();
        mac.update(&seq.to_le_bytes());
        mac.update(record);
        mac.finalize().into_bytes().into()
    }
}

impl Path for HmacRecord {
    fn name(&self) -> &'static str {
        "hmac-sha256 record (v2)"
    }

    fn round(&mut self, frames: &[FrameBuf]) -> usize {
        self.wire.clear();
        self.wire.push(4);
        self.wire.extend_from_slice(&[0; 4]);
        frame_body(&mut self.wire, frames);
        let body_len = (self.wire.len() - FRAME_HEAD_LEN) as u32;
        self.wire[1..FRAME_HEAD_LEN].copy_from_slice(&body_len.to_le_bytes());
        let tag = self.mac(self.seq_sealed, &self.wire);
        self.seq_sealed += 1;
        self.wire.extend_from_slice(&tag[..TAG_LEN]);
        let record_len = self.wire.len() - TAG_LEN;
        let mut check = self.key.clone();
        check.update(&self.seq_opened.to_le_bytes());
        check.update(&self.wire[..record_len]);
        check
            .verify_truncated_left(&self.wire[record_len..])
            .expect("authentic");
        self.seq_opened += 1;
        open_body(&self.wire[FRAME_HEAD_LEN..record_len])
    }
}

/// The link's framing with no seal: what each authentication adds to.
struct Plain {
    wire: Vec<u8>,
}

impl Path for Plain {
    fn name(&self) -> &'static str {
        "none (framing only)"
    }

    fn round(&mut self, frames: &[FrameBuf]) -> usize {
        self.wire.clear();
        frame_body(&mut self.wire, frames);
        open_body(&self.wire)
    }
}

/// Moves what `$from` has to write into `$to` (a client and a server are
/// different types with the same methods).
macro_rules! pass {
    ($from:expr, $to:expr) => {{
        let mut bytes = Vec::new();
        while $from.wants_write() {
            $from.write_tls(&mut bytes).expect("into memory");
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            $to.read_tls(&mut rest).expect("from memory");
            $to.process_new_packets().expect("a good peer");
        }
    }};
}

/// TLS 1.3 with one cipher suite, a handshake done once up front.
struct Tls {
    name: &'static str,
    client: ClientConnection,
    server: ServerConnection,
    body: Vec<u8>,
    wire: Vec<u8>,
    opened: Vec<u8>,
}

impl Tls {
    fn new(name: &'static str, suite: SupportedCipherSuite) -> Tls {
        let provider = Arc::new(CryptoProvider {
            cipher_suites: vec![suite],
            ..default_provider()
        });
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("a cert");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("the cert");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certified.cert.der().clone()).expect("a root");
        let client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut client = ClientConnection::new(
            Arc::new(client_config),
            "localhost".try_into().expect("a name"),
        )
        .expect("a client");
        let mut server = ServerConnection::new(Arc::new(server_config)).expect("a server");
        // A link sends up to a record body of 256 KiB at once.
        client.set_buffer_limit(None);
        while client.is_handshaking() || server.is_handshaking() {
            pass!(client, server);
            pass!(server, client);
        }
        Tls {
            name,
            client,
            server,
            body: Vec::new(),
            wire: Vec::new(),
            opened: Vec::new(),
        }
    }
}

impl Path for Tls {
    fn name(&self) -> &'static str {
        self.name
    }

    fn round(&mut self, frames: &[FrameBuf]) -> usize {
        self.body.clear();
        frame_body(&mut self.body, frames);
        self.client
            .writer()
            .write_all(&self.body)
            .expect("buffered");
        self.wire.clear();
        while self.client.wants_write() {
            self.client.write_tls(&mut self.wire).expect("into memory");
        }
        // The reader takes the records a chunk at a time, as a socket
        // gives them, and empties the plaintext as it goes (rustls bounds
        // what it holds unread).
        self.opened.clear();
        let mut rest = &self.wire[..];
        let mut chunk = [0u8; 16 * 1024];
        while !rest.is_empty() {
            self.server.read_tls(&mut rest).expect("from memory");
            self.server.process_new_packets().expect("authentic");
            loop {
                match self.server.reader().read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => self.opened.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("reading plaintext: {e}"),
                }
            }
        }
        assert_eq!(
            self.opened.len(),
            self.body.len(),
            "every byte came through"
        );
        open_body(&self.opened)
    }
}

/// The link's frames as a record body: kind 1, length, the frame's bytes.
fn frame_body(out: &mut Vec<u8>, frames: &[FrameBuf]) {
    for frame in frames {
        let bytes = frame.as_bytes();
        out.push(1);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
}

/// Validates every frame of a body, as the link's reader does.
fn open_body(mut body: &[u8]) -> usize {
    let mut opened = 0;
    while !body.is_empty() {
        let len = u32::from_le_bytes(body[1..FRAME_HEAD_LEN].try_into().expect("4 bytes")) as usize;
        let payload = &body[FRAME_HEAD_LEN..FRAME_HEAD_LEN + len];
        FrameBuf::from_network(payload).expect("a valid frame");
        opened += 1;
        body = &body[FRAME_HEAD_LEN + len..];
    }
    opened
}

/// A cross-node request frame of `bytes` bytes (as `as_bytes` gives it),
/// give or take the archive's alignment.
fn frame_of(bytes: usize) -> FrameBuf {
    let with_body = |len: usize| {
        FrameBuf::encode(&Message::RouterReply {
            origin_node: 1,
            request_seq: 42,
            error_code: 0,
            body: vec![7; len],
        })
        .expect("a small frame")
    };
    let overhead = with_body(0).as_bytes().len();
    with_body(bytes.saturating_sub(overhead))
}

/// ns per record of `path` over `frames`, for about `budget`.
fn measure(path: &mut dyn Path, frames: &[FrameBuf], budget: Duration) -> f64 {
    // Warm up, and check the path carries every frame.
    for _ in 0..16 {
        assert_eq!(path.round(frames), frames.len(), "{}", path.name());
    }
    let mut rounds = 0u64;
    let started = Instant::now();
    while started.elapsed() < budget {
        for _ in 0..64 {
            std::hint::black_box(path.round(frames));
        }
        rounds += 64;
    }
    started.elapsed().as_nanos() as f64 / rounds as f64
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let frames_per_record = arg(1, DEFAULT_FRAMES_PER_RECORD);
    let frame_bytes = arg(2, DEFAULT_FRAME_BYTES);
    let budget = Duration::from_millis(arg(3, 1000) as u64);
    let full = RECORD_BODY_MAX_BYTES / (frame_bytes + FRAME_HEAD_LEN);
    let shapes = [
        ("the link under load", frames_per_record),
        ("one frame", 1),
        ("a full record (256 KiB)", full),
    ];
    println!(
        "== link record authentication: the shipped AES-128-GCM records vs version 2's HMAC records vs TLS 1.3 records (rustls, in memory), {frame_bytes}-byte frames, {} ms per path and shape",
        budget.as_millis()
    );
    for (label, count) in shapes {
        let frames: Vec<FrameBuf> = (0..count).map(|_| frame_of(frame_bytes)).collect();
        let body_bytes: usize = frames
            .iter()
            .map(|f| f.as_bytes().len() + FRAME_HEAD_LEN)
            .sum();
        println!("-- {label}: {count} frames, {body_bytes} bytes of record body");
        let mut paths: Vec<Box<dyn Path>> = vec![
            Box::new(Shipped {
                sealer: Sealer::new(KEY),
                decoder: LinkDecoder::new(KEY),
                wire: Vec::new(),
            }),
            Box::new(Tls::new(
                "tls13 aes-128-gcm",
                cipher_suite::TLS13_AES_128_GCM_SHA256,
            )),
            Box::new(Tls::new(
                "tls13 chacha20-poly1305",
                cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            )),
            Box::new(HmacRecord::new()),
            Box::new(Plain { wire: Vec::new() }),
        ];
        let mut shipped_ns = None;
        let mut plain_ns = 0.0;
        let mut rows = Vec::new();
        for path in &mut paths {
            let ns = measure(path.as_mut(), &frames, budget);
            let shipped = *shipped_ns.get_or_insert(ns);
            if path.name().starts_with("none") {
                plain_ns = ns;
            }
            rows.push((path.name(), ns, ns / shipped));
        }
        for (name, ns, ratio) in rows {
            println!(
                "{name:<26} {ns:>11.0} ns/record {:>8.1} ns/frame   ratio to shipped {ratio:.3}   authentication {:>9.0} ns/record",
                ns / count as f64,
                ns - plain_ns
            );
        }
    }
}
