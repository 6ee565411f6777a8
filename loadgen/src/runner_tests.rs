//! The real io_uring engine against an in-test echo server on loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use clap::Parser;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

use super::*;

/// Answers every REQUEST with a RESPONSE of the same route and body; the
/// seq is shifted by `seq_skew` (0 for a correct server). It also plays a
/// one-connection routerd: `auth.login` verifies the token (secret `test`)
/// and answers the player id, `player.incr` a counter, `room.join` one
/// member, and `room.say` one member plus a `room.message` PUSH to the
/// sender itself.
fn echo_server(seq_skew: u32) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve(stream, seq_skew));
        }
    });
    addr
}

fn serve(mut stream: TcpStream, seq_skew: u32) {
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
    let mut out = Vec::new();
    let mut player_id = 0u64;
    let mut counter = 0i64;
    loop {
        let n = match stream.read(decoder.read_buf()) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        decoder.advance(n);
        out.clear();
        while let Ok(Some(frame)) = decoder.next_frame() {
            let h = frame.header;
            let seq = h.seq.wrapping_add(seq_skew);
            let body = frame.body;
            match h.route_id {
                route::AUTH_LOGIN => {
                    let player = wire::token::verify(b"test", body, 0).expect("minted token");
                    player_id = player;
                    encode_frame(
                        &mut out,
                        FrameKind::Response,
                        h.route_id,
                        seq,
                        &player.to_le_bytes(),
                    );
                }
                route::PLAYER_INCR | route::PLAYER_GET => {
                    counter += 1;
                    encode_frame(
                        &mut out,
                        FrameKind::Response,
                        h.route_id,
                        seq,
                        &counter.to_le_bytes(),
                    );
                }
                route::ROOM_JOIN => {
                    encode_frame(
                        &mut out,
                        FrameKind::Response,
                        h.route_id,
                        seq,
                        &1u32.to_le_bytes(),
                    );
                }
                route::ROOM_SAY => {
                    let mut push = body[..8].to_vec();
                    push.extend_from_slice(&player_id.to_le_bytes());
                    push.extend_from_slice(&body[8..]);
                    encode_frame(&mut out, FrameKind::Push, route::ROOM_MESSAGE, 0, &push);
                    encode_frame(
                        &mut out,
                        FrameKind::Response,
                        h.route_id,
                        seq,
                        &1u32.to_le_bytes(),
                    );
                }
                _ => encode_frame(&mut out, FrameKind::Response, h.route_id, seq, body),
            }
        }
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}

fn run_against(addr: std::net::SocketAddr, extra: &[&str]) -> Outcome {
    let mut argv = vec!["loadgen", "--warmup", "200ms", "--duration", "1s"];
    argv.extend_from_slice(extra);
    let mut args = Args::parse_from(argv);
    args.addr = addr;
    args.validate().expect("valid test args");
    let coordinator = Arc::new(Coordinator::default());
    let ctx = Context {
        args: Arc::new(args.clone()),
        secret: Arc::new("test".to_string()),
        coordinator: Arc::clone(&coordinator),
        progress: None,
    };
    let plan = Plan {
        thread_index: 0,
        cpu: None,
        first_conn: 0,
        conn_count: args.connections,
    };
    let handle = std::thread::spawn(move || run_thread(plan, ctx));
    let deadline = now_ns() + 10_000_000_000;
    while coordinator.ready.load(Ordering::SeqCst) == 0
        && !coordinator.failed.load(Ordering::SeqCst)
    {
        assert!(now_ns() < deadline, "setup did not finish");
        std::thread::sleep(Duration::from_millis(1));
    }
    coordinator.start_ns.store(now_ns(), Ordering::SeqCst);
    handle.join().expect("generator thread")
}

#[test]
fn closed_loop_against_echo_for_one_second() {
    let addr = echo_server(0);
    let outcome = run_against(
        addr,
        &["--connections", "4", "--pipeline", "8", "--drain", "1s"],
    );
    assert_eq!(outcome.error, None);
    let stats = outcome.stats;
    assert!(stats.responses > 1000, "only {} answers", stats.responses);
    assert_eq!(stats.protocol_errors, 0);
    assert_eq!(stats.connections_lost, 0);
    assert_eq!(stats.errors(), 0);
    // Every measured request was answered: the drain waited for them.
    assert_eq!(stats.sent, stats.responses + stats.unanswered);
    assert_eq!(stats.unanswered, 0);
    assert_eq!(stats.latency_ns.len(), stats.responses);
}

#[test]
fn open_loop_keeps_the_offered_rate() {
    let addr = echo_server(0);
    let outcome = run_against(
        addr,
        &[
            "--connections",
            "2",
            "--pipeline",
            "16",
            "--rate",
            "2000",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = outcome.stats;
    // 2000/s for 1 s, intended times in the window: 2000 exactly scheduled.
    assert!((1990..=2000).contains(&stats.sent), "sent {}", stats.sent);
    assert_eq!(stats.schedule_overflow, 0);
    assert_eq!(stats.responses, stats.sent);
    assert!(crate::report::verdict(&stats, Some(2000.0), 1.0).is_empty());
}

#[test]
fn a_server_answering_wrong_seqs_is_caught() {
    let addr = echo_server(1000);
    let outcome = run_against(
        addr,
        &["--connections", "1", "--pipeline", "1", "--drain", "200ms"],
    );
    let stats = outcome.stats;
    assert!(stats.protocol_errors > 0);
    assert_eq!(stats.responses, 0);
    assert!(!crate::report::verdict(&stats, None, 1.0).is_empty());
}

#[test]
fn login_then_mixed_and_room_workloads() {
    let addr = echo_server(0);
    let outcome = run_against(
        addr,
        &[
            "--workload",
            "mixed",
            "--connections",
            "3",
            "--pipeline",
            "4",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    assert!(outcome.stats.responses > 100);
    assert_eq!(outcome.stats.protocol_errors, 0);

    let outcome = run_against(
        addr,
        &[
            "--workload",
            "room",
            "--connections",
            "4",
            "--room-size",
            "2",
            "--say-fraction",
            "0.5",
            "--pipeline",
            "2",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = outcome.stats;
    assert!(stats.responses > 100);
    assert_eq!(stats.protocol_errors, 0);
    // Each say promised one push (to its sender), and each was timed.
    assert_eq!(stats.pushes_expected, stats.responses);
    assert!(stats.pushes >= stats.responses);
    assert_eq!(stats.push_latency_ns.len(), stats.pushes);
}

/// A server that tells the two closed-loop disciplines apart: it reads one
/// full pipeline of pings, answers only the first, waits, and records
/// whether a new request arrived meanwhile (the default discipline refills
/// the pipeline at once; `--batch` waits for all its answers); then it
/// answers the rest and goes on. Reports each batch's finding.
fn batch_probe_server(depth: usize) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let (found_tx, found_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let _ = stream.set_nodelay(true);
        let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
        let mut pending: Vec<(u32, Vec<u8>)> = Vec::new();
        loop {
            while pending.len() < depth {
                match decoder.next_frame() {
                    Ok(Some(frame)) => pending.push((frame.header.seq, frame.body.to_vec())),
                    Ok(None) => match stream.read(decoder.read_buf()) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => decoder.advance(n),
                    },
                    Err(_) => return,
                }
            }
            let mut out = Vec::new();
            let (seq, body) = pending.remove(0);
            encode_frame(&mut out, FrameKind::Response, route::SYS_PING, seq, &body);
            if stream.write_all(&out).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
            stream.set_nonblocking(true).expect("nonblocking");
            let refilled = match stream.read(decoder.read_buf()) {
                Ok(0) => return,
                Ok(n) => {
                    decoder.advance(n);
                    true
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => false,
                Err(_) => return,
            };
            stream.set_nonblocking(false).expect("blocking");
            if found_tx.send(refilled).is_err() {
                return;
            }
            out.clear();
            for (seq, body) in pending.drain(..) {
                encode_frame(&mut out, FrameKind::Response, route::SYS_PING, seq, &body);
            }
            if stream.write_all(&out).is_err() {
                return;
            }
        }
    });
    (addr, found_rx)
}

#[test]
fn batch_waits_for_every_answer_and_the_default_refills_at_once() {
    for (batch, refills) in [(false, true), (true, false)] {
        let (addr, found) = batch_probe_server(4);
        let mut extra = vec!["--connections", "1", "--pipeline", "4", "--drain", "200ms"];
        if batch {
            extra.push("--batch");
        }
        let outcome = run_against(addr, &extra);
        assert_eq!(outcome.stats.protocol_errors, 0);
        let findings: Vec<bool> = found.try_iter().collect();
        assert!(findings.len() >= 5, "only {} batches", findings.len());
        assert!(
            findings.iter().all(|&refilled| refilled == refills),
            "batch {batch}: {findings:?}"
        );
    }
}
