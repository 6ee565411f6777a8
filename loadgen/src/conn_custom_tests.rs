//! A connection speaking a custom workload, sans-IO: its setup requests
//! follow the login one at a time (an accepted ERROR counts as done, any
//! other fails the setup), and its requests go to their routes with the
//! bodies rendered, answered by any RESPONSE and failed by an ERROR under
//! its code.

use std::sync::Arc;

use wire::client::{
    encode_app_error_body, encode_frame, route, AppCode, FrameDecoder, FrameKind, Header, Peer,
};

use crate::cli::Proto;
use crate::conn::{Conn, Event, Window};
use crate::custom::Custom;
use crate::stats::{Failure, Stats};
use crate::workload::Op;

const ALL: Window = Window {
    start_ns: 0,
    end_ns: u64::MAX,
};

const WORKLOAD: &str = "\
setup make 300 u64:{player} str:g{player} accept=32770
setup join 301 u64:{player}
1 bump 304 u64:{player} i64:1
";

fn requests(conn: &mut Conn) -> Vec<(Header, Vec<u8>)> {
    let bytes = std::mem::take(conn.out_mut());
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
    assert_eq!(decoder.extend(&bytes), bytes.len());
    let mut out = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("valid frames") {
        out.push((frame.header, frame.body.to_vec()));
    }
    out
}

fn answer(conn: &mut Conn, kind: FrameKind, to: &Header, body: &[u8]) -> Vec<Event> {
    let mut bytes = Vec::new();
    encode_frame(&mut bytes, kind, to.route_id, to.seq, body);
    assert_eq!(conn.feed(&bytes), bytes.len());
    let mut events = Vec::new();
    conn.receive(0, ALL, &mut Stats::default(), &mut events)
        .expect("well framed");
    events
}

/// An ERROR body of an object type's own code (32768 and up).
fn error(code: u16) -> Vec<u8> {
    encode_app_error_body(AppCode::new(code).expect("an application code"), "refused")
}

fn logged_in_conn(player: u64) -> Conn {
    let custom = Custom::from_text(WORKLOAD, 1 << 16).expect("parses");
    let mut conn =
        Conn::new(Proto::Routerd, player, 0, 4, 1 << 16).with_custom(Some(Arc::new(custom)));
    conn.start_login("token", 0);
    let (login, _) = requests(&mut conn).remove(0);
    let events = answer(
        &mut conn,
        FrameKind::Response,
        &login,
        &player.to_le_bytes(),
    );
    assert!(events.is_empty(), "not ready before its setup: {events:?}");
    conn
}

#[test]
fn setup_requests_follow_the_login_in_order() {
    let mut conn = logged_in_conn(9);
    let (make, body) = requests(&mut conn).remove(0);
    assert_eq!(make.route_id, 300);
    assert_eq!(body[..8], 9u64.to_le_bytes());
    assert_eq!(&body[8..], b"g9");
    assert!(!conn.can_send());
    // The guild exists already: an accepted code, so on to the next.
    let events = answer(&mut conn, FrameKind::Error, &make, &error(32770));
    assert!(events.is_empty(), "{events:?}");
    let next = requests(&mut conn);
    assert_eq!(next.len(), 1, "one setup request at a time");
    let (join, body) = &next[0];
    assert_eq!(
        (join.route_id, body.as_slice()),
        (301, &9u64.to_le_bytes()[..])
    );
    let events = answer(&mut conn, FrameKind::Response, join, &1u32.to_le_bytes());
    assert_eq!(events, vec![Event::LoggedIn]);
    assert!(conn.can_send());

    // The measured requests: to the workload's route, answered by any
    // RESPONSE, failed by an ERROR under its code.
    let mut stats = Stats::default();
    for _ in 0..2 {
        conn.send(Op::Custom(0), b"rendered", 0, true, &mut stats)
            .expect("room");
    }
    let sent = requests(&mut conn);
    assert!(sent
        .iter()
        .all(|(h, b)| h.route_id == 304 && b == b"rendered"));
    for (header, kind, body) in [
        (&sent[0].0, FrameKind::Response, b"anything at all".to_vec()),
        (&sent[1].0, FrameKind::Error, error(32771)),
    ] {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, kind, header.route_id, header.seq, &body);
        conn.feed(&bytes);
    }
    conn.receive(0, ALL, &mut stats, &mut Vec::new())
        .expect("well framed");
    let bump = &stats.ops[Op::Custom(0).index()];
    assert_eq!((bump.sent, bump.responses), (2, 1));
    assert_eq!(bump.failed[Failure::Code(32771).slot()], 1);
    assert_eq!(stats.protocol_errors, 0);
}

#[test]
fn a_setup_error_not_accepted_fails_the_setup() {
    let mut conn = logged_in_conn(3);
    let (make, _) = requests(&mut conn).remove(0);
    let events = answer(&mut conn, FrameKind::Error, &make, &error(32771));
    match events.as_slice() {
        [Event::SetupFailed { reason, transient }] => {
            assert!(reason.starts_with("make failed: code 32771"), "{reason}");
            assert!(!transient);
        }
        other => panic!("{other:?}"),
    }
    assert!(!conn.can_send());
    // An answer to the wrong route is a protocol error, as for built-ins.
    let mut conn = logged_in_conn(4);
    let (make, _) = requests(&mut conn).remove(0);
    let wrong = Header {
        route_id: route::PLAYER_GET,
        ..make
    };
    let mut stats = Stats::default();
    let mut bytes = Vec::new();
    encode_frame(
        &mut bytes,
        FrameKind::Response,
        wrong.route_id,
        wrong.seq,
        b"",
    );
    conn.feed(&bytes);
    conn.receive(0, ALL, &mut stats, &mut Vec::new())
        .expect("well framed");
    assert_eq!(stats.protocol_errors, 1);
}
