//! The admin endpoint under clients that misbehave: idle connections do
//! not delay `/healthz`, a silent client is dropped, the bound on silent
//! connections holds and recovers, bodies are bounded, and `/healthz` says `stopping`
//! as soon as shutdown begins.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use routerd::admin::{CONNECTIONS_MAX, HEAD_READ_TIMEOUT, PENDING_HEADS_MAX};
use support::{config, TestNode};

/// One request on a fresh connection, head written as given: status and
/// body.
fn request(admin: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let answer = support::http::exchange(admin, head, body);
    (answer.status, answer.body)
}

fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    request(admin, &head, b"")
}

/// Whether the server closes `stream` within `within` (end of stream or a
/// reset), without sending anything.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("the server sent bytes to a client that asked nothing"),
        Err(error) => !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

#[test]
fn healthz_answers_within_100ms_while_ten_idle_connections_hold_the_port() {
    let node = TestNode::start(config());
    let admin = node.admin();
    let mut idle: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(admin).unwrap())
        .collect();
    // One more sends half a request head and stops.
    let mut half = TcpStream::connect(admin).unwrap();
    half.write_all(b"GET /heal").unwrap();
    idle.push(half);
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..5 {
        let started = Instant::now();
        assert_eq!(get(admin, "/healthz"), (200, "ok".to_string()));
        let took = started.elapsed();
        assert!(took < Duration::from_millis(100), "/healthz took {took:?}");
    }
    drop(idle);
}

#[test]
fn a_silent_client_is_dropped_after_the_head_read_timeout() {
    let node = TestNode::start(config());
    let admin = node.admin();
    let mut silent = TcpStream::connect(admin).unwrap();
    let started = Instant::now();
    assert!(closed_within(
        &mut silent,
        HEAD_READ_TIMEOUT + Duration::from_secs(2)
    ));
    assert!(started.elapsed() >= HEAD_READ_TIMEOUT - Duration::from_millis(200));

    // A client that asks without `Connection: close` gets its answer and
    // the connection closed: nothing idles in a slot.
    let mut asker = TcpStream::connect(admin).unwrap();
    asker
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    asker
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut response = String::new();
    asker.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// Silent connections hold no slot: past `PENDING_HEADS_MAX` of them the
/// oldest is closed for the newest, and a probe is answered all along.
#[test]
fn silent_connections_past_the_pending_bound_close_the_oldest_and_the_port_recovers() {
    let node = TestNode::start(config());
    let admin = node.admin();
    // Opened a few at a time: a burst past the listener's backlog leaves
    // connections the kernel completed but the server never accepted
    // (they would count as nothing here).
    let mut held: Vec<TcpStream> = Vec::new();
    for batch in 0..(PENDING_HEADS_MAX + CONNECTIONS_MAX).div_ceil(16) {
        let left = PENDING_HEADS_MAX + CONNECTIONS_MAX - batch * 16;
        held.extend((0..left.min(16)).map(|_| TcpStream::connect(admin).unwrap()));
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(get(admin, "/healthz"), (200, "ok".to_string()));
    // The first ones were closed for those that came after them.
    assert!(closed_within(&mut held[0], Duration::from_secs(1)));
    // The server accepts the backlog over a few polls: the count reaches
    // what the connections past the bound made, on a loaded machine later.
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.metric("routerd_admin_refused_total{reason=\"evicted\"}") < CONNECTIONS_MAX as i64 {
        assert!(
            Instant::now() < deadline,
            "fewer than {CONNECTIONS_MAX} connections evicted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        // The server notices the closed connections on its next poll.
        let mut probe = TcpStream::connect(admin).unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut response = String::new();
        if probe.read_to_string(&mut response).is_ok() && response.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the admin port did not recover");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn request_bodies_are_bounded_and_methods_checked() {
    let node = TestNode::start(config());
    let admin = node.admin();
    let big = vec![b'x'; 65 * 1024];
    let head = format!(
        "POST /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    assert_eq!(request(admin, &head, &big).0, 413);
    let head = format!(
        "POST /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"
    );
    assert_eq!(request(admin, &head, b"{}").0, 405);
    assert_eq!(get(admin, "/nope").0, 404);
}

#[test]
fn healthz_says_stopping_once_shutdown_begins() {
    let node = TestNode::start(config());
    let admin = node.admin();
    assert_eq!(get(admin, "/healthz"), (200, "ok".to_string()));
    node.shutdown_handle().trigger();
    assert_eq!(get(admin, "/healthz"), (503, "stopping".to_string()));
}
