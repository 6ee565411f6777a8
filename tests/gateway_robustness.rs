//! Protocol violations, idle and slow connections, and sessions_max: the
//! offending connection is closed and counted, its neighbours keep working;
//! at the cap a connection that never logged in makes room for a new one.
//! Connections past the registered file table: served, and counted.

mod support;

use std::io::Write;
use std::time::Duration;

use support::flood::SilentFlood;
use support::TestNode;
use wire::client::{encode_frame, route, ErrorCode, FrameKind, Header, HEADER_LEN};

fn header(kind: u8, body_len: u32) -> [u8; HEADER_LEN] {
    let mut bytes = Header {
        kind: FrameKind::Request,
        route_id: route::SYS_PING,
        seq: 1,
        body_len,
    }
    .encode();
    bytes[3] = kind;
    bytes
}

#[test]
fn protocol_violations_close_only_the_offender() {
    let mut config = support::config();
    config.gateway.body_max_bytes = 1024;
    let node = TestNode::start(config);
    let mut neighbour = node.connect();
    neighbour.login(1, 1);
    let mut bad_magic = header(1, 0);
    bad_magic[0] = b'X';
    let mut bad_version = header(1, 0);
    bad_version[2] = 2;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("bad magic", bad_magic.to_vec()),
        ("bad version", bad_version.to_vec()),
        (
            "response kind",
            header(FrameKind::Response as u8, 0).to_vec(),
        ),
        ("unknown kind", header(9, 0).to_vec()),
        ("oversized body_len", header(1, 1025).to_vec()),
    ];
    for (seq, (name, bytes)) in cases.iter().enumerate() {
        let mut offender = node.connect();
        // A valid request first: the violation must not lose its answer.
        assert_eq!(
            offender.call(route::SYS_PING, 100, b"ok").body,
            b"ok",
            "{name}"
        );
        offender.send_raw(bytes);
        if let Some(reply) = offender.try_recv() {
            assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16, "{name}");
        }
        offender.expect_closed();
        let ping = neighbour.call(route::SYS_PING, seq as u32 + 10, name.as_bytes());
        assert_eq!(ping.body, name.as_bytes(), "neighbour after {name}");
    }
    node.wait_metric(
        "routerd_gateway_ingress_rejected_total{reason=\"protocol_violation\"}",
        cases.len() as i64,
    );
}

#[test]
fn idle_and_half_frame_connections_are_closed() {
    let mut config = support::config();
    config.gateway.idle_timeout_ms = 300;
    let node = TestNode::start(config);
    let mut silent = node.connect();
    let mut half = node.connect();
    // A slow writer: a header promising 8 body bytes, then only 2, dribbled.
    let mut bytes = Vec::new();
    encode_frame(
        &mut bytes,
        FrameKind::Request,
        route::SYS_PING,
        1,
        b"12345678",
    );
    half.send_raw(&bytes[..HEADER_LEN]);
    half.send_raw(&bytes[HEADER_LEN..HEADER_LEN + 1]);
    std::thread::sleep(Duration::from_millis(150));
    half.send_raw(&bytes[HEADER_LEN + 1..HEADER_LEN + 2]);
    // A live client that keeps pinging survives the same period.
    let mut live = node.connect();
    for seq in 0..6 {
        assert_eq!(live.call(route::SYS_PING, seq, b"k").body, b"k");
        std::thread::sleep(Duration::from_millis(100));
    }
    silent.expect_closed();
    half.expect_closed();
    assert_eq!(live.call(route::SYS_PING, 99, b"k").body, b"k");
    node.wait_metric("routerd_gateway_idle_closed_total", 2);
}

#[test]
fn slow_reader_is_closed_and_max_sessions_refused() {
    let mut config = support::config();
    config.gateway.send_queue_max = 8;
    config.gateway.sessions_max = 3;
    let node = TestNode::start(config);
    let mut neighbour = node.connect();
    // A client that writes pings with large bodies and never reads: once
    // the kernel buffers fill, its queue fills and the gateway closes it.
    let slow = node.connect();
    let address = node.gateway();
    let writer = std::thread::spawn(move || {
        let _keep = slow;
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let body = vec![7u8; 60_000];
        let mut frame = Vec::new();
        encode_frame(&mut frame, FrameKind::Request, route::SYS_PING, 0, &body);
        for seq in 0..2000u32 {
            frame[8..12].copy_from_slice(&seq.to_le_bytes());
            if stream.write_all(&frame).is_err() {
                return true;
            }
        }
        false
    });
    assert!(writer.join().unwrap(), "the slow reader was never closed");
    node.wait_metric("routerd_gateway_slow_readers_closed_total", 1);
    assert_eq!(neighbour.call(route::SYS_PING, 1, b"fine").body, b"fine");

    // sessions_max = 3: the neighbour and two more, all logged in; the
    // fourth is refused (none of them may be evicted for it).
    node.wait_metric("routerd_gateway_sessions_active", 1);
    neighbour.login(1, 2);
    let mut second = node.connect();
    second.login(2, 1);
    let mut third = node.connect();
    third.login(3, 1);
    let mut refused = node.connect();
    refused.expect_closed();
    node.wait_metric("routerd_gateway_sessions_refused_total", 1);
    assert_eq!(second.call(route::SYS_PING, 2, b"2").body, b"2");
}

/// A flood of silent connections that fills the session cap keeps no
/// player out: each new connection evicts the oldest session that never
/// logged in, and one that logged in is never evicted. Once only players
/// hold the cap, the flood's connections are refused.
#[test]
fn silent_connections_at_the_session_cap_make_room_for_players() {
    let mut config = support::config();
    // Eviction takes a session of the accepting core: one core holds all.
    config.cores.count = 1;
    config.gateway.sessions_max = 8;
    let node = TestNode::start(config);
    let flood = SilentFlood::start(node.gateway(), 8, Duration::from_millis(20));
    node.wait_metric("routerd_gateway_sessions_active", 8);
    let mut players: Vec<_> = (1..=8)
        .map(|player| {
            let mut client = node.connect();
            client.login(player, 1);
            client
        })
        .collect();
    // Each player's connection evicted one; the flood's connections
    // opened again meanwhile evicted each other too.
    assert!(node.metric("routerd_gateway_unauthenticated_evicted_total") >= 8);
    let mut late = node.connect();
    late.expect_closed();
    assert!(node.metric("routerd_gateway_sessions_refused_total") >= 1);
    for (seq, player) in players.iter_mut().enumerate() {
        assert_eq!(
            player.call(route::SYS_PING, 2 + seq as u32, b"here").body,
            b"here"
        );
    }
    flood.stop();
}

/// Connections past the core's registered file table are served the same
/// (by descriptor) and counted.
#[test]
fn connections_past_the_registered_file_table_are_served_and_counted() {
    let mut config = support::config();
    // One core, so all four connections meet the same table of two.
    config.cores.count = 1;
    config.cores.registered_files = 2;
    let node = TestNode::start(config);
    let mut clients: Vec<_> = (0..4).map(|_| node.connect()).collect();
    for (index, client) in clients.iter_mut().enumerate() {
        let body = format!("client {index}");
        assert_eq!(
            client.call(route::SYS_PING, 1, body.as_bytes()).body,
            body.as_bytes()
        );
    }
    node.wait_metric("routerd_gateway_sessions_unregistered_total", 2);
}
