//! Many connections on one core, far more than its receive buffers and
//! its registered file table: every one is served, and when they close
//! the core is back where it started.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::net::TcpListener;

mod common;
use common::{on_a_core, one_core, wait_for};

/// Connections open at once (each is two descriptors in this process).
const CONNECTIONS_MAX: usize = 1000;
/// Descriptors left for everything else of the test process.
const SPARE_FDS: usize = 128;

/// `CONNECTIONS_MAX`, or fewer if the open-file limit is low.
fn connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 100;
    }
    let open_max = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    CONNECTIONS_MAX.min(open_max.saturating_sub(SPARE_FDS) / 2)
}

#[test]
fn many_connections_share_a_small_ring_and_all_are_served() {
    let mut config = one_core();
    config.recv_buffers = 64;
    config.recv_buffers_per_conn_max = 4;
    config.registered_files = 256;
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let stats = Arc::new(Mutex::new(None::<(usize, u32, shards::RecvBufferStats)>));
    let report = stats.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let published = published.clone();
        let report = report.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            shards::spawn(async move {
                loop {
                    let snapshot = (
                        shards::ops_in_flight(),
                        shards::file_table().in_use,
                        shards::recv_buffers(),
                    );
                    *report.lock().unwrap() = Some(snapshot);
                    shards::sleep(Duration::from_millis(5)).await;
                }
            })
            .detach();
            while let Ok(stream) = listener.accept().await {
                shards::spawn(async move {
                    while let Ok(Some(buf)) = stream.recv().await {
                        let (sent, _) = stream.send_all(buf.to_vec()).await;
                        if sent.is_err() {
                            return;
                        }
                    }
                })
                .detach();
            }
        }
    });
    let address = wait_for(&address);
    let count = connections();
    assert!(
        count >= 100,
        "the open-file limit leaves {count} connections"
    );
    let mut clients: Vec<std::net::TcpStream> = (0..count)
        .map(|_| {
            let client = std::net::TcpStream::connect(address).expect("connect");
            client
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            client
        })
        .collect();
    // Every connection sends at once, then every echo is read.
    let payload = |n: usize| format!("{n:06}:").repeat(20).into_bytes();
    for (n, client) in clients.iter_mut().enumerate() {
        client.write_all(&payload(n)).unwrap();
    }
    for (n, client) in clients.iter_mut().enumerate() {
        let want = payload(n);
        let mut back = vec![0u8; want.len()];
        client
            .read_exact(&mut back)
            .unwrap_or_else(|error| panic!("connection {n}: {error}"));
        assert_eq!(back, want, "connection {n}");
    }
    drop(clients);
    // Closed: the listener's accept is all that is left in the ring.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (ops, files, buffers) = wait_for(&stats);
        if ops == 1 && files == 0 && buffers.lent == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left after close: {ops} ops, {files} file indexes, {buffers:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
