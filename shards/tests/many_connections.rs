//! Many connections on one core, far more than its receive buffers and
//! its registered file table: every one is served, and when they close
//! the core is back where it started, its descriptors included.
//!
//! The clients run in a process of their own (this test binary again,
//! running the ignored `clients` test): a process's open-file limit counts
//! both ends of a loopback connection, and 15,000 connections are 30,000
//! descriptors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::net::TcpListener;

mod common;
use common::{on_a_core, one_core, raise_open_file_limit, wait_for};

/// Connections open at once, all on one core.
const CONNECTIONS: usize = 15_000;
/// Descriptors each process keeps for everything else (the runtime's
/// rings and eventfds, the test harness, stdio).
const SPARE_FDS: u64 = 256;
/// Entries of the core's registered file table: fewer than the
/// connections, so both kinds of stream (by index and by descriptor) are
/// served at once.
const REGISTERED_FILES: u32 = 10_000;
/// Clients connect and echo in batches of this many: each batch is echoed
/// before the next connects, which keeps the listener's accept queue
/// (1,024) from overflowing on a loaded machine.
const BATCH: usize = 500;
/// Where the client process finds the server, and how many to open.
const ADDRESS_ENV: &str = "SHARDS_MANY_CONNECTIONS_ADDRESS";
const COUNT_ENV: &str = "SHARDS_MANY_CONNECTIONS_COUNT";

/// Descriptors this process has open now.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// What the server core reports every few milliseconds: operations in
/// flight, registered file indexes in use and streams left on their
/// descriptor, and the receive buffer ring.
type Snapshot = (usize, shards::FileTableStats, shards::RecvBufferStats);

/// Waits until the core's snapshot satisfies `done` (30 s at most).
fn wait_for_snapshot(
    stats: &Mutex<Option<Snapshot>>,
    what: &str,
    done: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = wait_for(stats);
        if done(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "{what}: {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fifteen_thousand_connections_on_one_core_all_echo_and_all_come_back() {
    let needed = CONNECTIONS as u64 + SPARE_FDS;
    let limit = raise_open_file_limit();
    if limit < needed {
        eprintln!(
            "SKIPPED: {CONNECTIONS} connections need an open-file limit of {needed} in each \
             process; the hard limit here is {limit} (raise it with `ulimit -Hn` as root)"
        );
        return;
    }
    let mut config = one_core();
    config.recv_buffers = 256;
    config.recv_buffer_bytes = 1024;
    config.recv_buffers_per_conn_max = 4;
    config.registered_files = REGISTERED_FILES;
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let stats = Arc::new(Mutex::new(None::<Snapshot>));
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
                        shards::file_table(),
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
    // The listener's accept alone, before any client.
    let (idle_ops, ..) = wait_for_snapshot(&stats, "at rest", |_| true);
    let fds_at_rest = open_fds();
    let mut clients = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "clients", "--ignored", "--nocapture"])
        .env(ADDRESS_ENV, address.to_string())
        .env(COUNT_ENV, CONNECTIONS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the client process starts");
    // Read to its end only once the process has ended (it reports more
    // after its echoes: a pipe closed early would fail its writes).
    let mut output = BufReader::new(clients.stdout.take().unwrap());
    let echoed = (&mut output)
        .lines()
        .find_map(|line| line.ok()?.strip_prefix("echoed ")?.parse::<usize>().ok())
        .expect("the client process reports its echoes");
    assert_eq!(echoed, CONNECTIONS, "connections that echoed");

    // All open at once: one receive each, both kinds of stream.
    let (ops, files, _) = wait_for_snapshot(&stats, "all open", |(ops, ..)| {
        *ops == idle_ops + CONNECTIONS
    });
    assert_eq!(ops, idle_ops + CONNECTIONS);
    if files.in_use > 0 {
        assert_eq!(files.in_use, REGISTERED_FILES, "{files:?}");
        assert_eq!(
            files.unregistered,
            (CONNECTIONS - REGISTERED_FILES as usize) as u64,
            "{files:?}"
        );
    }
    assert!(
        open_fds() >= fds_at_rest + CONNECTIONS,
        "the server holds a descriptor per connection"
    );

    // The clients close: every slot, index, buffer and descriptor returns.
    drop(clients.stdin.take());
    let status = clients.wait().expect("the client process ends");
    assert!(status.success(), "the client process failed: {status}");
    std::io::copy(&mut output, &mut std::io::sink()).unwrap();
    drop(output);
    wait_for_snapshot(&stats, "left after close", |(ops, files, buffers)| {
        *ops == idle_ops && files.in_use == 0 && buffers.lent == 0 && buffers.waiting == 0
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_fds() > fds_at_rest {
        assert!(
            Instant::now() < deadline,
            "descriptors left open: {fds_at_rest} at rest, {} after",
            open_fds()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// The client side of the test above, in a process of its own: opens
/// `COUNT_ENV` connections to `ADDRESS_ENV`, each echoing a payload of its
/// own, prints `echoed N`, and holds them open until its stdin closes.
#[test]
#[ignore = "the client process of fifteen_thousand_connections_on_one_core_all_echo_and_all_come_back"]
fn clients() {
    let address: SocketAddr = std::env::var(ADDRESS_ENV)
        .expect("run by the many-connections test")
        .parse()
        .unwrap();
    let count: usize = std::env::var(COUNT_ENV).unwrap().parse().unwrap();
    assert!(raise_open_file_limit() >= count as u64 + SPARE_FDS);
    let payload = |n: usize| format!("{n:06}:").repeat(20).into_bytes();
    let mut open = Vec::with_capacity(count);
    while open.len() < count {
        let first = open.len();
        let batch = BATCH.min(count - first);
        for n in first..first + batch {
            let mut client = common::connect(address, Duration::from_secs(30));
            client
                .write_all(&payload(n))
                .unwrap_or_else(|error| panic!("connection {n}: {error}"));
            open.push(client);
        }
        for (n, client) in open.iter_mut().enumerate().skip(first) {
            let want = payload(n);
            let mut back = vec![0u8; want.len()];
            client
                .read_exact(&mut back)
                .unwrap_or_else(|error| panic!("connection {n}: {error}"));
            assert_eq!(back, want, "connection {n}");
        }
    }
    println!("echoed {}", open.len());
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(open);
}
