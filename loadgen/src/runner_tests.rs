//! The real io_uring engine against in-test servers on loopback
//! (`testing.rs`): routerd's protocol and Redis's, closed and open loop.

use std::io::{Read, Write};
use std::net::TcpListener;

use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

use super::*;
use crate::testing::{gateway, redis, run_against, Behaviour};
use crate::workload::Op;

#[test]
fn closed_loop_against_echo_for_one_second() {
    let (addr, _) = gateway(Behaviour::default());
    let outcome = run_against(
        &[addr],
        &["--connections", "4", "--pipeline", "8", "--drain", "1s"],
    );
    assert_eq!(outcome.error, None);
    let stats = outcome.stats;
    assert!(
        stats.responses() > 1000,
        "only {} answers",
        stats.responses()
    );
    assert_eq!(stats.protocol_errors, 0);
    assert_eq!(stats.connections_lost, 0);
    assert_eq!(stats.failures(), 0);
    // Every measured request was answered: the drain waited for them.
    assert_eq!(stats.sent(), stats.responses() + stats.unanswered);
    assert_eq!(stats.unanswered, 0);
    assert_eq!(stats.latency_ns().len(), stats.responses());
    // One entry a second, together holding every measured request.
    let series = stats.series();
    assert_eq!(series.len(), 1);
    assert_eq!(series[0].sent, stats.sent());
    assert_eq!(series[0].responses, stats.responses());
}

#[test]
fn open_loop_keeps_the_offered_rate() {
    let (addr, _) = gateway(Behaviour::default());
    let outcome = run_against(
        &[addr],
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
    assert!(
        (1990..=2000).contains(&stats.sent()),
        "sent {}",
        stats.sent()
    );
    assert_eq!(stats.schedule_overflow, 0);
    assert_eq!(stats.responses(), stats.sent());
    assert!(crate::report::verdict(&stats, Some(2000.0), 1.0).is_empty());
}

#[test]
fn a_server_answering_wrong_seqs_is_caught() {
    let (addr, _) = gateway(Behaviour {
        seq_skew: 1000,
        ..Behaviour::default()
    });
    let outcome = run_against(
        &[addr],
        &["--connections", "1", "--pipeline", "1", "--drain", "200ms"],
    );
    let stats = outcome.stats;
    assert!(stats.protocol_errors > 0);
    assert_eq!(stats.responses(), 0);
    assert!(!crate::report::verdict(&stats, None, 1.0).is_empty());
}

#[test]
fn login_then_mixed_and_room_workloads() {
    let (addr, _) = gateway(Behaviour::default());
    let outcome = run_against(
        &[addr],
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
    let stats = &outcome.stats;
    assert!(stats.responses() > 100);
    assert_eq!(stats.protocol_errors, 0);
    // Each kind of request is measured on its own (mix 4,1,1).
    let get = stats.ops[Op::Get.index()].responses;
    let incr = stats.ops[Op::Incr.index()].responses;
    let ping = stats.ops[Op::Ping.index()].responses;
    assert_eq!(get + incr + ping, stats.responses());
    assert!(get > 2 * incr && get > 2 * ping, "{get} {incr} {ping}");
    assert!(incr > 0 && ping > 0);
    assert_eq!(stats.ops[Op::Get.index()].latency_ns.len(), get);

    let outcome = run_against(
        &[addr],
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
    assert!(stats.responses() > 100);
    assert_eq!(stats.protocol_errors, 0);
    // Each say promised one push (to its sender), and each was timed.
    assert_eq!(stats.pushes_expected, stats.responses());
    assert!(stats.pushes >= stats.responses());
    assert_eq!(stats.push_latency_ns.len(), stats.pushes);
}

/// The same client drives Redis: pipelined PING, INCR and GET on one key
/// per connection, every reply matched in order, and the server's counters
/// agree with the increments loadgen saw answered.
#[test]
fn resp_closed_loop_against_a_fake_redis() {
    let (addr, record) = redis();
    let outcome = run_against(
        &[addr],
        &[
            "--proto",
            "resp",
            "--workload",
            "mixed",
            "--mix",
            "1,1,1",
            "--connections",
            "3",
            "--pipeline",
            "16",
            "--warmup",
            "0s",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = &outcome.stats;
    assert_eq!(stats.protocol_errors, 0);
    assert_eq!(stats.failures(), 0);
    assert_eq!(stats.unanswered, 0);
    for op in [Op::Ping, Op::Get, Op::Incr] {
        assert!(stats.ops[op.index()].responses > 100, "{op:?}");
    }
    let counters = record.counters.lock().expect("lock");
    let keys: std::collections::BTreeSet<String> = counters
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    let want: std::collections::BTreeSet<String> = (1..=3).map(|p| format!("player:{p}")).collect();
    assert_eq!(keys, want);
    // Requests sent after the window closed (the drain) are not measured;
    // every INCR the server applied was sent, so it is at least the answers.
    let applied: i64 = counters.values().sum();
    assert!(applied as u64 >= stats.ops[Op::Incr.index()].responses);
    assert!(applied as u64 <= stats.ops[Op::Incr.index()].sent + 3 * 16);
}

#[test]
fn resp_open_loop_keeps_the_offered_rate_with_bare_pings() {
    let (addr, record) = redis();
    let outcome = run_against(
        &[addr],
        &[
            "--proto",
            "resp",
            "--body-bytes",
            "0",
            "--connections",
            "2",
            "--pipeline",
            "8",
            "--rate",
            "2000",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = outcome.stats;
    assert!(
        (1990..=2000).contains(&stats.sent()),
        "sent {}",
        stats.sent()
    );
    assert_eq!(stats.responses(), stats.sent());
    assert_eq!(stats.protocol_errors, 0);
    assert!(record.commands.lock().expect("lock")["PING"] >= 2000);
}

/// With more players than connections, a RESP connection moves its
/// commands to its next player's key every --requests-per-login.
#[test]
fn resp_players_spread_over_many_keys() {
    let (addr, record) = redis();
    let outcome = run_against(
        &[addr],
        &[
            "--proto",
            "resp",
            "--workload",
            "incr",
            "--connections",
            "2",
            "--players",
            "10",
            "--requests-per-login",
            "20",
            "--player-base",
            "100",
            "--drain",
            "1s",
        ],
    );
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.stats.protocol_errors, 0);
    assert!(
        outcome.stats.player_switches >= 10,
        "{} switches",
        outcome.stats.player_switches
    );
    let counters = record.counters.lock().expect("lock");
    let mut keys: Vec<String> = counters
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    keys.sort();
    let mut want: Vec<String> = (100..110).map(|p| format!("player:{p}")).collect();
    want.sort();
    assert_eq!(keys, want);
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
        let outcome = run_against(&[addr], &extra);
        assert_eq!(outcome.stats.protocol_errors, 0);
        let mut findings: Vec<bool> = found.try_iter().collect();
        assert!(findings.len() >= 5, "only {} batches", findings.len());
        // The last batch may meet the run's end, where nothing is sent again.
        findings.pop();
        assert!(
            findings.iter().all(|&refilled| refilled == refills),
            "batch {batch}: {findings:?}"
        );
    }
}

/// The batch probe in Redis's protocol: `--batch` behaves the same whatever
/// the protocol.
fn resp_batch_probe_server(
    depth: usize,
) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let (found_tx, found_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let _ = stream.set_nodelay(true);
        let mut buf = vec![0u8; 4096];
        let mut pending = 0usize;
        loop {
            // Bare PINGs: `*1\r\n$4\r\nPING\r\n`, 14 bytes each.
            let mut bytes = 0usize;
            while bytes < depth * 14 {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => bytes += n,
                }
            }
            pending += bytes / 14;
            if stream.write_all(b"+PONG\r\n").is_err() {
                return;
            }
            pending -= 1;
            std::thread::sleep(Duration::from_millis(20));
            stream.set_nonblocking(true).expect("nonblocking");
            let refilled = match stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    pending += n / 14;
                    true
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => false,
                Err(_) => return,
            };
            stream.set_nonblocking(false).expect("blocking");
            if found_tx.send(refilled).is_err() {
                return;
            }
            let out = b"+PONG\r\n".repeat(pending);
            pending = 0;
            if stream.write_all(&out).is_err() {
                return;
            }
        }
    });
    (addr, found_rx)
}

#[test]
fn resp_batch_waits_for_every_answer() {
    for (batch, refills) in [(false, true), (true, false)] {
        let (addr, found) = resp_batch_probe_server(4);
        let mut extra = vec![
            "--proto",
            "resp",
            "--body-bytes",
            "0",
            "--connections",
            "1",
            "--pipeline",
            "4",
            "--drain",
            "200ms",
        ];
        if batch {
            extra.push("--batch");
        }
        let outcome = run_against(&[addr], &extra);
        assert_eq!(outcome.stats.protocol_errors, 0);
        let mut findings: Vec<bool> = found.try_iter().collect();
        assert!(findings.len() >= 5, "only {} batches", findings.len());
        // The last batch may meet the run's end, where nothing is sent again.
        findings.pop();
        assert!(
            findings.iter().all(|&refilled| refilled == refills),
            "batch {batch}: {findings:?}"
        );
    }
}
