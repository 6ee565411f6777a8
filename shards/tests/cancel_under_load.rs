//! Futures dropped while their operations are in flight, thousands of
//! times (connects, sends, receives): nothing leaks (slots, buffers, file
//! indexes, descriptors: counted in `/proc/self/fd`) and no byte is lost,
//! duplicated or misplaced.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::net::{TcpListener, TcpStream};

mod common;
use common::{on_a_core, one_core, wait_for_within};

/// Connects abandoned right after they were started.
const CONNECTS: usize = 1000;
/// Client streams that exchange data, and the rounds they do.
const STREAMS: usize = 8;
const ROUNDS: usize = 300;

/// What the core counted at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Leftovers {
    ops_in_flight: usize,
    buffers_lent: u16,
    file_indexes_in_use: u32,
    /// Descriptors open beyond those open before the first connect.
    fds_open_more: usize,
}

/// Descriptors this process has open (the listing's own included, the
/// same each time).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// The bytes round `round` of stream `stream` sends: tagged so a byte in
/// the wrong place or the wrong stream shows.
fn message(stream: usize, round: usize) -> Vec<u8> {
    format!("<{stream}:{round}>").into_bytes()
}

async fn echo(stream: TcpStream) {
    while let Ok(Some(buf)) = stream.recv().await {
        let (sent, _) = stream.send_all(buf.to_vec()).await;
        if sent.is_err() {
            return;
        }
    }
}

/// Waits until `done` says yes, up to 5 s.
async fn settle(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        shards::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn futures_dropped_in_flight_leak_nothing_and_lose_no_byte() {
    let mut config = one_core();
    config.ring_depth = 32;
    config.recv_buffers = 64;
    config.registered_files = 64;
    let outcome = Arc::new(Mutex::new(None::<(usize, Vec<bool>, Leftovers)>));
    let record = outcome.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let record = record.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            let address = listener.local_addr();
            shards::spawn(async move {
                while let Ok(stream) = listener.accept().await {
                    shards::spawn(echo(stream)).detach();
                }
            })
            .detach();
            let fds_before = open_fds();

            // Connects dropped after one turn: in flight, or just done.
            let mut completed = 0;
            for _ in 0..CONNECTS {
                let connect = async { Some(TcpStream::connect(address).await) };
                let abandon = async {
                    shards::yield_now().await;
                    None
                };
                if let Some(Ok(_)) = futures_lite::future::or(connect, abandon).await {
                    completed += 1;
                }
            }

            // Sends started and dropped, sends awaited, receives started
            // and dropped before anything came.
            let mut streams = Vec::new();
            for _ in 0..STREAMS {
                let stream = TcpStream::connect(address).await.expect("connect");
                stream.set_nodelay(true).unwrap();
                streams.push((stream, Vec::new()));
            }
            for round in 0..ROUNDS {
                for (index, (stream, got)) in streams.iter_mut().enumerate() {
                    let send = stream.start_send(message(index, round));
                    if round % 2 == 0 {
                        drop(send);
                    } else {
                        let (sent, _) = send.await;
                        sent.expect("send");
                    }
                    let recv = async { Some(stream.recv().await) };
                    let abandon = async {
                        shards::yield_now().await;
                        None
                    };
                    if let Some(received) = futures_lite::future::or(recv, abandon).await {
                        let buf = received.expect("recv").expect("not at the end");
                        got.extend_from_slice(&buf);
                    }
                }
            }
            // The rest of each stream's echo, then a check of every byte.
            let mut intact = Vec::new();
            for (index, (stream, got)) in streams.iter_mut().enumerate() {
                let want: Vec<u8> = (0..ROUNDS)
                    .flat_map(|round| message(index, round))
                    .collect();
                while got.len() < want.len() {
                    match stream.recv().await {
                        Ok(Some(buf)) => got.extend_from_slice(&buf),
                        _ => break,
                    }
                }
                intact.push(*got == want);
            }
            drop(streams);

            // Every client stream is gone and every server stream has seen
            // its end: what is left is the listener's accept.
            // Descriptors close through the ring, after what was queued.
            settle(|| {
                shards::ops_in_flight() <= 1
                    && shards::file_table().in_use == 0
                    && open_fds() <= fds_before
            })
            .await;
            let leftovers = Leftovers {
                ops_in_flight: shards::ops_in_flight(),
                buffers_lent: shards::recv_buffers().lent,
                file_indexes_in_use: shards::file_table().in_use,
                fds_open_more: open_fds().saturating_sub(fds_before),
            };
            *record.lock().unwrap() = Some((completed, intact, leftovers));
            futures_lite::future::pending::<()>().await;
        }
    });
    let (completed, intact, leftovers) = wait_for_within(&outcome, Duration::from_secs(60));
    assert!(
        completed < CONNECTS,
        "every connect completed within a turn: none was dropped in flight"
    );
    assert_eq!(
        intact,
        vec![true; STREAMS],
        "bytes lost, duplicated or misplaced"
    );
    assert_eq!(
        leftovers,
        Leftovers {
            ops_in_flight: 1,
            buffers_lent: 0,
            file_indexes_in_use: 0,
            fds_open_more: 0,
        }
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
