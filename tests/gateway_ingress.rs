//! Every ingress rejection code, TIMEOUT, a request pipelined behind login,
//! and a stale-epoch egress, over real TCP against a real node (the last
//! against the real gateway driver with a test player side).

mod support;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use routerd::gateway::driver::{serve, GatewayShared};
use routerd::gateway::{EgressRef, GatewayHandle};
use routerd::metrics::CoreMetrics;
use routerd::store::Fault;
use shards::{CorePlacement, Runtime, RuntimeConfig, ShutdownHandle};
use support::port::RecordingPort;
use support::{token, TestNode};
use wire::client::{encode_frame, route, ErrorCode, FrameKind};
use wire::frame::FrameBuf;

fn node() -> TestNode {
    let mut config = support::config();
    config.gateway.inflight_max = 4;
    config.gateway.request_timeout_ms = 300;
    TestNode::start(config)
}

#[test]
fn rejections_overload_duplicate_and_timeout() {
    let mut config = support::config();
    config.gateway.inflight_max = 4;
    config.gateway.request_timeout_ms = 300;
    let (node, faults) = TestNode::start_with_faults(config);
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
    // The store calls the login set off (its player is made ready after
    // the login's answer leaves) end before the fault is set: it is meant
    // for the room's load, and a call before that one would take it (5 of
    // 30 runs failed so). A read waits for the player; the pause lets any
    // save it started end.
    assert_eq!(
        client.call(route::PLAYER_GET, 7, b"").kind,
        FrameKind::Response
    );
    std::thread::sleep(Duration::from_millis(100));

    // The room's first store call (its load) answers after a second: the
    // joins relayed to it wait behind it past request_timeout, as they
    // would for an owner that died. Fill inflight_max with them.
    assert!(faults.inject(Fault::Delay(Duration::from_secs(1)), 1));
    let room = 77u64.to_le_bytes();
    let started = Instant::now();
    for seq in 10..14 {
        client.send(route::ROOM_JOIN, seq, &room);
    }
    let dup = client.call(route::ROOM_JOIN, 10, &room);
    assert_eq!(
        (dup.seq, dup.error_code()),
        (10, ErrorCode::BadRequest as u16)
    );
    let over = client.call(route::ROOM_JOIN, 14, &room);
    assert_eq!(
        (over.seq, over.error_code()),
        (14, ErrorCode::Overloaded as u16)
    );
    // Each of the four gets exactly one TIMEOUT, after request_timeout.
    let mut timed_out: Vec<u32> = (0..4)
        .map(|_| {
            let reply = client.recv();
            assert_eq!(reply.error_code(), ErrorCode::Timeout as u16);
            assert_eq!(reply.route_id, route::ROOM_JOIN);
            reply.seq
        })
        .collect();
    timed_out.sort_unstable();
    assert_eq!(timed_out, [10, 11, 12, 13]);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The slots are free again, and nothing else was queued. Once the
    // delayed load is done, the player object answers too.
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
    // Nothing was written after the TIMEOUTs: the next frame is the ping's.
    // Each of the four joins either ran late, its answer dropped by the
    // gateway, or was dropped unrun by the router, past its timeout in the
    // core's input queue: a join that waited out the delayed store call
    // before the room's queue took it is dropped, one that waited in the
    // room's queue runs.
    assert_eq!(client.call(route::SYS_PING, 16, b"q").body, b"q");
    let late = node.metric("routerd_gateway_late_answers_total");
    let dropped = node.metric("routerd_router_requests_expired_total");
    assert_eq!(late + dropped, 4, "{late} late, {dropped} dropped unrun");
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

#[test]
fn stale_epoch_egress_is_dropped_and_counted() {
    // A reply computed under an older binding must never reach the wire.
    // With one node no client can produce one (the auth service binds
    // before the next frame is read, and a session's epoch changes again
    // only when it ends), so the player side here is a test port that
    // sends, over the real gateway driver and a real TCP connection, a
    // PUSH under the epoch before login and then one under the current.
    let mut runtime_config = RuntimeConfig::new(CorePlacement::Unpinned(1));
    runtime_config.recv_buffers = 64;
    runtime_config.shutdown_deadline = Duration::from_secs(1);
    let config = support::config();
    let shared = Arc::new(GatewayShared {
        node_id: config.node.id,
        config: config.gateway.clone(),
        secret: support::SECRET.as_bytes().to_vec(),
        boot_incarnation: 1,
        sessions_open: Arc::new(AtomicU32::new(0)),
        routes: Arc::new(routerd::builtins::builtin_routes()),
        resume: Default::default(),
    });
    let metrics = Arc::new(CoreMetrics::default());
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let shutdown = ShutdownHandle::new();
    let core_metrics = metrics.clone();
    let runtime =
        Runtime::start::<FrameBuf, _, _>(&runtime_config, shutdown.clone(), move |core| {
            let (shared, metrics, address_tx, go_rx) = (
                shared.clone(),
                core_metrics.clone(),
                address_tx.clone(),
                go_rx.clone(),
            );
            async move {
                let listener =
                    shards::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
                address_tx.send(listener.local_addr()).unwrap();
                let gateway = GatewayHandle::new(core.id(), core.mesh().clone(), &shared, metrics);
                let bound = Rc::new(RefCell::new(Vec::new()));
                gateway.set_services_side(Rc::new(RecordingPort::plugged(&gateway, &bound)));
                shards::spawn(serve(gateway.clone(), listener, Vec::new())).detach();
                core.ready();
                // Wait (polling: the test thread is not on this executor) for
                // the client's login.
                let deadline = Instant::now() + Duration::from_secs(10);
                while go_rx.lock().unwrap().try_recv().is_err() && Instant::now() < deadline {
                    shards::sleep(Duration::from_millis(2)).await;
                }
                let (session_id, epoch, player_id) = bound.borrow()[0];
                for (session_epoch, body) in [(epoch - 1, &b"stale"[..]), (epoch, &b"current"[..])]
                {
                    gateway.egress_ref(
                        &EgressRef {
                            session_id,
                            session_epoch,
                            player_id,
                            kind: FrameKind::Push as u8,
                            route_id: route::ROOM_MESSAGE,
                            seq: 0,
                            body,
                            connection: None,
                        },
                        Instant::now,
                    );
                }
                core.shutdown().wait().await;
            }
        })
        .expect("runtime starts");
    let address = address_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the core listens");
    let mut client = support::Client::connect(address);
    client.login(5, 1);
    go_tx.send(()).unwrap();
    let push = client.recv();
    assert_eq!(
        (push.kind, push.route_id, push.body.as_slice()),
        (FrameKind::Push, route::ROOM_MESSAGE, &b"current"[..]),
        "the stale PUSH never reached the wire"
    );
    assert_eq!(metrics.gateway.egress_stale_epoch.get(), 1);
    shutdown.trigger();
    runtime.join().expect("the core exits cleanly");
}
