//! What a cross-node frame costs the links: sealing a batch of
//! `player.incr`-shaped frames into one record and opening it again on the
//! other side (the frames read where they lie), per frame, with the number
//! of allocations each side makes per frame; and, for the same record bytes,
//! what the protection alone costs each way a link could protect them:
//! AES-128-GCM in place (what version 3 does), two HMAC-SHA256 passes (what
//! version 2 did, once per side), and TLS 1.3 records with AES-128-GCM and
//! with ChaCha20-Poly1305 (rustls between an in-memory client and server,
//! the handshake done once up front: what mutual TLS links would pay per
//! record, without their handshakes).
//!
//! Run: `cargo bench -p bench --bench links`. Before criterion runs, a
//! manual loop prints ns per frame for each batch size and asserts that
//! opening a record allocates nothing per frame once the decoder's buffer
//! has grown (a counting global allocator).

use std::hint::black_box;
use std::time::{Duration, Instant};

use std::io::{Read, Write};
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion};
use hmac::{Hmac, KeyInit, Mac};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use routerd::cluster::codec::{Batch, LinkDecoder, LinkFrame, Sealer, LINK_KEY_LEN};
use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConnection, ServerConnection, SupportedCipherSuite};
use wire::frame::{ClientWire, KeyWire, Message, RouterHead};

#[global_allocator]
static GLOBAL: bench::CountingAlloc = bench::CountingAlloc;

const KEY: &[u8; LINK_KEY_LEN] = &[7; LINK_KEY_LEN];
/// Frames per send: `bench/cross_node.sh` counts about 200 per send at 32
/// connections x pipeline 16; 1 is an idle link's.
const BATCHES: [usize; 3] = [1, 16, 200];
/// What one receive hands the decoder at most (`cores.recv_buffer_bytes`).
const RECEIVE_BYTES: usize = 16 * 1024;

/// A routed `player.incr` (an 8-byte body) and its answer, alternating.
fn frames(count: usize) -> Vec<Message> {
    (0..count as u64)
        .map(|n| {
            if n % 2 == 0 {
                Message::RouterRequest {
                    head: RouterHead {
                        key: KeyWire {
                            type_id: 1,
                            zone_id: 0,
                            object_id: n,
                        },
                        route_version: 3,
                        source_node: 2,
                        transfer_ttl: 0,
                    },
                    origin_node: 2,
                    request_seq: n,
                    op: 1,
                    needs_reply: 1,
                    has_client: 1,
                    client: ClientWire {
                        gateway_node: 2,
                        session_id: n,
                        session_epoch: 1,
                        player_id: n,
                    },
                    request_key: 0,
                    body: 1i64.to_le_bytes().to_vec(),
                }
            } else {
                Message::RouterReply {
                    origin_node: 2,
                    request_seq: n,
                    error_code: 0,
                    body: n.to_le_bytes().to_vec(),
                }
            }
        })
        .collect()
}

/// Queues `frames` (each encoded in place) and seals them into one
/// record, as a link's writer does per send; the sealed bytes in `out`.
fn seal(sealer: &mut Sealer, batch: &mut Batch, out: &mut Vec<u8>, frames: &[Message]) {
    batch.reuse(std::mem::take(out));
    for frame in frames {
        batch.message(frame).expect("a small message encodes");
    }
    sealer.seal(batch);
    *out = batch.take_sealed();
}

/// Opens every record of `bytes` in receive-sized pieces and reads every
/// frame; returns how many were messages.
fn open(decoder: &mut LinkDecoder, bytes: &[u8]) -> usize {
    let mut messages = 0;
    for piece in bytes.chunks(RECEIVE_BYTES) {
        decoder.extend(piece);
        while let Some(frame) = decoder.next_frame().expect("an authentic record") {
            if let LinkFrame::Message(message) = frame {
                black_box(message);
                messages += 1;
            }
        }
    }
    messages
}

/// One HMAC-SHA256 over a record numbered `seq`, as version 2 did per side.
fn hmac_pass(key: &Hmac<sha2::Sha256>, seq: u64, record: &[u8]) -> u8 {
    let mut mac = key.clone();
    mac.update(&seq.to_le_bytes());
    mac.update(record);
    mac.finalize().into_bytes()[0]
}

fn manual_report(batch: usize) {
    let frames = frames(batch);
    let rounds = (400_000 / batch).max(1);
    // The sealer and the decoder of one direction stay in step: every
    // sealed record is opened, in order.
    let mut sealer = Sealer::new(KEY);
    let mut queue = Batch::new();
    let mut decoder = LinkDecoder::new(KEY);
    let mut record = Vec::new();
    for _ in 0..8 {
        seal(&mut sealer, &mut queue, &mut record, &frames);
        open(&mut decoder, &record);
    }
    let (mut seal_ns, mut open_ns) = (0u128, 0u128);
    let allocations_before = bench::allocations();
    let mut open_allocations = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        seal(&mut sealer, &mut queue, &mut record, &frames);
        seal_ns += started.elapsed().as_nanos();
        let before = bench::allocations();
        let started = Instant::now();
        assert_eq!(open(&mut decoder, &record), batch);
        open_ns += started.elapsed().as_nanos();
        open_allocations += bench::allocations() - before;
    }
    let seal_allocations = bench::allocations() - allocations_before - open_allocations;
    let hmac = Hmac::<sha2::Sha256>::new_from_slice(KEY).expect("any key length");
    let started = Instant::now();
    for seq in 0..rounds as u64 {
        black_box(hmac_pass(&hmac, seq, black_box(&record)));
    }
    let hmac_ns = started.elapsed().as_nanos();
    let per_frame = |ns: u128| ns as f64 / (rounds * batch) as f64;
    println!(
        "batch of {batch:3} ({} bytes a record): seal {:6.1} ns/frame, open and read {:6.1} ns/frame; \
         one HMAC-SHA256 pass {:6.1} ns/frame; allocations per frame: seal {:.3}, open {:.3}",
        record.len(),
        per_frame(seal_ns),
        per_frame(open_ns),
        per_frame(hmac_ns),
        seal_allocations as f64 / (rounds * batch) as f64,
        open_allocations as f64 / (rounds * batch) as f64,
    );
    // Encoding into the batch and reading a record's frames where they
    // lie: nothing allocated per frame once the buffers have grown.
    assert_eq!(seal_allocations, 0, "sealing records allocated");
    assert_eq!(open_allocations, 0, "opening records allocated");
    protection_report(batch, &record, rounds);
}

/// The protection alone of `record`'s bytes (sealed on one side, opened on
/// the other), each way a link could protect them, per frame of the batch
/// and as a ratio to AES-128-GCM in place.
fn protection_report(batch: usize, record: &[u8], rounds: usize) {
    let per_frame = |ns: u128| ns as f64 / (rounds * batch) as f64;
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &KEY[..16]).expect("16 bytes"));
    let mut body = record.to_vec();
    let started = Instant::now();
    for seq in 0..rounds as u64 {
        black_box(aes_gcm_round(&key, seq, &mut body));
    }
    let aes_ns = started.elapsed().as_nanos();
    let hmac = Hmac::<sha2::Sha256>::new_from_slice(KEY).expect("any key length");
    let started = Instant::now();
    for seq in 0..rounds as u64 {
        black_box(hmac_pass(&hmac, seq, black_box(record)) ^ hmac_pass(&hmac, seq, record));
    }
    let hmac_ns = started.elapsed().as_nanos();
    let mut tls_ns = Vec::new();
    for (name, suite) in [
        (
            "TLS 1.3 AES-128-GCM",
            cipher_suite::TLS13_AES_128_GCM_SHA256,
        ),
        (
            "TLS 1.3 ChaCha20-Poly1305",
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ),
    ] {
        let mut tls = TlsPair::new(suite);
        tls.round(record);
        let started = Instant::now();
        for _ in 0..rounds {
            black_box(tls.round(record));
        }
        tls_ns.push((name, started.elapsed().as_nanos()));
    }
    let mut line = format!(
        "  protection alone of those bytes, sealed and opened: AES-128-GCM in place {:6.1} ns/frame; \
         HMAC-SHA256 twice {:6.1} ({:.2}x)",
        per_frame(aes_ns),
        per_frame(hmac_ns),
        hmac_ns as f64 / aes_ns as f64
    );
    for (name, ns) in tls_ns {
        line += &format!(
            "; {name} {:6.1} ({:.2}x)",
            per_frame(ns),
            ns as f64 / aes_ns as f64
        );
    }
    println!("{line}");
}

/// Seals `body` in place with AES-128-GCM and opens it again, as the two
/// ends of a version 3 link do with each record's body.
fn aes_gcm_round(key: &LessSafeKey, seq: u64, body: &mut [u8]) -> u8 {
    let nonce = |seq: u64| {
        let mut bytes = [0u8; 12];
        bytes[..8].copy_from_slice(&seq.to_le_bytes());
        Nonce::assume_unique_for_key(bytes)
    };
    let tag = key
        .seal_in_place_separate_tag(nonce(seq), Aad::from(&[4u8; 16]), body)
        .expect("a body AES-GCM can seal");
    key.open_in_place_separate_tag(nonce(seq), Aad::from(&[4u8; 16]), tag, body, 0..)
        .expect("the record just sealed")[0]
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

/// A TLS 1.3 client and server in memory with one cipher suite, the
/// handshake done up front: the record layer alone.
struct TlsPair {
    client: ClientConnection,
    server: ServerConnection,
    wire: Vec<u8>,
    opened: Vec<u8>,
}

impl TlsPair {
    fn new(suite: SupportedCipherSuite) -> TlsPair {
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
        TlsPair {
            client,
            server,
            wire: Vec::new(),
            opened: Vec::new(),
        }
    }

    /// Sends `body` from the client and reads it out of the server, a
    /// receive's worth at a time; returns the bytes that came through.
    fn round(&mut self, body: &[u8]) -> usize {
        self.client.writer().write_all(body).expect("buffered");
        self.wire.clear();
        while self.client.wants_write() {
            self.client.write_tls(&mut self.wire).expect("into memory");
        }
        self.opened.clear();
        let mut rest = &self.wire[..];
        let mut chunk = [0u8; RECEIVE_BYTES];
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
        assert_eq!(self.opened.len(), body.len(), "every byte came through");
        self.opened.len()
    }
}

fn criterion_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("link_record");
    for batch in BATCHES {
        let frames = frames(batch);
        group.bench_function(BenchmarkId::new("seal_then_open", batch), |b| {
            let mut sealer = Sealer::new(KEY);
            let mut queue = Batch::new();
            let mut decoder = LinkDecoder::new(KEY);
            let mut record = Vec::new();
            b.iter(|| {
                seal(&mut sealer, &mut queue, &mut record, &frames);
                open(&mut decoder, &record)
            })
        });
        let mut record = Vec::new();
        seal(
            &mut Sealer::new(KEY),
            &mut Batch::new(),
            &mut record,
            &frames,
        );
        let hmac = Hmac::<sha2::Sha256>::new_from_slice(KEY).expect("any key length");
        group.bench_function(BenchmarkId::new("hmac_sha256_twice", batch), |b| {
            b.iter(|| hmac_pass(&hmac, 0, &record) ^ hmac_pass(&hmac, 1, &record))
        });
    }
    group.finish();
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then only criterion's quick one-pass test mode runs.
    if std::env::args().any(|arg| arg == "--bench") {
        for batch in BATCHES {
            manual_report(batch);
        }
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
        .configure_from_args();
    criterion_benches(&mut criterion);
    criterion.final_summary();
}
