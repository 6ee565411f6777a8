//! Login, sys.ping before and after login, duplicate-login policies and the
//! kick-versus-disconnect race, over real TCP against a real node.

mod support;

use support::{token, unix_now, TestNode, SECRET};
use wire::client::{route, ErrorCode, FrameKind};

#[test]
fn login_tokens_and_ping_before_and_after() {
    let node = TestNode::start(support::config());
    let mut client = node.connect();

    let ping = client.call(route::SYS_PING, 1, b"before");
    assert_eq!(
        (ping.kind, ping.seq, ping.body.as_slice()),
        (FrameKind::Response, 1, &b"before"[..])
    );

    // Bad mac: a token signed with another secret.
    let forged = wire::token::mint(b"not-the-secret", 7, unix_now() + 60);
    let reply = client.call(route::AUTH_LOGIN, 2, forged.as_bytes());
    assert_eq!(reply.error_code(), ErrorCode::AuthFailed as u16);
    // Expired.
    let expired = wire::token::mint(SECRET.as_bytes(), 7, unix_now() - 1);
    let reply = client.call(route::AUTH_LOGIN, 3, expired.as_bytes());
    assert_eq!(reply.error_code(), ErrorCode::AuthFailed as u16);
    assert!(
        reply.error_reason().contains("expired"),
        "{}",
        reply.error_reason()
    );
    // Malformed.
    for (seq, bad) in [(4, &b"v1.7"[..]), (5, b""), (6, b"\xff\xfe garbage")] {
        let reply = client.call(route::AUTH_LOGIN, seq, bad);
        assert_eq!(reply.error_code(), ErrorCode::AuthFailed as u16);
    }
    // Still unbound after failures.
    let reply = client.call(route::PLAYER_GET, 7, b"");
    assert_eq!(reply.error_code(), ErrorCode::AuthRequired as u16);

    client.login(7, 8);
    // After login, sys.ping is answered by the player object.
    let ping = client.call(route::SYS_PING, 9, b"after");
    assert_eq!(
        (ping.kind, ping.seq, ping.body.as_slice()),
        (FrameKind::Response, 9, &b"after"[..])
    );
    // A second login on a logged-in session.
    let reply = client.call(route::AUTH_LOGIN, 10, token(7, 60).as_bytes());
    assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16);
    assert_eq!(node.metric("routerd_gateway_binds_total"), 1);
}

#[test]
fn kick_old_kicks_the_old_session_and_binds_the_new() {
    let node = TestNode::start(support::config());
    // Two connections usually land on different cores (SO_REUSEPORT), so
    // the kick crosses the mesh; either way the behaviour is the same.
    let mut old = node.connect();
    old.login(42, 1);
    let mut new = node.connect();
    new.login(42, 1);
    let kicked = old.recv();
    assert_eq!(
        (kicked.kind, kicked.route_id, kicked.seq),
        (FrameKind::Push, route::SYS_KICKED, 0)
    );
    assert!(!kicked.body.is_empty());
    old.expect_closed();
    let ping = new.call(route::SYS_PING, 2, b"still here");
    assert_eq!(ping.body, b"still here");
    node.wait_metric("routerd_gateway_kicks_total", 1);
    node.wait_metric("routerd_gateway_notices_total{kind=\"unbound\"}", 1);
}

#[test]
fn single_policy_rejects_the_second_login() {
    let mut config = support::config();
    config.auth.duplicate_login = routerd::config::DuplicateLogin::Single;
    let node = TestNode::start(config);
    let mut first = node.connect();
    first.login(5, 1);
    let mut second = node.connect();
    let reply = second.call(route::AUTH_LOGIN, 1, token(5, 60).as_bytes());
    assert_eq!(reply.error_code(), ErrorCode::AuthFailed as u16);
    assert!(!reply.error_reason().is_empty());
    assert_eq!(first.call(route::SYS_PING, 2, b"x").body, b"x");
    // Once the first leaves, the player may log in again.
    first.shutdown();
    node.wait_metric("routerd_gateway_sessions_active", 1);
    second.login(5, 2);
}

#[test]
fn kick_racing_disconnect_notifies_once() {
    let node = TestNode::start(support::config());
    const ROUNDS: u64 = 20;
    let mut survivors = Vec::new();
    for player in 1..=ROUNDS {
        let mut old = node.connect();
        old.login(player, 1);
        // The old connection closes while the new login kicks it.
        let closer = std::thread::spawn(move || old.shutdown());
        let mut new = node.connect();
        new.login(player, 1);
        closer.join().unwrap();
        survivors.push(new);
    }
    node.wait_metric("routerd_gateway_sessions_active", ROUNDS as i64);
    let unbound = node.metric("routerd_gateway_notices_total{kind=\"unbound\"}");
    let disconnected = node.metric("routerd_gateway_notices_total{kind=\"disconnected\"}");
    assert_eq!(
        unbound + disconnected,
        ROUNDS as i64,
        "unbound {unbound} disconnected {disconnected}"
    );
    for mut client in survivors {
        assert_eq!(client.call(route::SYS_PING, 9, b"ok").body, b"ok");
    }
}

#[test]
fn a_session_is_kicked_when_its_token_expires() {
    let node = TestNode::start(support::config());
    let mut client = node.connect();
    // Valid for the rest of this second and the next: expiry is 2 s away
    // at most, and the gateway's sweep runs every second.
    let expiry = unix_now() + 2;
    let short = wire::token::mint(SECRET.as_bytes(), 7, expiry);
    let reply = client.call(route::AUTH_LOGIN, 1, short.as_bytes());
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    let ping = client.call(route::SYS_PING, 2, b"still valid");
    assert_eq!(ping.body, b"still valid");
    // recv's read timeout (3 s) bounds the wait: the kick comes within
    // about a second of expiry.
    let kicked = client.recv();
    assert!(unix_now() >= expiry, "kicked before its token expired");
    assert_eq!(
        (kicked.kind, kicked.route_id, kicked.body.as_slice()),
        (FrameKind::Push, route::SYS_KICKED, &b"token expired"[..])
    );
    client.expect_closed();
    node.wait_metric("routerd_gateway_token_expired_kicks_total", 1);
}
