//! The WebSocket listener against RFC 6455, case by case, as the
//! Autobahn|Testsuite fuzzing client numbers them (its sections 2, 3, 4,
//! 5 and 7; the `autobahntestsuite` package does not run on Python 3, so
//! its cases are written out here). Each case sends its frames right after
//! an upgrade and checks what the server sends back, byte for byte: pongs
//! with their payloads, and the close code. A case that does not close is
//! followed by a probe ping whose pong shows the session still open.
//!
//! Which cases apply, and how (all that apply pass):
//! - 1 (echo of text and binary messages): not applicable: the listener
//!   carries the client protocol (docs/protocol.md), not an echo; binary
//!   payloads are protocol frames (tests/gateway_websocket.rs);
//! - 2.1-2.11 (pings and pongs): all; a ping is answered with its payload,
//!   a ping over 125 bytes is 1002, unsolicited pongs are ignored;
//! - 3.1-3.7 (reserved bits): all, 1002;
//! - 4.1.1-4.2.5 (reserved opcodes): all, 1002;
//! - 5 (fragmentation): 5.1, 5.2 (fragmented controls, 1002), 5.9-5.14
//!   (continuations without a message, 1002), 5.15-5.18 (a new message
//!   inside a fragmented one, 1002), 5.19-5.20 (pings between fragments,
//!   answered); the text-message variants (5.3-5.8) are run with binary
//!   messages, since a text message is refused 1003 (the protocol is
//!   binary);
//! - 6 (UTF-8 in text messages): not applicable: every text message is
//!   refused with 1003 (case 6 below shows it); the UTF-8 of close reasons
//!   is 7.5.1;
//! - 7.1.1-7.1.6 (nothing after a close): all, nothing answered after the
//!   close;
//! - 7.3.1-7.3.6 (close payloads): all: empty, 1 byte (1002), a code, a
//!   reason, the longest reason, one over (1002);
//! - 7.5.1 (a reason that is not UTF-8): 1007;
//! - 7.7.1-7.7.13 (valid codes): all, echoed; 1012-1014 too;
//! - 7.9.1-7.9.9, 7.13.1-7.13.2 (invalid codes): all, 1002;
//! - 9 (performance), 10 (auto-fragmentation), 12-13 (compression): not
//!   applicable (no extensions are negotiated; the message bound is
//!   tests/gateway_websocket.rs's).

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use edge::tcp_connect;
use support::{config, TestNode};
use wire::websocket::{client_request, encode_masked, parse_client_response, Opcode};

const MASK: [u8; 4] = [0x5a, 0x13, 0xc4, 0x77];

/// What the server sends back in a case.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Back {
    Pong(Vec<u8>),
    Close(u16),
}

/// One client frame: fin, rsv bits, opcode (raw), payload.
fn frame(fin: bool, rsv: u8, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    // Any opcode: encode as binary, then put the raw opcode and bits in.
    encode_masked(&mut out, Opcode::Binary, payload, MASK);
    out[0] = (if fin { 0x80 } else { 0 }) | (rsv << 4) | opcode;
    out
}

fn ping(payload: &[u8]) -> Vec<u8> {
    frame(true, 0, 0x9, payload)
}

fn pong(payload: &[u8]) -> Vec<u8> {
    frame(true, 0, 0xA, payload)
}

fn close(payload: &[u8]) -> Vec<u8> {
    frame(true, 0, 0x8, payload)
}

fn close_code(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason);
    close(&payload)
}

/// A binary fragment (first) or a continuation, with `fin`.
fn binary(fin: bool, payload: &[u8]) -> Vec<u8> {
    frame(fin, 0, 0x2, payload)
}

fn continuation(fin: bool, payload: &[u8]) -> Vec<u8> {
    frame(fin, 0, 0x0, payload)
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// An upgraded connection and the bytes read past the 101.
fn upgraded(node: &TestNode) -> (TcpStream, Vec<u8>) {
    let mut stream = tcp_connect(node.websocket());
    let (request, key) = client_request("localhost", [3; 16]);
    stream.write_all(&request).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).expect("the 101");
        assert!(n > 0, "closed during the upgrade");
        answer.extend_from_slice(&buf[..n]);
        if let Some(taken) = parse_client_response(&answer, &key).unwrap() {
            return (stream, answer[taken..].to_vec());
        }
    }
}

/// The server's frames in `bytes` (unmasked, control payloads under 126
/// bytes), as far as they are whole; the rest stays.
fn server_frames(bytes: &mut Vec<u8>, out: &mut Vec<Back>) {
    loop {
        if bytes.len() < 2 {
            return;
        }
        assert_eq!(bytes[1] & 0x80, 0, "a masked server frame");
        let (len, at) = match bytes[1] & 0x7f {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => panic!("an unexpected 64-bit length"),
            short => (short as usize, 2),
        };
        if bytes.len() < at + len {
            return;
        }
        let payload = bytes[at..at + len].to_vec();
        assert_eq!(bytes[0] & 0x70, 0, "reserved bits from the server");
        match bytes[0] & 0x0f {
            0xA => out.push(Back::Pong(payload)),
            0x8 => {
                assert!(payload.len() >= 2, "a close without a code");
                out.push(Back::Close(u16::from_be_bytes([payload[0], payload[1]])));
            }
            other => panic!("server sent opcode {other:#x}"),
        }
        bytes.drain(..at + len);
    }
}

/// Runs one case: sends `send` (byte by byte when `chunked`), and checks
/// that the server answers `expect`. Without a close expected, a probe
/// ping must then be answered (the session is open); after a close, the
/// connection must end with nothing more.
fn run(node: &TestNode, case: &str, send: &[u8], chunked: bool, expect: &[Back]) {
    let (mut stream, mut pending) = upgraded(node);
    let closes = matches!(expect.last(), Some(Back::Close(_)));
    let chunks: Vec<&[u8]> = if chunked {
        send.chunks(1).collect()
    } else {
        vec![send]
    };
    for chunk in chunks {
        if let Err(error) = stream.write_all(chunk) {
            // A server that closes on the bytes it has (a bad first
            // frame) may do so before a slow client wrote the rest; the
            // close it sent is still read below.
            let gone = matches!(
                error.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            );
            assert!(closes && gone, "case {case}: {error}");
            break;
        }
    }
    let mut expect = expect.to_vec();
    if !closes {
        // Ignored if the server closed (then the case fails below).
        let _ = stream.write_all(&ping(b"probe"));
        expect.push(Back::Pong(b"probe".to_vec()));
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < expect.len() && Instant::now() < deadline {
        server_frames(&mut pending, &mut got);
        if got.len() >= expect.len() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
    server_frames(&mut pending, &mut got);
    assert_eq!(got, expect, "case {case}");
    if closes {
        // Nothing after the close frame: the connection ends.
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("case {case}: {n} bytes after the close"),
        }
        assert!(pending.is_empty(), "case {case}: bytes after the close");
    }
}

fn pong_of(payload: &[u8]) -> Back {
    Back::Pong(payload.to_vec())
}

#[test]
fn autobahn_sections_2_to_7_as_they_apply() {
    let mut config = config();
    config.gateway.websocket_listen = Some("127.0.0.1:0".parse().unwrap());
    let node = TestNode::start(config);
    let binary_payload: Vec<u8> = (0..8u8).chain([0xfe, 0xff]).collect();

    // 2: pings and pongs.
    run(&node, "2.1", &ping(b""), false, &[pong_of(b"")]);
    run(
        &node,
        "2.2",
        &ping(b"Hello, world!"),
        false,
        &[pong_of(b"Hello, world!")],
    );
    run(
        &node,
        "2.3",
        &ping(&binary_payload),
        false,
        &[pong_of(&binary_payload)],
    );
    run(
        &node,
        "2.4",
        &ping(&[0xfe; 125]),
        false,
        &[pong_of(&[0xfe; 125])],
    );
    run(
        &node,
        "2.5",
        &ping(&[0xfe; 126]),
        false,
        &[Back::Close(1002)],
    );
    run(
        &node,
        "2.6",
        &ping(&[0xfe; 125]),
        true,
        &[pong_of(&[0xfe; 125])],
    );
    run(&node, "2.7", &pong(b""), false, &[]);
    run(&node, "2.8", &pong(b"unsolicited pong payload"), false, &[]);
    let unsolicited_then_ping = cat(&[pong(b"unsolicited"), ping(b"my ping")]);
    run(
        &node,
        "2.9",
        &unsolicited_then_ping,
        false,
        &[pong_of(b"my ping")],
    );
    let ten: Vec<Vec<u8>> = (0..10)
        .map(|i| ping(format!("ping {i}").as_bytes()))
        .collect();
    let ten_pongs: Vec<Back> = (0..10)
        .map(|i| pong_of(format!("ping {i}").as_bytes()))
        .collect();
    run(&node, "2.10", &cat(&ten), false, &ten_pongs);
    run(&node, "2.11", &cat(&ten), true, &ten_pongs);

    // 3: reserved bits, on a binary, ping and close frame, after a ping.
    for (case, rsv, opcode) in [
        ("3.1", 1, 0x2),
        ("3.2", 2, 0x2),
        ("3.3", 3, 0x2),
        ("3.4", 4, 0x2),
        ("3.5", 5, 0x2),
        ("3.6", 6, 0x9),
        ("3.7", 7, 0x8),
    ] {
        let send = cat(&[ping(b"first"), frame(true, rsv, opcode, b"x")]);
        run(
            &node,
            case,
            &send,
            false,
            &[pong_of(b"first"), Back::Close(1002)],
        );
    }

    // 4: reserved opcodes, with and without a payload.
    for (case, opcode) in [
        ("4.1.1", 3),
        ("4.1.2", 4),
        ("4.1.3", 5),
        ("4.1.4", 6),
        ("4.1.5", 7),
        ("4.2.1", 0xB),
        ("4.2.2", 0xC),
        ("4.2.3", 0xD),
        ("4.2.4", 0xE),
        ("4.2.5", 0xF),
    ] {
        run(
            &node,
            case,
            &frame(true, 0, opcode, b""),
            false,
            &[Back::Close(1002)],
        );
        let with_payload = cat(&[ping(b"p"), frame(true, 0, opcode, b"reserved")]);
        run(
            &node,
            case,
            &with_payload,
            false,
            &[pong_of(b"p"), Back::Close(1002)],
        );
    }

    // 5: fragmentation.
    let fragmented_ping = cat(&[frame(false, 0, 0x9, b"frag"), continuation(true, b"ment")]);
    run(&node, "5.1", &fragmented_ping, false, &[Back::Close(1002)]);
    let fragmented_pong = cat(&[frame(false, 0, 0xA, b"frag"), continuation(true, b"ment")]);
    run(&node, "5.2", &fragmented_pong, false, &[Back::Close(1002)]);
    // 5.3-5.5 with binary messages: whole fragments, sent at once or in
    // chunks, are reassembled (nothing answered: no protocol frame ends).
    let two = cat(&[binary(false, b"frag"), continuation(true, b"ment")]);
    run(&node, "5.3", &two, false, &[]);
    run(&node, "5.5", &two, true, &[]);
    // 5.6-5.8: a ping between fragments is answered at once.
    let with_ping = cat(&[
        binary(false, b"frag"),
        ping(b"between"),
        continuation(true, b"ment"),
    ]);
    run(&node, "5.6", &with_ping, false, &[pong_of(b"between")]);
    run(&node, "5.8", &with_ping, true, &[pong_of(b"between")]);
    // 5.9-5.14: continuations that continue nothing.
    let lone_final = cat(&[continuation(true, b"x"), binary(true, b"")]);
    run(&node, "5.9", &lone_final, false, &[Back::Close(1002)]);
    run(&node, "5.10", &lone_final, true, &[Back::Close(1002)]);
    let lone = cat(&[continuation(false, b"x"), binary(true, b"")]);
    run(&node, "5.12", &lone, false, &[Back::Close(1002)]);
    run(&node, "5.13", &lone, true, &[Back::Close(1002)]);
    // 5.15-5.18: a message whole, then a continuation of nothing, or a new
    // message inside a fragmented one.
    let after_whole = cat(&[
        binary(false, b"a"),
        continuation(true, b"b"),
        continuation(false, b"c"),
    ]);
    run(&node, "5.15", &after_whole, false, &[Back::Close(1002)]);
    let nested = cat(&[binary(false, b"a"), binary(true, b"b")]);
    run(&node, "5.18", &nested, false, &[Back::Close(1002)]);
    // 5.19-5.20: pings between many fragments, at once and chunked.
    let many = cat(&[
        binary(false, b"1"),
        continuation(false, b"2"),
        ping(b"pongme 1!"),
        continuation(false, b"3"),
        continuation(false, b"4"),
        ping(b"pongme 2!"),
        continuation(true, b"5"),
    ]);
    let both = [pong_of(b"pongme 1!"), pong_of(b"pongme 2!")];
    run(&node, "5.19", &many, false, &both);
    run(&node, "5.20", &many, true, &both);

    // 6: any text message, valid UTF-8 or not, is refused (binary only).
    run(
        &node,
        "6 (text)",
        &frame(true, 0, 0x1, "κόσμε".as_bytes()),
        false,
        &[Back::Close(1003)],
    );

    // 7.1: nothing is answered after a close.
    run(
        &node,
        "7.1.2",
        &cat(&[close_code(1000, b""), close_code(1000, b"")]),
        false,
        &[Back::Close(1000)],
    );
    run(
        &node,
        "7.1.3",
        &cat(&[close_code(1000, b""), ping(b"after")]),
        false,
        &[Back::Close(1000)],
    );
    let text_after = cat(&[close_code(1000, b""), frame(true, 0, 0x1, b"after")]);
    run(&node, "7.1.4", &text_after, false, &[Back::Close(1000)]);
    let fragment_after = cat(&[
        binary(false, b"a"),
        close_code(1000, b""),
        continuation(true, b"b"),
    ]);
    run(&node, "7.1.5", &fragment_after, false, &[Back::Close(1000)]);

    // 7.3: close payloads.
    run(&node, "7.3.1", &close(b""), false, &[Back::Close(1000)]);
    run(&node, "7.3.2", &close(&[0x03]), false, &[Back::Close(1002)]);
    run(
        &node,
        "7.3.3",
        &close_code(1000, b""),
        false,
        &[Back::Close(1000)],
    );
    run(
        &node,
        "7.3.4",
        &close_code(1000, b"Hello World!"),
        false,
        &[Back::Close(1000)],
    );
    run(
        &node,
        "7.3.5",
        &close_code(1000, &[b'*'; 123]),
        false,
        &[Back::Close(1000)],
    );
    run(
        &node,
        "7.3.6",
        &close_code(1000, &[b'*'; 124]),
        false,
        &[Back::Close(1002)],
    );

    // 7.5.1: a reason that is not UTF-8.
    let not_utf8 =
        b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64";
    run(
        &node,
        "7.5.1",
        &close_code(1000, not_utf8),
        false,
        &[Back::Close(1007)],
    );

    // 7.7: codes that may be sent are echoed.
    for code in [
        1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000,
        4999,
    ] {
        let case = format!("7.7 ({code})");
        run(
            &node,
            &case,
            &close_code(code, b""),
            false,
            &[Back::Close(code)],
        );
    }
    // 7.9 and 7.13: codes that may not be sent are 1002.
    for code in [
        0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
    ] {
        let case = format!("7.9 ({code})");
        run(
            &node,
            &case,
            &close_code(code, b""),
            false,
            &[Back::Close(1002)],
        );
    }
    node.wait_metric(
        "routerd_gateway_websocket_protocol_errors_total{code=\"1007\"}",
        1,
    );
}
