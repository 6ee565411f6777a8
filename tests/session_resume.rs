//! Resumable sessions through a real node (docs/protocol.md, section 12):
//! a version-2 login gets its `sys.session` token and numbered room
//! pushes; a connection cut (by a proxy in the test) in the middle of a
//! stream of pushes is resumed on a new one, over and over, landing on
//! whichever core the kernel picks, and every push after the last one seen
//! arrives once, in order, before new ones; the token resumes once; an old
//! connection still open is kicked; a late resume is `resume window
//! expired`; more pushes than kept are `pushes lost`.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use routerd::config::DuplicateLogin;
use support::{Client, TestNode};
use wire::client::{encode_keyed_request, route, ErrorCode, FrameKind};

const ROOM: u64 = 7;

/// A TCP proxy for one connection, which the test can cut (both ways, at
/// once) as a lost mobile network would.
struct Proxy {
    address: SocketAddr,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let streams = Arc::new(Mutex::new(Vec::new()));
        let held = streams.clone();
        std::thread::spawn(move || {
            let (client, _) = listener.accept().unwrap();
            let server = TcpStream::connect(upstream).unwrap();
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            held.lock()
                .unwrap()
                .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
            let (up_from, up_to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || copy(up_from, up_to));
            copy(server, client);
        });
        Proxy { address, streams }
    }

    /// Ends both connections: the client and the server each see theirs
    /// end, whatever was in flight between them.
    fn cut(&self) {
        for stream in self.streams.lock().unwrap().iter() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// A version-2 `auth.login`: the RESPONSE, then the `sys.session` PUSH;
/// returns its token and window.
fn login_v2(client: &mut Client, player_id: u64) -> ([u8; 16], u32) {
    let token = support::token(player_id, 3600);
    let mut frame = Vec::new();
    encode_keyed_request(&mut frame, route::AUTH_LOGIN, 1, 0, token.as_bytes());
    client.send_raw(&frame);
    let login = client.recv();
    assert_eq!(login.kind, FrameKind::Response, "{login:?}");
    assert_eq!(login.body, player_id.to_le_bytes());
    let session = client.recv();
    assert_eq!(
        (session.kind, session.route_id, session.seq),
        (FrameKind::Push, route::SYS_SESSION, 0)
    );
    assert_eq!(session.body.len(), 20);
    let window = u32::from_le_bytes(session.body[16..].try_into().unwrap());
    (session.body[..16].try_into().unwrap(), window)
}

/// Sends `auth.resume` (request 1) and returns its answer.
fn resume(client: &mut Client, token: &[u8; 16], last_push_seq: u32) -> support::Reply {
    let mut body = token.to_vec();
    body.extend_from_slice(&last_push_seq.to_le_bytes());
    let mut frame = Vec::new();
    encode_keyed_request(&mut frame, route::AUTH_RESUME, 1, 0, &body);
    client.send_raw(&frame);
    client.recv()
}

fn assert_refused(reply: &support::Reply, reason: &str) {
    assert_eq!(reply.kind, FrameKind::Error, "{reply:?}");
    assert_eq!(reply.error_code(), ErrorCode::AuthFailed as u16);
    assert_eq!(reply.error_reason(), reason);
}

fn join(client: &mut Client, seq: u32) {
    let reply = client.call(route::ROOM_JOIN, seq, &ROOM.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
}

/// The speaker (a version-1 session in the room) says `text`; returns how
/// many members it reached.
fn say(speaker: &mut Client, seq: &mut u32, text: &str) -> u32 {
    *seq += 1;
    let mut body = ROOM.to_le_bytes().to_vec();
    body.extend_from_slice(text.as_bytes());
    speaker.send(route::ROOM_SAY, *seq, &body);
    let (mut count, mut pushed) = (None, false);
    while count.is_none() || !pushed {
        let frame = speaker.recv();
        match frame.kind {
            FrameKind::Response => {
                count = Some(u32::from_le_bytes(frame.body[..4].try_into().unwrap()))
            }
            FrameKind::Push => {
                assert_eq!(
                    frame.seq, 0,
                    "a version-1 session's pushes are not numbered"
                );
                pushed = true;
            }
            _ => panic!("{frame:?}"),
        }
    }
    count.unwrap()
}

/// Asserts `push` is the room message numbered `seq` whose text is the
/// `seq`-th said ("m1", "m2", ...).
fn assert_push(push: &support::Reply, seq: u32) {
    assert_eq!(
        (push.kind, push.route_id, push.seq),
        (FrameKind::Push, route::ROOM_MESSAGE, seq),
        "{push:?}"
    );
    assert_eq!(&push.body[..8], &ROOM.to_le_bytes());
    assert_eq!(push.body[16..], *format!("m{seq}").as_bytes());
}

#[test]
fn a_cut_connection_resumes_with_every_push_once_in_order() {
    let node = TestNode::start(support::config());
    let mut bob = node.connect();
    bob.login(2, 1);
    let mut bob_seq = 1;
    bob_seq += 1;
    join(&mut bob, bob_seq);

    let mut said = 0u32;
    let mut last_seen = 0u32;
    let mut token = None;
    // Each round: a connection through a proxy (a login first, a resume
    // after), a live stream of pushes, then three more said and the
    // connection cut in the middle of them, then three said while no
    // connection is there. Each new connection lands on either core.
    for round in 0..6 {
        let proxy = Proxy::start(node.gateway());
        let mut alice = Client::connect(proxy.address);
        match token {
            None => {
                let (issued, window) = login_v2(&mut alice, 1);
                assert_eq!(window, 30_000);
                token = Some(issued);
                join(&mut alice, 2);
            }
            Some(token) => {
                let answer = resume(&mut alice, &token, last_seen);
                assert_eq!(
                    answer.kind,
                    FrameKind::Response,
                    "round {round}: {answer:?}"
                );
                assert_eq!(answer.body, 1u64.to_le_bytes());
                for seq in last_seen + 1..=said {
                    assert_push(&alice.recv(), seq);
                }
            }
        }
        for _ in 0..3 {
            said += 1;
            assert_eq!(say(&mut bob, &mut bob_seq, &format!("m{said}")), 2);
            assert_push(&alice.recv(), said);
        }
        last_seen = said;
        for _ in 0..3 {
            said += 1;
            say(&mut bob, &mut bob_seq, &format!("m{said}"));
        }
        proxy.cut();
        while let Some(push) = alice.try_recv() {
            assert_push(&push, last_seen + 1);
            last_seen += 1;
        }
        // The player counts as logged in meanwhile: the room reaches it.
        for _ in 0..3 {
            said += 1;
            assert_eq!(say(&mut bob, &mut bob_seq, &format!("m{said}")), 2);
        }
    }
    // The last resume, on a direct connection: the missed pushes, then a
    // new one, numbered after them.
    let token = token.unwrap();
    let mut alice = node.connect();
    let answer = resume(&mut alice, &token, last_seen);
    assert_eq!(answer.kind, FrameKind::Response, "{answer:?}");
    for seq in last_seen + 1..=said {
        assert_push(&alice.recv(), seq);
    }
    said += 1;
    assert_eq!(say(&mut bob, &mut bob_seq, &format!("m{said}")), 2);
    assert_push(&alice.recv(), said);
    // Requests on the resumed connection run as the player's.
    let ping = alice.call(route::SYS_PING, 2, b"still me");
    assert_eq!(
        (ping.kind, ping.body.as_slice()),
        (FrameKind::Response, &b"still me"[..])
    );
    node.wait_metric("routerd_gateway_sessions_resumed_total", 6);

    // The token resumed the session once: its second use is refused.
    let mut thief = node.connect();
    assert_refused(&resume(&mut thief, &token, 0), "unknown session");
    // A token nobody issued is unknown too.
    assert_refused(&resume(&mut thief, &[9; 16], 0), "unknown session");
    node.wait_metric(
        "routerd_gateway_resumes_refused_total{reason=\"unknown\"}",
        2,
    );
}

#[test]
fn a_resume_kicks_the_old_connection_still_open() {
    let node = TestNode::start(support::config());
    let mut old = node.connect();
    let (token, _) = login_v2(&mut old, 3);
    let mut new = node.connect();
    let answer = resume(&mut new, &token, 0);
    assert_eq!(answer.kind, FrameKind::Response, "{answer:?}");
    assert_eq!(answer.body, 3u64.to_le_bytes());
    let kicked = old.recv();
    assert_eq!(
        (kicked.kind, kicked.route_id, kicked.body.as_slice()),
        (
            FrameKind::Push,
            route::SYS_KICKED,
            &b"resumed elsewhere"[..]
        )
    );
    old.expect_closed();
    // The session goes on, on the new connection.
    assert_eq!(new.call(route::SYS_PING, 2, b"p").body, b"p");
}

#[test]
fn a_resume_after_the_window_is_expired_and_the_player_logged_out() {
    let mut config = support::config();
    config.auth.resume_window_ms = 200;
    let node = TestNode::start(config);
    let mut bob = node.connect();
    bob.login(2, 1);
    let mut bob_seq = 2;
    join(&mut bob, bob_seq);
    let mut alice = node.connect();
    let (token, window) = login_v2(&mut alice, 1);
    assert_eq!(window, 200);
    join(&mut alice, 2);
    alice.shutdown();
    drop(alice);
    std::thread::sleep(Duration::from_millis(1200));
    // The window passed: Alice is logged out, as after a disconnect.
    assert_eq!(say(&mut bob, &mut bob_seq, "m1"), 1);
    let mut again = node.connect();
    assert_refused(&resume(&mut again, &token, 0), "resume window expired");
    node.wait_metric(
        "routerd_gateway_resumes_refused_total{reason=\"expired\"}",
        1,
    );
}

#[test]
fn more_pushes_than_kept_are_lost() {
    let mut config = support::config();
    config.auth.resume_pushes_max = 2;
    let node = TestNode::start(config);
    let mut bob = node.connect();
    bob.login(2, 1);
    let mut bob_seq = 2;
    join(&mut bob, bob_seq);
    let mut alice = node.connect();
    let (token, _) = login_v2(&mut alice, 1);
    join(&mut alice, 2);
    alice.shutdown();
    drop(alice);
    for n in 1..=3 {
        assert_eq!(say(&mut bob, &mut bob_seq, &format!("m{n}")), 2);
    }
    let mut again = node.connect();
    assert_refused(&resume(&mut again, &token, 0), "pushes lost");
    node.wait_metric(
        "routerd_gateway_resumes_refused_total{reason=\"pushes_lost\"}",
        1,
    );
    // Having seen the first, the client could still resume.
    let answer = resume(&mut again, &token, 1);
    assert_eq!(answer.kind, FrameKind::Response, "{answer:?}");
    assert_push(&again.recv(), 2);
    assert_push(&again.recv(), 3);
}

/// Under `multi` a client may log in and drop its connection over and
/// over, each session detached with its token and kept pushes for the
/// window: a node keeps no more detached sessions than
/// `gateway.sessions_max` (each core its share), the oldest ending first.
#[test]
fn login_and_close_cycles_leave_at_most_sessions_max_detached() {
    let mut config = support::config();
    config.auth.duplicate_login = DuplicateLogin::Multi;
    config.gateway.sessions_max = 8; // 4 detached sessions a core, at most
    let node = TestNode::start(config);
    let cycles = 12;
    for _ in 0..cycles {
        let mut client = node.connect();
        login_v2(&mut client, 5);
        client.shutdown();
        drop(client);
    }
    // Every session detached, or ended to keep the bound.
    let (mut active, mut evicted) = (0, 0);
    for _ in 0..500 {
        active = node.metric("routerd_gateway_sessions_active");
        evicted = node.metric("routerd_gateway_detached_evicted_total");
        if active + evicted == cycles && active <= 8 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(active <= 8, "{active} sessions kept, {evicted} ended");
    assert_eq!(active + evicted, cycles);
}

/// Under `kick_old`, device A's connection is lost, device B logs in and
/// kicks A's waiting session. A's resume is told `session kicked`: it
/// must not log in afresh (that would kick B), as after a `sys.kicked`.
#[test]
fn a_resume_of_a_session_kicked_while_it_waited_is_told_of_the_kick() {
    let node = TestNode::start(support::config());
    let mut device_a = node.connect();
    let (token, _) = login_v2(&mut device_a, 4);
    device_a.shutdown();
    drop(device_a);
    let mut device_b = node.connect();
    device_b.login(4, 1);
    node.wait_metric("routerd_gateway_kicks_total", 1);
    let mut again = node.connect();
    assert_refused(&resume(&mut again, &token, 0), "session kicked");
    node.wait_metric(
        "routerd_gateway_resumes_refused_total{reason=\"kicked\"}",
        1,
    );
    // B stays logged in.
    assert_eq!(device_b.call(route::SYS_PING, 2, b"b").body, b"b");
}
