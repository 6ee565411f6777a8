//! A connection closing while its peer does not read: what it still owes
//! may hold the connection for `CLOSE_FLUSH_MAX` (5 s) at most, and holds
//! none of the core's receive buffers meanwhile. Before, its last send
//! stayed in the kernel for as long as the peer kept the TCP connection
//! up, with the session's slot, and every segment the peer sent took a
//! receive buffer of the core, up to its share of the ring: a few such
//! connections stalled every other connection of the core.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use support::TestNode;
use wire::client::{encode_frame, route, FrameKind, HEADER_LEN};

/// A connection with a 4 KiB receive buffer that fills the node's send
/// buffer with echoes of large pings and never reads them, then breaks
/// the protocol: the node closes the session, and its writer is left with
/// a send the peer never takes.
fn stuck_closing(address: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&address.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    // Each small write its own segment, and so a receive of its own.
    stream.set_nodelay(true).unwrap();
    let body = vec![7u8; 60_000];
    let mut frame = Vec::new();
    encode_frame(&mut frame, FrameKind::Request, route::SYS_PING, 0, &body);
    for seq in 0..100u32 {
        frame[8..12].copy_from_slice(&seq.to_le_bytes());
        stream.write_all(&frame).unwrap();
    }
    // Give the node the time to read them all and queue their echoes.
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(b"XXXXXXXXXXXXXXXX").unwrap();
    stream
}

/// Whether a new connection's `sys.ping` is answered (a connection the
/// node refuses is closed at once).
fn ping_answered(address: SocketAddr) -> bool {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut frame = Vec::new();
    encode_frame(&mut frame, FrameKind::Request, route::SYS_PING, 1, b"in");
    if stream.write_all(&frame).is_err() {
        return false;
    }
    // The answer is a header and the two bytes of the body.
    let mut answer = [0u8; HEADER_LEN + 2];
    stream.read_exact(&mut answer).is_ok() && &answer[HEADER_LEN..] == b"in"
}

fn config() -> routerd::config::Config {
    let mut config = support::config();
    // One core: the stuck connections and the fresh client share its ring.
    config.cores.count = 1;
    config.cores.recv_buffers = 64;
    config.cores.recv_buffers_per_conn_max = 32;
    // The echoes wait in the outbox rather than closing a slow reader.
    config.gateway.send_queue_bytes_max = 64 << 20;
    config
}

#[test]
fn segments_sent_to_a_closing_connection_take_no_receive_buffers() {
    let node = TestNode::start(config());
    let mut stuck: Vec<TcpStream> = (0..2).map(|_| stuck_closing(node.gateway())).collect();
    node.wait_metric(
        "routerd_gateway_ingress_rejected_total{reason=\"protocol_violation\"}",
        2,
    );
    // Each sends more segments than its share of the ring (32), a few
    // milliseconds apart so that each is a receive of its own.
    for _ in 0..40 {
        for stream in &mut stuck {
            stream.write_all(b"x").unwrap();
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    // A fresh client is served at once, long before the closing ones are
    // reset: the ring has its buffers.
    let started = Instant::now();
    let mut fresh = node.connect();
    assert_eq!(fresh.call(route::SYS_PING, 1, b"here").body, b"here");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(node.metric("routerd_gateway_close_flush_timeouts_total"), 0);
}

#[test]
fn a_closing_connection_whose_peer_never_reads_is_reset_and_gives_its_slot_back() {
    let mut config = config();
    config.gateway.sessions_max = 1;
    let node = TestNode::start(config);
    let started = Instant::now();
    let _stuck = stuck_closing(node.gateway());
    node.wait_metric(
        "routerd_gateway_ingress_rejected_total{reason=\"protocol_violation\"}",
        1,
    );
    // Its slot comes back once it is reset, 5 s after the close (and up to
    // the idle sweep's second later): then a new connection is served.
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        if ping_answered(node.gateway()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closing connection still holds the only session slot"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert_eq!(node.metric("routerd_gateway_close_flush_timeouts_total"), 1);
}
