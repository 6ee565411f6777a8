//! Every ingress rejection code, TIMEOUT, and a stale-epoch egress, over
//! real TCP against a real node.

mod support;

use std::time::{Duration, Instant};

use routerd::store::Fault;
use support::{token, TestNode};
use wire::client::{encode_frame, route, ErrorCode, FrameKind};

fn node() -> TestNode {
    let mut config = support::config();
    config.gateway.max_inflight = 4;
    config.gateway.request_timeout_ms = 300;
    TestNode::start(config)
}

#[test]
fn rejections_overload_duplicate_and_timeout() {
    let mut config = support::config();
    config.gateway.max_inflight = 4;
    config.gateway.request_timeout_ms = 300;
    // The player object's first store call (its load at login) answers
    // after a second: its requests wait behind it past request_timeout, as
    // they would for an owner that died.
    let (node, faults) = TestNode::start_with_faults(config);
    assert!(faults.inject(Fault::Delay(Duration::from_secs(1)), 1));
    let mut client = node.connect();
    assert_eq!(
        client.call(12345, 1, b"").error_code(),
        ErrorCode::UnknownRoute as u16
    );
    assert_eq!(
        client.call(route::ROOM_MESSAGE, 2, b"").error_code(),
        ErrorCode::DirectionRejected as u16
    );
    assert_eq!(
        client.call(route::SYS_KICKED, 3, b"").error_code(),
        ErrorCode::DirectionRejected as u16
    );
    assert_eq!(
        client.call(route::PLAYER_GET, 4, b"").error_code(),
        ErrorCode::AuthRequired as u16
    );
    assert_eq!(
        client.call(route::ROOM_SAY, 5, b"").error_code(),
        ErrorCode::AuthRequired as u16
    );
    client.login(9, 6);

    // player.get waits for the delayed load: fill max_inflight.
    let started = Instant::now();
    for seq in 10..14 {
        client.send(route::PLAYER_GET, seq, b"");
    }
    let dup = client.call(route::PLAYER_GET, 10, b"");
    assert_eq!(
        (dup.seq, dup.error_code()),
        (10, ErrorCode::BadRequest as u16)
    );
    let over = client.call(route::PLAYER_GET, 14, b"");
    assert_eq!(
        (over.seq, over.error_code()),
        (14, ErrorCode::Overloaded as u16)
    );
    // Each of the four gets exactly one TIMEOUT, after request_timeout.
    let mut timed_out: Vec<u32> = (0..4)
        .map(|_| {
            let reply = client.recv();
            assert_eq!(reply.error_code(), ErrorCode::Timeout as u16);
            assert_eq!(reply.route_id, route::PLAYER_GET);
            reply.seq
        })
        .collect();
    timed_out.sort_unstable();
    assert_eq!(timed_out, [10, 11, 12, 13]);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The slots are free again, and nothing else was queued. Once the
    // delayed load is done, the player object answers.
    std::thread::sleep(Duration::from_millis(900));
    let ping = client.call(route::SYS_PING, 15, b"p");
    assert_eq!(
        (ping.kind, ping.seq, ping.body.as_slice()),
        (FrameKind::Response, 15, &b"p"[..])
    );

    let metric = |reason: &str| {
        node.metric(&format!(
            "routerd_gateway_ingress_rejected_total{{reason=\"{reason}\"}}"
        ))
    };
    assert_eq!(metric("unknown_route"), 1);
    assert_eq!(metric("direction_rejected"), 2);
    assert_eq!(metric("auth_required"), 2);
    assert_eq!(metric("overloaded"), 1);
    assert_eq!(metric("bad_request"), 1);
    assert_eq!(node.metric("routerd_gateway_timeouts_total"), 4);
    // The four answers the player object produced after the TIMEOUTs were
    // dropped, never written: the next frame is the ping's.
    assert_eq!(client.call(route::SYS_PING, 16, b"q").body, b"q");
    assert_eq!(node.metric("routerd_gateway_late_answers_total"), 4);
}

#[test]
fn a_request_pipelined_behind_login_sees_the_new_binding() {
    // The auth service answers each request as its frame is decoded, so a
    // request in the same read as `auth.login` is snapshotted after the
    // bind: a ping gets its RESPONSE (not a stale-epoch drop) and a route
    // that needs auth is accepted.
    let node = node();
    let mut client = node.connect();
    let mut bytes = Vec::new();
    encode_frame(
        &mut bytes,
        FrameKind::Request,
        route::AUTH_LOGIN,
        1,
        token(3, 60).as_bytes(),
    );
    encode_frame(&mut bytes, FrameKind::Request, route::SYS_PING, 2, b"after");
    encode_frame(&mut bytes, FrameKind::Request, route::PLAYER_GET, 3, b"");
    client.send_raw(&bytes);
    let login = client.recv();
    assert_eq!((login.kind, login.seq), (FrameKind::Response, 1));
    let ping = client.recv();
    assert_eq!(
        (ping.kind, ping.seq, ping.body.as_slice()),
        (FrameKind::Response, 2, &b"after"[..])
    );
    let get = client.recv();
    assert_eq!((get.kind, get.seq), (FrameKind::Response, 3), "{get:?}");
    assert_eq!(
        node.metric("routerd_gateway_egress_rejected_total{reason=\"stale_epoch\"}"),
        0
    );
}
