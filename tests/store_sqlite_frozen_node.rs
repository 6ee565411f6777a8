//! On one SQLite file, a node frozen (SIGSTOP) while it serves reads does
//! not take the other nodes down with it: its loads and member lists run
//! in WAL read transactions, which never hold the write lock, so the other
//! nodes' heartbeats commit while it is stopped, and they never fence.
//!
//! Three real `routerd serve` processes share the file; node 3 is kept
//! busy with object loads (`GET /objects/100/N` of records with large
//! states, so that its store thread spends most of its time reading) and
//! is frozen, again and again, for longer than `fence_after_ms`. A store
//! that read under the write lock would be frozen holding it, and the
//! other nodes' heartbeats could not commit until it resumed.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::cluster::{get_json, http_get, wait_members_up, LocalCluster, FENCE_AFTER_MS};

/// Freezes of node 3, each this long: past `fence_after_ms`, so a node
/// whose heartbeats waited for node 3 would fence.
const FREEZES: usize = 10;
const FREEZE: Duration = Duration::from_millis(FENCE_AFTER_MS + 300);
/// Between freezes: node 3 runs (and takes its load again).
const THAW: Duration = Duration::from_millis(400);
/// Threads loading objects on node 3.
const LOADERS: usize = 16;
/// Records the loads read, and the size of each one's state: a load then
/// takes long beside the HTTP request around it.
const RECORDS: u64 = 32;
const STATE_BYTES: usize = 1024 * 1024;
/// A type id no service uses: the records are only ever read.
const TYPE_ID: u32 = 100;

/// A load on `admin` that gives up quickly on a frozen node; its answer
/// does not matter, only that node 3 keeps reading.
fn load_once(admin: SocketAddr, player: u64) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&admin, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(300)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(300)));
    let request = format!(
        "GET /objects/{TYPE_ID}/{} HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n",
        player % RECORDS
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = Vec::new();
    stream.read_to_end(&mut response).is_ok()
}

fn fences(admin: SocketAddr) -> f64 {
    let (status, body) = http_get(admin, "/metrics");
    assert_eq!(status, 200);
    let exposition = support::prometheus::parse(&body).expect("exposition");
    exposition
        .value("routerd_router_fences_total", &[])
        .expect("routerd_router_fences_total")
}

fn fenced_gauge(admin: SocketAddr) -> f64 {
    let (_, body) = http_get(admin, "/metrics");
    let exposition = support::prometheus::parse(&body).expect("exposition");
    exposition
        .value("routerd_cluster_fenced", &[])
        .expect("routerd_cluster_fenced")
}

#[test]
fn a_frozen_reader_does_not_fence_the_other_nodes() {
    let cluster = LocalCluster::new();
    let one = cluster.start(1);
    let two = cluster.start(2);
    let three = cluster.start(3);
    for (node, peers) in [(&one, [2, 3]), (&two, [1, 3]), (&three, [1, 2])] {
        wait_members_up(node, &peers);
    }
    // Records with large states, written beside the nodes as another
    // process would.
    {
        let connection = rusqlite::Connection::open(cluster.db()).expect("the shared file");
        connection
            .busy_timeout(Duration::from_secs(5))
            .expect("busy timeout");
        let state = vec![0x5a_u8; STATE_BYTES];
        for id in 0..RECORDS {
            connection
                .execute(
                    "INSERT INTO routes (type_id, zone_id, object_id, owner_node, route_version, \
                     save_timepoint_ms, cas_version, state, owner_incarnation) \
                     VALUES (?1, 0, ?2, 99, 1, 0, 1, ?3, 1)",
                    rusqlite::params![TYPE_ID, id as i64, state],
                )
                .expect("a record inserted");
        }
    }
    let (status, body) = http_get(three.admin, &format!("/objects/{TYPE_ID}/1"));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("\"state_bytes\":{STATE_BYTES}")),
        "{body}"
    );
    let before = [fences(one.admin), fences(two.admin)];
    let stop = Arc::new(AtomicBool::new(false));
    let loads = Arc::new(AtomicU64::new(0));
    let loaders: Vec<_> = (0..LOADERS as u64)
        .map(|loader| {
            let (stop, loads, admin) = (stop.clone(), loads.clone(), three.admin);
            std::thread::spawn(move || {
                let mut player = loader * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    if load_once(admin, player) {
                        loads.fetch_add(1, Ordering::Relaxed);
                    }
                    player += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut watched = 0;
    for _ in 0..FREEZES {
        three.freeze();
        let frozen_at = std::time::Instant::now();
        while frozen_at.elapsed() < FREEZE {
            for node in [&one, &two] {
                let cluster = get_json(node.admin, "/cluster");
                assert_eq!(
                    cluster["fenced"], false,
                    "a node fenced while node 3 was frozen: {cluster}"
                );
                let (status, body) = http_get(node.admin, "/healthz");
                assert_eq!((status, body.as_str()), (200, "ok"));
            }
            watched += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        three.thaw();
        std::thread::sleep(THAW);
    }
    stop.store(true, Ordering::Relaxed);
    for loader in loaders {
        loader.join().expect("loader");
    }
    println!(
        "{} loads on node 3 over {FREEZES} freezes of {FREEZE:?}; {watched} checks",
        loads.load(Ordering::Relaxed)
    );
    assert!(
        loads.load(Ordering::Relaxed) > 0,
        "node 3 served no load at all"
    );
    assert!(watched >= FREEZES, "the freezes were watched");
    let after = [fences(one.admin), fences(two.admin)];
    assert_eq!(after, before, "nodes 1 and 2 fenced (fence counters)");
    for node in [&one, &two] {
        assert_eq!(fenced_gauge(node.admin), 0.0);
    }
    // Both still serve clients.
    for node in [&one, &two] {
        let mut client = node.connect();
        client.login(7, 1);
    }
}
