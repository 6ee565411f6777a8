//! Gateway-only round trips (`sys.ping` before login, answered by the auth
//! service through the ingress checks, in-flight accounting and the egress
//! gate) against a minimal glommio echo server with the same framing, both
//! on one pinned core, driven by the same client in the same run.
//!
//! ```text
//! cargo bench -p bench --bench gateway_ping
//! BENCH_SECS=3 BENCH_CONNS=8 BENCH_DEPTH=32 cargo bench -p bench --bench gateway_ping
//! ```
//!
//! Prints both rates and `ratio = gateway / echo` (goal: at least 0.85).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};
use routerd::config::{Config, StoreBackend};
use routerd::node::Node;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer, HEADER_LEN};

const BODY: &[u8] = b"ping-payload-32-bytes-long......";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The server core both servers pin to.
const SERVER_CPU: usize = 0;

fn main() {
    let secs = env("BENCH_SECS", 2);
    let conns = env("BENCH_CONNS", 4) as usize;
    let depth = env("BENCH_DEPTH", 16) as usize;
    let rounds = env("BENCH_ROUNDS", 2);

    let mut config = Config::default();
    config.cores.cpus = Some(vec![SERVER_CPU]);
    config.cores.io_memory_bytes = 256 << 10;
    config.gateway.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config.store.backend = StoreBackend::Memory;
    let node = Node::start(config).expect("node");
    let echo = start_echo();

    println!("gateway_ping: {conns} connections x depth {depth}, {secs} s per run, {rounds} rounds, server on cpu {SERVER_CPU}");
    let (mut best_gateway, mut best_echo) = (0f64, 0f64);
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let e = drive(echo, conns, depth, Duration::from_secs(secs));
        let g = drive(
            node.gateway_address(),
            conns,
            depth,
            Duration::from_secs(secs),
        );
        println!(
            "round {round}: echo {e:.0} rt/s, gateway {g:.0} rt/s, ratio {:.3}",
            g / e
        );
        ratios.push(g / e);
        best_gateway = best_gateway.max(g);
        best_echo = best_echo.max(e);
    }
    println!(
        "best: echo {best_echo:.0} rt/s, gateway {best_gateway:.0} rt/s, ratio = {:.3} (goal >= 0.85)",
        best_gateway / best_echo
    );
    // Rounds alternate servers, so the per-round ratio cancels slow drift
    // in machine load; its median is the steadiest single figure.
    ratios.sort_by(f64::total_cmp);
    println!("median per-round ratio = {:.3}", ratios[ratios.len() / 2]);
    node.shutdown_handle().trigger();
    let _ = node.wait();
}

/// A minimal glommio echo server: same framing, answers each REQUEST with a
/// RESPONSE of the same route, seq and body, one write per read batch.
fn start_echo() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        LocalExecutorBuilder::new(Placement::Fixed(SERVER_CPU))
            .io_memory(256 << 10)
            .make()
            .expect("echo executor")
            .run(async move {
                let listener = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    let Ok(stream) = listener.accept().await else {
                        continue;
                    };
                    glommio::spawn_local(echo_connection(stream)).detach();
                }
            });
    });
    rx.recv().unwrap()
}

async fn echo_connection(mut stream: glommio::net::TcpStream) {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new(Peer::Client, 65536);
    let mut out = Vec::new();
    loop {
        let n = match stream.read(decoder.read_buf()).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        decoder.advance(n);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => encode_frame(
                    &mut out,
                    FrameKind::Response,
                    frame.header.route_id,
                    frame.header.seq,
                    frame.body,
                ),
                Ok(None) => break,
                Err(_) => return,
            }
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
    }
}

/// Round trips per second over `conns` connections, each keeping `depth`
/// pings in flight, one client thread per connection.
fn drive(address: SocketAddr, conns: usize, depth: usize, duration: Duration) -> f64 {
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..conns)
        .map(|_| {
            let (counting, stop) = (counting.clone(), stop.clone());
            std::thread::spawn(move || client(address, depth, &counting, &stop))
        })
        .collect();
    // Warm up uncounted, then count answers over exactly the window.
    std::thread::sleep(Duration::from_millis(200));
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(duration);
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / elapsed.as_secs_f64()
}

fn client(address: SocketAddr, depth: usize, counting: &AtomicBool, stop: &AtomicBool) -> u64 {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut frame = Vec::new();
    encode_frame(&mut frame, FrameKind::Request, route::SYS_PING, 0, BODY);
    let frame_len = HEADER_LEN + BODY.len();
    let mut seq = 0u32;
    let mut batch = Vec::with_capacity(frame_len * depth);
    let mut push = |batch: &mut Vec<u8>, n: usize| {
        for _ in 0..n {
            // Unique in-flight seqs (the gateway rejects duplicates).
            frame[8..12].copy_from_slice(&seq.to_le_bytes());
            seq = seq.wrapping_add(1);
            batch.extend_from_slice(&frame);
        }
    };
    push(&mut batch, depth);
    stream.write_all(&batch).unwrap();
    let mut decoder = FrameDecoder::new(Peer::Server, 65536);
    let mut done = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = stream.read(decoder.read_buf()).unwrap();
        assert!(n > 0, "server closed");
        decoder.advance(n);
        let mut answered = 0;
        while let Some(reply) = decoder.next_frame().unwrap() {
            assert_eq!(reply.header.kind, FrameKind::Response, "{:?}", reply.header);
            answered += 1;
        }
        if counting.load(Ordering::Relaxed) {
            done += answered as u64;
        }
        batch.clear();
        push(&mut batch, answered);
        stream.write_all(&batch).unwrap();
    }
    done
}
