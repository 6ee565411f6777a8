//! The WebSocket listener (`gateway.websocket_listen`): an independent
//! client (Python's `websockets`) logs in, increments and receives a room
//! push; every malformed case gets its documented close code or HTTP
//! status and its counter, and a session beside it is unharmed.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::io::{Read, Write};
use std::process::Command;

use edge::{tcp_connect, test_python, WsClient, WsEvent};
use routerd::config::Config;
use support::{config, Client, TestNode, SECRET};
use wire::client::{encode_frame, FrameKind};
use wire::websocket::{encode_frame as encode_ws, encode_masked, Opcode};

fn ws_config() -> Config {
    let mut config = config();
    config.gateway.websocket_listen = Some("127.0.0.1:0".parse().unwrap());
    config.gateway.body_max_bytes = 1024;
    config
}

/// A malformed case: its name, what it sends, the close code it gets.
type Case<'a> = (&'a str, &'a dyn Fn(&mut WsClient), u16);

fn ws(node: &TestNode) -> WsClient {
    WsClient::upgrade(Box::new(tcp_connect(node.websocket())))
}

#[test]
fn python_websockets_logs_in_increments_and_receives_a_room_push() {
    let Some(python) = test_python() else {
        return;
    };
    let node = TestNode::start(ws_config());
    let url = format!("ws://{}/", node.websocket());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/ws_session.py");
    let output = Command::new(python)
        .args([script, &url, SECRET, "31"])
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("room push") && stdout.ends_with("ok\n"),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    node.wait_metric("routerd_gateway_websocket_upgrades_total", 2);
}

#[test]
fn malformed_frames_close_with_their_codes_and_leave_other_sessions_alone() {
    let node = TestNode::start(ws_config());
    // The bystanders: one over plain TCP, one over WebSocket.
    let mut tcp = Client::connect(node.gateway());
    tcp.login(41, 1);
    let mut bystander = ws(&node);
    bystander.login(42, 1);
    let before = bystander.incr(2);

    let text = |client: &mut WsClient| client.send_message(Opcode::Text, b"hello");
    let unmasked = |client: &mut WsClient| {
        let mut bytes = Vec::new();
        encode_ws(&mut bytes, Opcode::Binary, b"abc");
        client.send_raw(&bytes);
    };
    let too_big = |client: &mut WsClient| client.send_message(Opcode::Binary, &[0; 2000]);
    let cases: [Case<'_>; 3] = [
        ("text message", &text, 1003),
        ("unmasked frame", &unmasked, 1002),
        ("message over the bound", &too_big, 1009),
    ];
    for (name, send, code) in cases {
        let mut client = ws(&node);
        send(&mut client);
        assert_eq!(client.expect_close(), Some(code), "{name}");
        assert_eq!(
            client.next(),
            WsEvent::Ended,
            "{name}: closed after the close frame"
        );
        node.wait_metric(
            &format!("routerd_gateway_websocket_protocol_errors_total{{code=\"{code}\"}}"),
            1,
        );
    }
    assert_eq!(bystander.incr(3), before + 1);
    let reply = tcp.call(wire::client::route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response);
}

#[test]
fn fragments_reassemble_pings_are_answered_and_answers_batch_into_messages() {
    let node = TestNode::start(ws_config());
    let mut client = ws(&node);
    client.login(51, 1);
    // Two incr requests in one message, cut into three fragments with a
    // ping between: both are answered, and the ping gets its pong.
    let mut frames = Vec::new();
    for seq in [2, 3] {
        encode_frame(
            &mut frames,
            FrameKind::Request,
            wire::client::route::PLAYER_INCR,
            seq,
            &1i64.to_le_bytes(),
        );
    }
    let (a, rest) = frames.split_at(10);
    let (b, c) = rest.split_at(20);
    let mut wire_bytes = Vec::new();
    let mut fragment = |opcode, fin: bool, payload: &[u8]| {
        let start = wire_bytes.len();
        encode_masked(&mut wire_bytes, opcode, payload, [5, 6, 7, 8]);
        if !fin {
            wire_bytes[start] &= 0x7f;
        }
    };
    fragment(Opcode::Binary, false, a);
    fragment(Opcode::Ping, true, b"are you there");
    fragment(Opcode::Continuation, false, b);
    fragment(Opcode::Continuation, true, c);
    client.send_raw(&wire_bytes);
    let mut seqs = Vec::new();
    let mut pongs = 0;
    while seqs.len() < 2 || pongs < 1 {
        match client.next() {
            WsEvent::Frame(reply) => {
                assert_eq!(reply.kind, FrameKind::Response);
                seqs.push(reply.seq);
            }
            WsEvent::Pong => pongs += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seqs, vec![2, 3]);
    // A fragment bound counts all fragments: two halves of 600 bytes are
    // over the 1040-byte message bound.
    let mut over = Vec::new();
    encode_masked(&mut over, Opcode::Binary, &[0; 600], [1, 1, 1, 1]);
    over[0] &= 0x7f;
    encode_masked(&mut over, Opcode::Continuation, &[0; 600], [1, 1, 1, 1]);
    client.send_raw(&over);
    assert_eq!(client.expect_close(), Some(1009));
}

#[test]
fn upgrades_without_the_right_headers_are_400_and_a_foreign_origin_403() {
    let mut config = ws_config();
    config.gateway.websocket_origins = vec!["https://game.example".into()];
    let node = TestNode::start(config);
    let mut tcp = Client::connect(node.gateway());
    tcp.login(61, 1);
    let ask = |request: &str| -> String {
        let mut stream = tcp_connect(node.websocket());
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    };
    let good = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let no_upgrade = good.replace("Upgrade: websocket\r\n", "");
    assert!(
        ask(&format!("{no_upgrade}Origin: https://game.example\r\n\r\n"))
            .starts_with("HTTP/1.1 400 ")
    );
    node.wait_metric(
        "routerd_gateway_websocket_upgrades_refused_total{status=\"400\"}",
        1,
    );
    assert!(
        ask(&format!("{good}Origin: https://evil.example\r\n\r\n")).starts_with("HTTP/1.1 403 ")
    );
    node.wait_metric(
        "routerd_gateway_websocket_upgrades_refused_total{status=\"403\"}",
        1,
    );
    let accepted = ask_until_101(
        &node,
        &format!("{good}Origin: https://game.example\r\n\r\n"),
    );
    assert!(
        accepted.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
        "{accepted}"
    );
    let reply = tcp.call(wire::client::route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response);
}

/// The answer's head to an upgrade that succeeds (the connection stays
/// open, so read only up to the blank line).
fn ask_until_101(node: &TestNode, request: &str) -> String {
    let mut stream = tcp_connect(node.websocket());
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "closed during the upgrade"
        );
        answer.push(byte[0]);
    }
    String::from_utf8(answer).unwrap()
}

#[test]
fn a_second_key_and_bare_lf_line_ends_are_400_at_once_and_a_dribbled_upgrade_is_closed() {
    let mut config = ws_config();
    config.gateway.websocket_upgrade_timeout_ms = 600;
    let node = TestNode::start(config);
    let mut tcp = Client::connect(node.gateway());
    tcp.login(62, 1);
    let good = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let ask = |request: &str| -> (String, std::time::Duration) {
        let started = std::time::Instant::now();
        let mut stream = tcp_connect(node.websocket());
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        (answer, started.elapsed())
    };
    let (twice, _) = ask(&format!(
        "{good}Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n"
    ));
    assert!(twice.starts_with("HTTP/1.1 400 "), "{twice}");
    // Bare LF line ends, and no blank line ever: refused at once, not at
    // a deadline.
    let (bare, took) = ask(&good.replace("\r\n", "\n"));
    assert!(bare.starts_with("HTTP/1.1 400 "), "{bare}");
    assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    node.wait_metric(
        "routerd_gateway_websocket_upgrades_refused_total{status=\"400\"}",
        2,
    );
    // A request dribbled a byte every 100 ms is closed at the upgrade
    // deadline, unanswered.
    let started = std::time::Instant::now();
    let mut dribbler = tcp_connect(node.websocket());
    dribbler
        .set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    let mut closed = false;
    for byte in good.as_bytes() {
        let _ = dribbler.write_all(std::slice::from_ref(byte));
        let mut buf = [0u8; 256];
        match dribbler.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(error) => {
                closed = !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
        if closed || started.elapsed() > std::time::Duration::from_secs(3) {
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "still open after {took:?}");
    assert!(
        took >= std::time::Duration::from_millis(500),
        "closed after {took:?}"
    );
    node.wait_metric("routerd_gateway_websocket_upgrade_timeouts_total", 1);
    let reply = tcp.call(wire::client::route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response);
}
